package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
)

// Erasure is implemented by backends that can find every thread of a
// tenant or of a subject and keep tombstones: what the erasure by tenant
// and by subject (proxy/admin), and the retention pass, need beyond
// DeleteThread.
//
// A subject is an app-supplied name for whom a conversation is about (the
// X-Chronicle-Subject header, StartRun.Subject). A thread keeps every
// subject any of its runs carried, and each tenant has an index subject →
// threads. DeleteThread removes the thread's subjects and its entries in
// those indexes.
type Erasure interface {
	// TenantThreads lists every thread of the tenant the store holds,
	// including threads without a saved transcript (which the audit
	// listing skips), sorted, without duplicates.
	TenantThreads(ctx context.Context, tenant string) ([]string, error)
	// SubjectThreads lists the threads of the tenant that carried the
	// subject, sorted.
	SubjectThreads(ctx context.Context, tenant, subject string) ([]string, error)
	// ThreadSubjects lists the thread's subjects, sorted (none: empty).
	ThreadSubjects(ctx context.Context, k Key) ([]string, error)
	// AddTombstone records an erasure. It holds no content and no id in
	// clear (see Tombstone).
	AddTombstone(ctx context.Context, t Tombstone) error
	// ListTombstones returns the newest tombstones first, at most limit
	// (0: 100).
	ListTombstones(ctx context.Context, limit int) ([]Tombstone, error)
	// Lease takes, or renews when holder already holds it, a store-wide
	// named lease for ttl: the retention pass runs on one replica at a
	// time. It reports whether holder holds it now.
	Lease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
}

// Compactor is implemented by backends that can rewrite their files so
// that deleted values no longer sit below the key level (the embedded
// store compacts the key space after an erasure). Best effort.
type Compactor interface {
	CompactDeleted(ctx context.Context) error
}

// Tombstone is the audit record an erasure leaves: who, when, what scope,
// how much. Ids appear only as hashes (IDHash), so that the record itself
// keeps nothing of what was erased.
type Tombstone struct {
	ID     string    `json:"id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Reason string    `json:"reason,omitempty"`
	// Scope is "thread", "subject", "tenant" or "retention".
	Scope string `json:"scope"`
	// TenantHash and SubjectHash are IDHash of the erased tenant and
	// subject; ThreadHashes of each erased thread id (tenant scope: none,
	// the count says how many).
	TenantHash   string   `json:"tenant_sha256,omitempty"`
	SubjectHash  string   `json:"subject_sha256,omitempty"`
	ThreadHashes []string `json:"thread_sha256,omitempty"`
	Threads      int      `json:"threads"`
	Runs         int      `json:"runs"`
	Events       int64    `json:"events"`
	Messages     int      `json:"messages"`
	// Busy counts threads left because a run was in flight.
	Busy int `json:"busy,omitempty"`
}

// IDHash is the hex SHA-256 of an erased id, as a tombstone keeps it:
// whoever knows the id can check that it was erased; the record alone does
// not name it. (A guessable id, such as an e-mail address, can be found
// by trying candidates: give subjects opaque ids.)
func IDHash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ValidSubject checks a subject: 1–256 printable ASCII bytes without
// space, '{' or '}', as a tenant.
func ValidSubject(s string) error {
	if err := ValidTenant(s); err != nil {
		return fmt.Errorf("subject: %w", err)
	}
	return nil
}

// Shredder is the crypto-shredding hook: a store that encrypts at rest
// under per-tenant data keys implements it, and ShredTenant deletes the
// tenant's keys, so that a copy of its data left below the key level (an
// unrewritten AOF, an uncompacted table file, a backup) can no longer be
// read. The erasure of a tenant (proxy/admin) calls it after deleting the
// tenant's threads, when the store (or one it wraps) implements it.
type Shredder interface {
	ShredTenant(ctx context.Context, tenant string) error
}

// Unwrapper is implemented by stores that wrap another (the spool, the
// metering): Unwrap returns the wrapped store.
type Unwrapper interface {
	Unwrap() Store
}

// As finds, in st or the stores it wraps (Unwrapper), one that implements
// T: As[Erasure](st).
func As[T any](st Store) (T, bool) {
	for st != nil {
		if v, ok := st.(T); ok {
			return v, true
		}
		u, ok := st.(Unwrapper)
		if !ok {
			break
		}
		st = u.Unwrap()
	}
	var zero T
	return zero, false
}
