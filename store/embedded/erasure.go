package embedded

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
)

// The erasure's keys (store.Erasure):
//
//	t/<tenant>\x00<thread>/subj/<subject>       the thread's subjects
//	subjidx/<tenant>\x00<subject>\x00<thread>   the tenant's subject index
//	tomb/<^at ms><id>                           JSON store.Tombstone, newest first
var (
	bSubj   = []byte("subj")
	bTomb   = []byte("tomb")
	bSubjIx = []byte("subjidx")
)

var (
	_ store.Erasure   = (*Store)(nil)
	_ store.Compactor = (*Store)(nil)
)

// addSubject records sr.Subject on the thread and in the tenant's subject
// index, inside StartRun's step.
func addSubject(tx *Tx, tb *Bucket, k store.Key, subject string) error {
	if subject == "" {
		return nil
	}
	if err := tb.Bucket(bSubj).Put([]byte(subject), nil); err != nil {
		return err
	}
	return tx.Bucket(bSubjIx).Put([]byte(k.Tenant+"\x00"+subject+"\x00"+k.Thread), nil)
}

// dropSubjects removes the thread's entries from its tenant's subject
// index, inside DeleteThread's step (the thread's own keys go with its
// bucket).
func dropSubjects(tx *Tx, tb *Bucket, k store.Key) error {
	var subs []string
	if err := tb.Bucket(bSubj).ForEach(func(s, _ []byte) error {
		subs = append(subs, string(s))
		return nil
	}); err != nil {
		return err
	}
	for _, s := range subs {
		if err := tx.Bucket(bSubjIx).Delete([]byte(k.Tenant + "\x00" + s + "\x00" + k.Thread)); err != nil {
			return err
		}
	}
	return nil
}

// TenantThreads lists every thread of the tenant: those in its audit
// index and those that ever claimed a run id (a thread without a saved
// transcript is only there).
func (s *Store) TenantThreads(ctx context.Context, tenant string) ([]string, error) {
	if err := store.ValidTenant(tenant); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	pre := []byte(tenant + "\x00")
	err := s.view(func(tx *Tx) error {
		c := tx.Bucket(bRunIDs).Cursor()
		for k, v := c.Seek(pre); k != nil && bytes.HasPrefix(k, pre); k, v = c.Next() {
			set[string(v)] = true
		}
		c = tx.Bucket(bIdx).Cursor()
		for k, _ := c.Seek(pre); k != nil && bytes.HasPrefix(k, pre); k, _ = c.Next() {
			if len(k) > len(pre)+8 {
				set[string(k[len(pre)+8:])] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	slices.Sort(out)
	return out, nil
}

// SubjectThreads lists the tenant's threads that carried subject.
func (s *Store) SubjectThreads(ctx context.Context, tenant, subject string) ([]string, error) {
	if err := store.ValidTenant(tenant); err != nil {
		return nil, err
	}
	if err := store.ValidSubject(subject); err != nil {
		return nil, err
	}
	var out []string
	pre := []byte(tenant + "\x00" + subject + "\x00")
	err := s.view(func(tx *Tx) error {
		c := tx.Bucket(bSubjIx).Cursor()
		for k, _ := c.Seek(pre); k != nil && bytes.HasPrefix(k, pre); k, _ = c.Next() {
			out = append(out, string(k[len(pre):]))
		}
		return nil
	})
	return out, err
}

// ThreadSubjects lists the thread's subjects.
func (s *Store) ThreadSubjects(ctx context.Context, k store.Key) ([]string, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	out := []string{}
	err := s.view(func(tx *Tx) error {
		tb := threadBucket(tx, k)
		if tb == nil {
			return nil
		}
		return tb.Bucket(bSubj).ForEach(func(s, _ []byte) error {
			out = append(out, string(s))
			return nil
		})
	})
	return out, err
}

// AddTombstone keeps t, keyed newest first.
func (s *Store) AddTombstone(ctx context.Context, t store.Tombstone) error {
	if t.ID == "" {
		t.ID = newID()
	}
	if t.At.IsZero() {
		t.At = s.opts.Now()
	}
	raw, err := json.Marshal(t)
	if err != nil {
		return err
	}
	key := append(u64(^uint64(t.At.UnixMilli())), t.ID...)
	return s.update(func(tx *Tx) error { return tx.Bucket(bTomb).Put(key, raw) })
}

// ListTombstones returns the newest limit tombstones.
func (s *Store) ListTombstones(ctx context.Context, limit int) ([]store.Tombstone, error) {
	if limit <= 0 {
		limit = 100
	}
	out := []store.Tombstone{}
	err := s.view(func(tx *Tx) error {
		c := tx.Bucket(bTomb).Cursor()
		for k, v := c.First(); k != nil && len(out) < limit; k, v = c.Next() {
			var t store.Tombstone
			if err := json.Unmarshal(v, &t); err != nil {
				return fmt.Errorf("tombstone %x: %w", k, err)
			}
			out = append(out, t)
		}
		return nil
	})
	return out, err
}

// Lease: one process owns the embedded store (its directory is locked), so
// the lease is in memory.
func (s *Store) Lease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases == nil {
		s.leases = map[string]namedLease{}
	}
	now := s.opts.Now()
	if l, ok := s.leases[name]; ok && l.holder != holder && now.Before(l.until) {
		return false, nil
	}
	s.leases[name] = namedLease{holder: holder, until: now.Add(ttl)}
	return true, nil
}

type namedLease struct {
	holder string
	until  time.Time
}

// CompactDeleted compacts the whole key space down to its last level, so
// that the values a delete removed are no longer in any table file: a
// range deletion (DeleteThread) or a point deletion only hides them until
// a compaction drops them. The memtable is flushed first, so the
// write-ahead log that held them is released (see docs/auditors.md
// for what the disk may still hold).
func (s *Store) CompactDeleted(ctx context.Context) error {
	s.closing.RLock()
	defer s.closing.RUnlock()
	if s.closed {
		return unavailable(errClosed)
	}
	if err := s.db.Flush(); err != nil {
		return unavailable(err)
	}
	if err := s.db.Compact(ctx, []byte{0}, []byte{0xff, 0xff, 0xff, 0xff}, false); err != nil {
		return unavailable(err)
	}
	// Pebble removes the table files a compaction made obsolete in the
	// background, and keeps those an open reader (an export's snapshot)
	// still reads until it closes: wait a little for them to go.
	deadline := time.Now().Add(10 * time.Second)
	for {
		left, err := s.obsoleteTables()
		if err != nil {
			return unavailable(err)
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			log.Printf("embedded: after an erasure's compaction, %d table files that may hold erased values wait for open readers to end (%v)", len(left), left)
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// obsoleteTables lists the table files in the key space's directory that
// are no longer part of it (awaiting deletion).
func (s *Store) obsoleteTables() ([]string, error) {
	levels, err := s.db.SSTables()
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	for _, ts := range levels {
		for _, t := range ts {
			live[fmt.Sprintf("%s.sst", t.FileNum)] = true
		}
	}
	ents, err := os.ReadDir(s.kvDir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".sst") && !live[e.Name()] {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// DebugDump returns every key of the key space (spelled as DebugKeys
// spells it) with its value, and every file of blobs/ as "blobs/<name>"
// with its content, for tests that prove an erasure leaves nothing of
// what it erased.
func (s *Store) DebugDump(ctx context.Context) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := s.view(func(tx *Tx) error {
		it, err := tx.r.NewIter(nil)
		if err != nil {
			return err
		}
		defer it.Close()
		for ok := it.First(); ok; ok = it.Next() {
			path, _ := decodeKey(it.Key())
			v, err := it.ValueAndErr()
			if err != nil {
				return err
			}
			out[path] = append([]byte{}, v...)
		}
		return it.Error()
	})
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(s.blobDir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(s.blobDir, e.Name()))
		if err != nil {
			return nil, err
		}
		out["blobs/"+e.Name()] = b
	}
	return out, nil
}
