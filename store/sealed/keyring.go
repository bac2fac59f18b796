package sealed

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
)

// KEK is a key-encryption key: 32 bytes (AES-256) named by an id. It wraps
// tenants' data keys and is never stored.
type KEK struct {
	ID  string
	Key []byte
}

var kekID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// CheckKEK reports what is wrong with k, if anything.
func CheckKEK(k KEK) error {
	if !kekID.MatchString(k.ID) {
		return fmt.Errorf("key id %q: want 1-64 of [A-Za-z0-9._-]", k.ID)
	}
	if len(k.Key) != 32 {
		return fmt.Errorf("key %q: want 32 bytes (AES-256), got %d", k.ID, len(k.Key))
	}
	return nil
}

// Key ids inside a tenant (store.Keys): "d:<kek id>" is the data key
// created while that KEK was current, which encrypts the writes made
// under it; "mac" keys the tenant's hashes and fingerprints, and never
// changes (a hash is compared with hashes stored long before).
const (
	dataPrefix = "d:"
	macID      = "mac"
)

// Wrapped data key: version, KEK id length, KEK id, nonce, AES-GCM of the
// 32-byte key with the tenant and key id as additional data (a wrapped key
// moved to another tenant or id does not open).
const wrapVersion = 1

// dataKey is an unwrapped data key, ready to use.
type dataKey struct {
	id   string
	hdr  []byte      // the ciphertext header naming it (seal.go)
	aead cipher.AEAD // AES-256-GCM under the key
	siv  []byte      // derives deterministic nonces (sealFixed)
	// For the mac key: hashes and fingerprints.
	block cipher.Block
	fp    []byte
	hash  func(store.Hash) store.Hash
}

func derive(key []byte, label string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("chronicle/sealed/" + label))
	return m.Sum(nil)
}

func newDataKey(id string, raw []byte) (*dataKey, error) {
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	dk := &dataKey{id: id, hdr: header(id), aead: aead, siv: derive(raw, "nonce")}
	if id == macID {
		if dk.block, err = aes.NewCipher(derive(raw, "hash")); err != nil {
			return nil, err
		}
		dk.fp = derive(raw, "fingerprint")
		dk.hash = func(h store.Hash) store.Hash {
			var out store.Hash
			dk.block.Encrypt(out[:], h[:])
			return out
		}
	}
	return dk, nil
}

// Keyring holds the KEKs and the tenants' unwrapped data keys (a bounded
// cache; the store keeps them wrapped).
type Keyring struct {
	keys    store.Keys
	current KEK
	keks    map[string]cipher.AEAD
	max     int

	mu    sync.RWMutex
	cache map[cacheKey]cachedKey
	now   func() time.Time
	// refreshes counts the background reads of stale keys in flight.
	refreshes sync.WaitGroup
}

// cacheKey names a tenant's data key in the cache (a struct, so that a
// lookup builds no string).
type cacheKey struct{ tenant, id string }

// cachedKey is an unwrapped data key and when it was read from the store.
type cachedKey struct {
	dk         *dataKey
	read       time.Time
	refreshing bool
}

// KeyCacheTTL is how long an unwrapped data key is used before the store is
// asked again, in the background, whether it still has it. A tenant's
// erasure deletes its keys (ShredTenant) and drops them from this
// replica's cache at once; another replica drops its copy once a refresh
// after this time finds the key gone, and until then may still write under
// it, values no reader can then open: erase a tenant once its traffic has
// stopped. A turn never waits for a refresh, and a refresh that cannot
// reach the store keeps the key (a store outage must not stop writes from
// reaching the spool).
const KeyCacheTTL = time.Minute

// refreshTimeout bounds one background refresh of a cached key.
const refreshTimeout = 10 * time.Second

// DefaultCacheKeys bounds the unwrapped data keys a Keyring keeps.
const DefaultCacheKeys = 10000

// NewKeyring makes a keyring that wraps new data keys under current and
// unwraps with current or any of previous. It checks every KEK.
func NewKeyring(keys store.Keys, current KEK, previous ...KEK) (*Keyring, error) {
	r := &Keyring{keys: keys, current: current, keks: map[string]cipher.AEAD{}, max: DefaultCacheKeys, cache: map[cacheKey]cachedKey{}, now: time.Now}
	for _, k := range append([]KEK{current}, previous...) {
		if err := CheckKEK(k); err != nil {
			return nil, err
		}
		if _, dup := r.keks[k.ID]; dup {
			return nil, fmt.Errorf("key id %q given twice", k.ID)
		}
		b, _ := aes.NewCipher(k.Key)
		r.keks[k.ID], _ = cipher.NewGCM(b)
	}
	return r, nil
}

// Current is the id of the KEK new data keys are wrapped under.
func (r *Keyring) Current() string { return r.current.ID }

func wrapAAD(tenant, id string) []byte {
	return []byte("chronicle/dk/v1\x00" + tenant + "\x00" + id)
}

// wrap seals raw under the current KEK.
func (r *Keyring) wrap(tenant, id string, raw []byte) []byte {
	kid := r.current.ID
	out := make([]byte, 0, 2+len(kid)+12+len(raw)+16)
	out = append(out, wrapVersion, byte(len(kid)))
	out = append(out, kid...)
	nonce := make([]byte, 12)
	if _, err := rand.Read(nonce); err != nil {
		panic(err) // crypto/rand does not fail
	}
	out = append(out, nonce...)
	return r.keks[kid].Seal(out, nonce, raw, wrapAAD(tenant, id))
}

// ErrUnknownKEK: a data key is wrapped under a KEK the config does not
// list (add it to previous_keys, or re-wrap with it listed).
var ErrUnknownKEK = errors.New("sealed: data key wrapped under a key-encryption key that is not configured")

// unwrap opens a wrapped data key and names the KEK it was wrapped under.
func (r *Keyring) unwrap(tenant, id string, w []byte) (raw []byte, kek string, err error) {
	if len(w) < 2 || w[0] != wrapVersion || len(w) < 2+int(w[1])+12+16 {
		return nil, "", fmt.Errorf("sealed: key %q of tenant %q is not a wrapped key", id, tenant)
	}
	kek = string(w[2 : 2+int(w[1])])
	a, ok := r.keks[kek]
	if !ok {
		return nil, kek, fmt.Errorf("%w: key %q of tenant %q is wrapped under %q", ErrUnknownKEK, id, tenant, kek)
	}
	rest := w[2+int(w[1]):]
	raw, err = a.Open(nil, rest[:12], rest[12:], wrapAAD(tenant, id))
	if err != nil || len(raw) != 32 {
		return nil, kek, fmt.Errorf("%w: key %q of tenant %q does not open under key-encryption key %q (the wrong key, or the wrapped key was altered)", ErrTampered, id, tenant, kek)
	}
	return raw, kek, nil
}

// get returns the tenant's data key id, from the cache or the store;
// create makes it when the store has none.
func (r *Keyring) get(ctx context.Context, tenant, id string, create bool) (*dataKey, error) {
	ck := cacheKey{tenant, id}
	now := r.now()
	r.mu.RLock()
	c, ok := r.cache[ck]
	r.mu.RUnlock()
	if ok {
		if now.Sub(c.read) >= KeyCacheTTL && !c.refreshing {
			r.refresh(ck, tenant, id)
		}
		return c.dk, nil
	}
	w, err := r.keys.GetKey(ctx, tenant, id)
	if errors.Is(err, store.ErrNotFound) && create {
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			return nil, err
		}
		w, err = r.keys.CreateKey(ctx, tenant, id, r.wrap(tenant, id, raw))
		if err != nil {
			return nil, err
		}
	} else if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: tenant %q has no key %q (erased, or never made)", ErrNoKey, tenant, id)
	} else if err != nil {
		return nil, err
	}
	raw, _, err := r.unwrap(tenant, id, w)
	if err != nil {
		return nil, err
	}
	dk, err := newDataKey(id, raw)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if len(r.cache) >= r.max {
		for k := range r.cache { // bounded: drop one at random
			delete(r.cache, k)
			break
		}
	}
	r.cache[ck] = cachedKey{dk: dk, read: now}
	r.mu.Unlock()
	return dk, nil
}

// refresh reads a stale cached key again on a goroutine of its own: gone
// from the store (a shred), it leaves the cache; found, it is cached anew
// (under whatever the store holds now); unreadable (the store away, a KEK
// no longer configured), the cached key stays for another KeyCacheTTL.
func (r *Keyring) refresh(ck cacheKey, tenant, id string) {
	r.mu.Lock()
	c, ok := r.cache[ck]
	if !ok || c.refreshing {
		r.mu.Unlock()
		return
	}
	c.refreshing = true
	r.cache[ck] = c
	r.mu.Unlock()
	r.refreshes.Add(1)
	go func() {
		defer r.refreshes.Done()
		ctx, cancel := context.WithTimeout(context.Background(), refreshTimeout)
		w, err := r.keys.GetKey(ctx, tenant, id)
		cancel()
		dk := c.dk
		if err == nil {
			if raw, _, uerr := r.unwrap(tenant, id, w); uerr == nil {
				if fresh, nerr := newDataKey(id, raw); nerr == nil {
					dk = fresh
				}
			}
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if cur, ok := r.cache[ck]; !ok || cur.dk != c.dk {
			return // forgotten or replaced meanwhile
		}
		if errors.Is(err, store.ErrNotFound) {
			delete(r.cache, ck)
			return
		}
		r.cache[ck] = cachedKey{dk: dk, read: r.now()}
	}()
}

// ErrNoKey: the data key a value names is not in the store.
var ErrNoKey = errors.New("sealed: no such data key")

// writeKey is the tenant's data key for new writes.
func (r *Keyring) writeKey(ctx context.Context, tenant string) (*dataKey, error) {
	return r.get(ctx, tenant, dataPrefix+r.current.ID, true)
}

// macKey is the tenant's key for hashes and fingerprints.
func (r *Keyring) macKey(ctx context.Context, tenant string) (*dataKey, error) {
	return r.get(ctx, tenant, macID, true)
}

// Forget drops the tenant's unwrapped keys from the cache (after its keys
// were deleted from the store).
func (r *Keyring) Forget(tenant string) {
	r.mu.Lock()
	for k := range r.cache {
		if k.tenant == tenant {
			delete(r.cache, k)
		}
	}
	r.mu.Unlock()
}

// RewrapStats is what Rewrap did.
type RewrapStats struct {
	Keys      int // data keys seen
	Rewrapped int // wrapped again under the current KEK
	Current   int // already under it
}

// Rewrap wraps every tenant's data keys under the current KEK, so that the
// older KEKs can be dropped from the config. A key wrapped under a KEK the
// keyring does not know is an error (nothing after it is done); running it
// again resumes.
func (r *Keyring) Rewrap(ctx context.Context) (RewrapStats, error) {
	var st RewrapStats
	all, err := r.keys.ListKeys(ctx, "")
	if err != nil {
		return st, err
	}
	for _, k := range all {
		st.Keys++
		raw, kek, err := r.unwrap(k.Tenant, k.ID, k.Wrapped)
		if err != nil {
			return st, err
		}
		if kek == r.current.ID {
			st.Current++
			continue
		}
		if err := r.keys.ReplaceKey(ctx, k.Tenant, k.ID, k.Wrapped, r.wrap(k.Tenant, k.ID, raw)); err != nil {
			return st, fmt.Errorf("re-wrapping key %q of tenant %q: %w", k.ID, k.Tenant, err)
		}
		st.Rewrapped++
	}
	return st, nil
}

// The check key: a data key of a tenant of its own that no content is
// sealed under, made by the first start with encryption on, so a later
// start can tell at once that its key-encryption keys open the store's
// keys. (A client tenant may be named so too; it only shares the name.)
const (
	checkTenant = "chronicle:keycheck"
	checkID     = "check"
)

// Check makes sure the configured key-encryption keys open the store's
// data keys: it unwraps the store's check key (made on first use). A
// wrong key, or one whose id the store does not know, is an error naming
// the id.
func (r *Keyring) Check(ctx context.Context) error {
	w, err := r.keys.GetKey(ctx, checkTenant, checkID)
	if errors.Is(err, store.ErrNotFound) {
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			return err
		}
		w, err = r.keys.CreateKey(ctx, checkTenant, checkID, r.wrap(checkTenant, checkID, raw))
	}
	if err != nil {
		return fmt.Errorf("reading the store's check key: %w", err)
	}
	if _, kek, err := r.unwrap(checkTenant, checkID, w); err != nil {
		if errors.Is(err, ErrUnknownKEK) {
			return fmt.Errorf("the store's data keys are wrapped under key id %q, which neither key_id nor previous_keys names", kek)
		}
		return fmt.Errorf("the key configured as id %q does not open the store's data keys (a wrong key for that id)", kek)
	}
	return nil
}
