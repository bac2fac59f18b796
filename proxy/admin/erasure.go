package admin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
)

// Erasure by subject and by tenant (issue 31). An erasure deletes every
// idle thread in its scope with everything it owns (DeleteThread: runs,
// event logs, interrupts, large values, index entries, subjects), leaves
// the threads with a run in flight and names them (Erased.Busy: erase
// again once they end), compacts what the store keeps below the key level
// where it can (store.Compactor), and writes a tombstone that keeps who,
// when, what scope (ids as hashes only) and how much, never content.

// ErrNoErasure: the store cannot enumerate a subject's or a tenant's
// threads (it does not implement store.Erasure).
var ErrNoErasure = errors.New("proxy: the store does not support erasure")

// Eraser is who asks and why, kept in the tombstone.
type Eraser struct {
	Actor  string // "admin" when empty
	Reason string
}

// Erased is what an erasure removed.
type Erased struct {
	Scope    string `json:"scope"`
	Tenant   string `json:"tenant"`
	Subject  string `json:"subject,omitempty"`
	Threads  int    `json:"threads"`
	Runs     int    `json:"runs"`
	Events   int64  `json:"events"`
	Messages int    `json:"messages"`
	// Busy are the threads left because a run was in flight on them.
	Busy []string `json:"busy"`
	// Complete: nothing in scope was left.
	Complete  bool   `json:"complete"`
	Tombstone string `json:"tombstone"`
	// Compacted: the store rewrote its files so that the erased values
	// are no longer below the key level either (the embedded store).
	Compacted bool `json:"compacted"`
}

// CheckEraser validates the caller's actor and reason: printable, short.
func CheckEraser(e Eraser) error {
	for name, v := range map[string]string{"actor": e.Actor, "reason": e.Reason} {
		if len(v) > 256 {
			return fmt.Errorf("%w: %s longer than 256 bytes", ErrBadFilter, name)
		}
		for _, r := range v {
			if r < ' ' || r == 0x7f {
				return fmt.Errorf("%w: %s has a control character", ErrBadFilter, name)
			}
		}
	}
	return nil
}

// EraseSubject erases every thread of the tenant that carried subject.
func (a *Audit) EraseSubject(ctx context.Context, tenant, subject string, by Eraser) (Erased, error) {
	if err := store.ValidTenant(tenant); err != nil {
		return Erased{}, fmt.Errorf("%w: %w", ErrBadFilter, err)
	}
	if err := store.ValidSubject(subject); err != nil {
		return Erased{}, fmt.Errorf("%w: %w", ErrBadFilter, err)
	}
	e, ok := store.As[store.Erasure](a.st)
	if !ok {
		return Erased{}, ErrNoErasure
	}
	threads, err := e.SubjectThreads(ctx, tenant, subject)
	if err != nil {
		return Erased{}, err
	}
	out := Erased{Scope: "subject", Tenant: tenant, Subject: subject}
	ts := store.Tombstone{Scope: "subject", TenantHash: store.IDHash(tenant), SubjectHash: store.IDHash(tenant, subject)}
	return a.erase(ctx, e, tenant, threads, by, out, ts)
}

// EraseTenant erases every thread of the tenant, then (with encryption at
// rest) its data keys.
func (a *Audit) EraseTenant(ctx context.Context, tenant string, by Eraser) (Erased, error) {
	if err := store.ValidTenant(tenant); err != nil {
		return Erased{}, fmt.Errorf("%w: %w", ErrBadFilter, err)
	}
	e, ok := store.As[store.Erasure](a.st)
	if !ok {
		return Erased{}, ErrNoErasure
	}
	threads, err := e.TenantThreads(ctx, tenant)
	if err != nil {
		return Erased{}, err
	}
	out := Erased{Scope: "tenant", Tenant: tenant}
	ts := store.Tombstone{Scope: "tenant", TenantHash: store.IDHash(tenant)}
	out, err = a.erase(ctx, e, tenant, threads, by, out, ts)
	if err != nil || !out.Complete {
		return out, err
	}
	// Crypto-shredding: with encryption at rest (store/sealed), the
	// tenant's data keys go too, so that what the disk still holds below
	// the key level can no longer be read. Only once every thread is
	// gone: a busy thread still needs its keys.
	if sh, ok := store.As[store.Shredder](a.st); ok {
		if err := sh.ShredTenant(ctx, tenant); err != nil {
			return out, fmt.Errorf("erased the threads, but not the tenant's data keys: %w", err)
		}
	}
	return out, nil
}

// erase deletes the idle threads among threads and records the tombstone.
func (a *Audit) erase(ctx context.Context, e store.Erasure, tenant string, threads []string, by Eraser, out Erased, ts store.Tombstone) (Erased, error) {
	out.Busy = []string{}
	for _, th := range threads {
		k := store.Key{Tenant: tenant, Thread: th}
		n, err := a.deleteCounted(ctx, k, time.Time{})
		if errors.Is(err, ErrBusy) {
			out.Busy = append(out.Busy, th)
			continue
		}
		if err != nil {
			// Part of the scope is gone: the tombstone still records
			// that much, even when the caller's time ran out.
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			// (The error may name ids; the tombstone does not keep it.)
			reason := strings.TrimSpace(by.Reason + " (interrupted before the end: call again)")
			out.Tombstone, _ = a.tombstone(tctx, e, Eraser{Actor: by.Actor, Reason: reason}, ts, out)
			return out, err
		}
		if !n.found {
			continue // an index entry alone, dropped by the delete
		}
		out.Threads++
		out.Runs += n.runs
		out.Events += n.events
		out.Messages += n.messages
		if ts.Scope != "tenant" {
			ts.ThreadHashes = append(ts.ThreadHashes, store.IDHash(tenant, th))
		}
	}
	out.Complete = len(out.Busy) == 0
	var compactErr error
	if out.Threads > 0 {
		compactErr = a.compact(ctx)
		out.Compacted = compactErr == nil
	}
	// The deletes are done: their tombstone is written whatever the
	// compaction came to.
	id, err := a.tombstone(ctx, e, by, ts, out)
	out.Tombstone = id
	if err == nil && compactErr != nil {
		err = fmt.Errorf("erased, but the store's compaction failed: %w", compactErr)
	}
	return out, err
}

// compact has the store drop deleted values below the key level, where it
// can (store.Compactor); nil when it has nothing to do.
func (a *Audit) compact(ctx context.Context) error {
	if c, ok := store.As[store.Compactor](a.st); ok {
		return c.CompactDeleted(ctx)
	}
	return nil
}

func (a *Audit) tombstone(ctx context.Context, e store.Erasure, by Eraser, ts store.Tombstone, out Erased) (string, error) {
	ts.ID = newTombstoneID()
	ts.Actor, ts.Reason = by.Actor, by.Reason
	if ts.Actor == "" {
		ts.Actor = "admin"
	}
	ts.Threads, ts.Runs, ts.Events, ts.Messages, ts.Busy = out.Threads, out.Runs, out.Events, out.Messages, len(out.Busy)
	if err := e.AddTombstone(ctx, ts); err != nil {
		return "", fmt.Errorf("erased, but the tombstone was not written: %w", err)
	}
	return ts.ID, nil
}

// counts are what one thread's deletion removed.
type counts struct {
	found    bool // the store had the thread (not only an index entry)
	runs     int
	events   int64
	messages int
}

// deleteCounted deletes one thread, counting what it held first; a
// thread with a run in flight is ErrBusy and stays. A thread the store no
// longer has (an index entry left by a crash) is deleted all the same,
// which drops the entry, and counts nothing. With updatedBy set (the
// retention pass), a thread updated after it is errUpdated and stays: a
// turn came since the pass found it expired.
func (a *Audit) deleteCounted(ctx context.Context, k store.Key, updatedBy time.Time) (counts, error) {
	var n counts
	rs, err := a.st.ListRuns(ctx, k)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return n, err
	}
	n.found = err == nil
	for _, r := range rs {
		if r.Status == store.Running {
			return n, ErrBusy
		}
		n.runs++
		n.events += r.Events
	}
	th, err := a.st.LoadThread(ctx, k)
	switch {
	case err == nil:
		if !updatedBy.IsZero() && th.UpdatedAt.After(updatedBy) {
			return n, errUpdated
		}
		n.found = true
		n.messages = len(th.Messages)
	case !errors.Is(err, store.ErrNotFound):
		return n, err
	}
	return n, a.st.DeleteThread(ctx, k)
}

// errUpdated: the thread changed since the retention pass listed it.
var errUpdated = errors.New("admin: the thread was updated since it was found expired")

// Tombstones lists the newest erasure records.
func (a *Audit) Tombstones(ctx context.Context, limit int) ([]store.Tombstone, error) {
	e, ok := store.As[store.Erasure](a.st)
	if !ok {
		return nil, ErrNoErasure
	}
	return e.ListTombstones(ctx, limit)
}

func newTombstoneID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "tomb_" + hex.EncodeToString(b[:])
}
