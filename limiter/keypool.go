package limiter

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Secret is an upstream credential. It prints as [redacted] through fmt
// (%v, %s, %q, %#v), slog and encoding; Reveal is the one way to read it.
type Secret string

const redacted = "[redacted]"

// Reveal returns the credential, for the one header that carries it.
func (s Secret) Reveal() string { return string(s) }

// String implements fmt.Stringer.
func (s Secret) String() string { return redacted }

// GoString implements fmt.GoStringer.
func (s Secret) GoString() string { return redacted }

// Format prints [redacted] for every verb, so %x and %d cannot leak it.
func (s Secret) Format(f fmt.State, verb rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalText implements encoding.TextMarshaler (JSON, YAML).
func (s Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// Fingerprint names a key in logs without revealing it: the first 8 hex
// digits of its SHA-256.
func (s Secret) Fingerprint() string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:4])
}

// KeyPool spreads requests over a connection's upstream keys: Acquire picks
// the key with the fewest requests in flight among those not cooling down;
// a 429 cools a key for the upstream's Retry-After; a 401 removes it. Safe
// for concurrent use. The pool is in-process: each replica cools and
// removes keys on what it sees.
type KeyPool struct {
	now      func() time.Time
	log      *slog.Logger
	cooldown time.Duration

	mu   sync.Mutex
	keys []*poolKey
}

type poolKey struct {
	secret   Secret
	fp       string
	inFlight int
	until    time.Time // cooling down until
	removed  bool
}

// KeyPoolOptions configure a KeyPool; the zero value is usable.
type KeyPoolOptions struct {
	Now             func() time.Time // default time.Now
	Logger          *slog.Logger     // default slog.Default()
	DefaultCooldown time.Duration    // a 429 without Retry-After; default 1s
}

// NewKeyPool returns a pool over keys (duplicates are kept once).
func NewKeyPool(keys []Secret, o KeyPoolOptions) *KeyPool {
	p := &KeyPool{now: o.Now, log: o.Logger, cooldown: o.DefaultCooldown}
	if p.now == nil {
		p.now = time.Now
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.cooldown <= 0 {
		p.cooldown = time.Second
	}
	seen := map[Secret]bool{}
	for _, k := range keys {
		if k == "" || seen[k] {
			continue
		}
		seen[k] = true
		p.keys = append(p.keys, &poolKey{secret: k, fp: k.Fingerprint()})
	}
	return p
}

// KeyLease is one request's use of a key; call Done once with the upstream
// status.
type KeyLease struct {
	p    *KeyPool
	k    *poolKey
	once sync.Once
}

// Secret is the key to send upstream.
func (l *KeyLease) Secret() Secret { return l.k.secret }

// Fingerprint names the key in logs.
func (l *KeyLease) Fingerprint() string { return l.k.fp }

// Acquire picks the least busy usable key. When every live key is cooling
// down it returns a *RateLimitError (Kind "keys") whose RetryAfter is the
// earliest end of a cooldown; with no live key left, ErrNoKeys.
func (p *KeyPool) Acquire() (*KeyLease, error) {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	var best *poolKey
	var soonest time.Duration = -1
	for _, k := range p.keys {
		if k.removed {
			continue
		}
		if wait := k.until.Sub(now); wait > 0 {
			if soonest < 0 || wait < soonest {
				soonest = wait
			}
			continue
		}
		if best == nil || k.inFlight < best.inFlight {
			best = k
		}
	}
	if best == nil {
		if soonest < 0 {
			return nil, ErrNoKeys
		}
		return nil, &RateLimitError{Kind: "keys", RetryAfter: soonest}
	}
	best.inFlight++
	return &KeyLease{p: p, k: best}, nil
}

// Done ends the lease with the upstream's HTTP status (0 when none came
// back): 429 cools the key for retryAfter (the upstream's Retry-After; the
// pool default when 0), 401 removes the key and logs its fingerprint.
// Later calls are no-ops.
func (l *KeyLease) Done(status int, retryAfter time.Duration) {
	l.once.Do(func() {
		p := l.p
		p.mu.Lock()
		k := l.k
		k.inFlight--
		var removedNow bool
		switch status {
		case 429:
			if retryAfter <= 0 {
				retryAfter = p.cooldown
			}
			if until := p.now().Add(retryAfter); until.After(k.until) {
				k.until = until
			}
		case 401:
			removedNow = !k.removed
			k.removed = true
		}
		p.mu.Unlock()
		if removedNow {
			p.log.Warn("limiter: upstream key rejected (401); removed from pool", "key_fingerprint", k.fp)
		}
	})
}

// KeyStats is one key's state, named by fingerprint.
type KeyStats struct {
	Fingerprint string
	InFlight    int
	CoolingFor  time.Duration
	Removed     bool
}

// Stats reports every key's state, in configuration order.
func (p *KeyPool) Stats() []KeyStats {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]KeyStats, len(p.keys))
	for i, k := range p.keys {
		c := k.until.Sub(now)
		if c < 0 {
			c = 0
		}
		out[i] = KeyStats{Fingerprint: k.fp, InFlight: k.inFlight, CoolingFor: c, Removed: k.removed}
	}
	return out
}
