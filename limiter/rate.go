package limiter

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Window is the period RPM and TPM are counted over.
const Window = time.Minute

// Limits are the rate limits of one key. A zero field means no limit.
//
// Both are token buckets (GCRA) of capacity RPM (or TPM) that refill
// evenly over a minute: a burst of RPM requests passes at once, then one
// more every minute/RPM. This is the arithmetic OpenAI-style x-ratelimit-*
// headers describe.
type Limits struct {
	RPM int64 // requests per minute
	TPM int64 // tokens per minute
}

// Quota is one limit's state after a decision, for x-ratelimit-* headers.
type Quota struct {
	Limit     int64         // the configured limit; 0 = unlimited
	Remaining int64         // what may still pass at once
	Reset     time.Duration // until the bucket is full again
}

// RateLimitError is the error a RateLimiter returns when it refuses a
// request; errors.Is(err, ErrRateLimited) holds.
type RateLimitError struct {
	Kind       string        // "requests" or "tokens" (RateLimiter), "keys" (KeyPool): what refused
	RetryAfter time.Duration // wait this long and the same request passes (if nothing else is admitted meanwhile)
	Requests   Quota
	Tokens     Quota
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("limiter: rate limited (%s), retry after %s", e.Kind, e.RetryAfter)
}

// Unwrap makes the error match ErrRateLimited.
func (e *RateLimitError) Unwrap() error { return ErrRateLimited }

// RateLimiter admits requests against per-key limits. A key names what is
// limited — "conn:<name>", "tenant:<id>" — and the caller passes the limits
// with each call, so the limiter holds no configuration. To limit both a
// connection and a tenant, admit against each key and Refund the first if
// the second refuses. Implementations are safe for concurrent use.
type RateLimiter interface {
	// Admit charges one request and tokens (an estimate: prompt plus
	// max_tokens, or a configured cap; see EstimateTokens) against key. Either
	// both are charged or, with a *RateLimitError, neither. A reservation
	// larger than TPM is charged as TPM, so it waits for a full bucket
	// rather than never passing.
	Admit(ctx context.Context, key string, lim Limits, tokens int64) (Reservation, error)
}

// Reservation is an admitted request's hold on its key's limits. Exactly one
// of Settle or Refund takes effect; later calls are no-ops.
type Reservation interface {
	// Quota reports the limits' state right after admission.
	Quota() (requests, tokens Quota)
	// Settle replaces the reserved tokens with the real usage when the turn
	// ends: less is given back, more is charged as debt the next requests
	// wait for. An aborted stream settles with what it used (0 if unknown
	// counts as a full token refund).
	Settle(ctx context.Context, actual int64) error
	// Refund gives back the tokens and the request: use it when the request
	// never went upstream (a later limit or the gate refused it).
	Refund(ctx context.Context) error
}

// EstimateTokens is a rough token estimate for a request body of bodyLen
// bytes: about four bytes per token, rounded up. It is an estimate, not a
// tokenizer; callers add max_tokens (or a configured cap) for the reply and
// settle the reservation with the real usage later.
func EstimateTokens(bodyLen int) int {
	if bodyLen <= 0 {
		return 0
	}
	return (bodyLen + 3) / 4
}

// gcra is the arithmetic both implementations share (the Lua script in
// redislimit mirrors it): tat is the theoretical arrival time, in the
// clock's nanoseconds; a cost of c moves it c*Window/limit forward; the
// request passes when the moved tat is no more than Window ahead of now.
// It returns the new tat, whether it passes, and the quota / retry-after.
func gcra(tat, now int64, limit, cost int64) (newTAT int64, ok bool, q Quota, retry time.Duration) {
	if cost > limit {
		cost = limit
	}
	if tat < now {
		tat = now
	}
	per := float64(Window) / float64(limit)
	newTAT = tat + int64(math.Ceil(float64(cost)*per))
	w := int64(Window)
	if newTAT-now > w {
		retry = time.Duration(newTAT - w - now)
		return tat, false, quota(tat, now, limit, per), retry
	}
	return newTAT, true, quota(newTAT, now, limit, per), 0
}

func quota(tat, now, limit int64, per float64) Quota {
	ahead := tat - now
	if ahead < 0 {
		ahead = 0
	}
	rem := int64(math.Floor(float64(int64(Window)-ahead) / per))
	if rem < 0 {
		rem = 0
	}
	return Quota{Limit: limit, Remaining: rem, Reset: time.Duration(ahead)}
}

// LocalRateLimiter is the in-process RateLimiter, for a single replica.
//
// It does its own GCRA rather than wrapping golang.org/x/time/rate:
// rate.Reservation.CancelAt gives nothing back once the reservation's time
// has passed, so a token reservation could not be settled for less after
// the stream, and the local and shared limiters would differ.
type LocalRateLimiter struct {
	now func() time.Time

	mu     sync.Mutex
	keys   map[string]*bucket
	admits int
}

type bucket struct{ req, tok int64 }

// LocalOption configures a LocalRateLimiter.
type LocalOption func(*LocalRateLimiter)

// WithClock makes the limiter read time from now (tests use a fake clock).
func WithClock(now func() time.Time) LocalOption {
	return func(l *LocalRateLimiter) { l.now = now }
}

// NewLocalRateLimiter returns an in-process rate limiter.
func NewLocalRateLimiter(opts ...LocalOption) *LocalRateLimiter {
	l := &LocalRateLimiter{now: time.Now, keys: map[string]*bucket{}}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Admit implements RateLimiter.
func (l *LocalRateLimiter) Admit(ctx context.Context, key string, lim Limits, tokens int64) (Reservation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if tokens < 0 {
		tokens = 0
	}
	now := l.now().UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.admits++
	if l.admits%1024 == 0 {
		l.sweep(now)
	}
	b := l.keys[key]
	if b == nil {
		b = &bucket{}
		l.keys[key] = b
	}
	var rq, tq Quota
	newReq, newTok := b.req, b.tok
	var err *RateLimitError
	if lim.RPM > 0 {
		var ok bool
		var retry time.Duration
		newReq, ok, rq, retry = gcra(b.req, now, lim.RPM, 1)
		if !ok {
			err = &RateLimitError{Kind: "requests", RetryAfter: retry}
		}
	}
	if lim.TPM > 0 {
		var ok bool
		var retry time.Duration
		newTok, ok, tq, retry = gcra(b.tok, now, lim.TPM, tokens)
		if !ok && (err == nil || retry > err.RetryAfter) {
			err = &RateLimitError{Kind: "tokens", RetryAfter: retry}
		}
	}
	if err != nil {
		err.Requests, err.Tokens = rq, tq
		return nil, err
	}
	b.req, b.tok = newReq, newTok
	charged := tokens
	if lim.TPM > 0 && charged > lim.TPM {
		charged = lim.TPM
	}
	return &localReservation{l: l, key: key, lim: lim, reserved: charged, rq: rq, tq: tq}, nil
}

// sweep forgets keys whose buckets are full again (indistinguishable from
// new ones); l.mu is held.
func (l *LocalRateLimiter) sweep(now int64) {
	for k, b := range l.keys {
		if b.req <= now && b.tok <= now {
			delete(l.keys, k)
		}
	}
}

// adjust moves key's tat by delta tokens and, if refundReq, gives one
// request back.
func (l *LocalRateLimiter) adjust(key string, lim Limits, delta int64, refundReq bool) {
	now := l.now().UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.keys[key]
	if b == nil {
		b = &bucket{}
		l.keys[key] = b
	}
	if lim.TPM > 0 && delta != 0 {
		b.tok = shift(b.tok, now, delta, lim.TPM)
	}
	if lim.RPM > 0 && refundReq {
		b.req = shift(b.req, now, -1, lim.RPM)
	}
}

// shift moves a tat by n units of a limit; a tat is never earlier than now.
func shift(tat, now, n, limit int64) int64 {
	tat += int64(math.Ceil(float64(n) * float64(Window) / float64(limit)))
	if tat < now {
		tat = now
	}
	return tat
}

type localReservation struct {
	l        *LocalRateLimiter
	key      string
	lim      Limits
	reserved int64
	rq, tq   Quota
	done     atomic.Bool
}

func (r *localReservation) Quota() (requests, tokens Quota) { return r.rq, r.tq }

func (r *localReservation) Settle(ctx context.Context, actual int64) error {
	if !r.done.CompareAndSwap(false, true) {
		return nil
	}
	if actual < 0 {
		actual = 0
	}
	r.l.adjust(r.key, r.lim, actual-r.reserved, false)
	return nil
}

func (r *localReservation) Refund(ctx context.Context) error {
	if !r.done.CompareAndSwap(false, true) {
		return nil
	}
	r.l.adjust(r.key, r.lim, -r.reserved, true)
	return nil
}
