package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/storetest"
)

// metaOf reads the thread's meta as stored.
func metaOf(t *testing.T, s *Store, k store.Key) threadMeta {
	t.Helper()
	var m threadMeta
	err := s.view(func(tx *Tx) error {
		tb := threadBucket(tx, k)
		if tb == nil {
			return fmt.Errorf("thread %s: none", k)
		}
		var err error
		m, err = loadMeta(tb)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// setDigestField rewrites the meta's digest field through the committer
// (as an older chronicle, or a stale record, would leave it).
func setDigestField(t *testing.T, s *Store, k store.Key, dg func(m *threadMeta) string) {
	t.Helper()
	err := s.update(func(tx *Tx) error {
		tb := threadBucket(tx, k)
		m, err := loadMeta(tb)
		if err != nil {
			return err
		}
		m.Digest = dg(&m)
		return putMeta(tb, &m)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTranscriptDigest: a transcript write with its digest records it in
// the meta for the new version, and a start that knows it compares it
// there; a write without one leaves none; a digest that is stale (another
// version's) or missing (a thread written before) is not believed: the
// start reads the hashes, answers from them and records their digest. A
// write that repeats the stored transcript writes no message and keeps
// the version. A fork records its prefix's digest.
func TestTranscriptDigest(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir(), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	k := store.Key{Tenant: "t", Thread: "th"}
	runs := 0
	start := func(known string) *store.Started {
		t.Helper()
		runs++
		st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: fmt.Sprintf("r%d", runs), TTL: time.Minute,
			LoadThread: true, KnownDigest: known, FreshRunID: true})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	finish := func(st *store.Started, tr store.Transcript) {
		t.Helper()
		if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
			t.Fatal(err)
		}
	}
	recorded := func(want string) {
		t.Helper()
		m := metaOf(t, s, k)
		if d, ok := m.digest(); !ok || d != want {
			t.Fatalf("meta v%d records digest %q (%v), want %q", m.Version, m.Digest, ok, want)
		}
	}
	unchanged := func(known string, want bool, n int) {
		t.Helper()
		st := start(known)
		if st.Unchanged != want || (!want && len(st.Thread.Hashes) != n) {
			t.Fatalf("start knowing %q: Unchanged %v with %d messages, want %v", known, st.Unchanged, len(st.Thread.Hashes), want)
		}
		if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed}); err != nil {
			t.Fatal(err)
		}
	}

	msgs, hashes := storetest.Msgs(0, 3)
	finish(start(""), store.Diff(nil, msgs, hashes))
	d3 := store.Digest(hashes)
	recorded(d3)
	st := start(d3)
	if !st.Unchanged || st.Thread.Hashes != nil {
		t.Fatalf("start knowing the digest: %+v", st)
	}
	finish(st, store.Diff(hashes, msgs, hashes))
	recorded(d3)

	// A stale record (another version's) is not believed, and the start
	// records the digest it read.
	other := store.Digest(hashes[:1])
	setDigestField(t, s, k, func(m *threadMeta) string { return fmt.Sprintf("%d:%s", m.Version-1, other) })
	st = start(other)
	if st.Unchanged || len(st.Thread.Hashes) != 3 {
		t.Fatalf("start knowing a stale record's digest: Unchanged %v, %d messages", st.Unchanged, len(st.Thread.Hashes))
	}
	recorded(d3)
	finish(st, store.Diff(hashes, msgs, hashes))
	// Missing (written before the record): read, answered and recorded.
	setDigestField(t, s, k, func(*threadMeta) string { return "" })
	st = start(d3)
	if !st.Unchanged {
		t.Fatal("start knowing the digest of a thread without its record: not Unchanged")
	}
	recorded(d3)
	finish(st, store.Diff(hashes, msgs, hashes))
	// A load without a known digest records it too.
	setDigestField(t, s, k, func(*threadMeta) string { return "" })
	unchanged("", false, 3)
	recorded(d3)

	// A write without a digest leaves none: the old one is not believed.
	more, mh := storetest.Msgs(3, 1)
	st = start(d3)
	tr := store.Diff(hashes, append(slices.Clone(msgs), more...), append(slices.Clone(hashes), mh...))
	tr.Digest = ""
	finish(st, tr)
	if m := metaOf(t, s, k); m.Digest != "" {
		t.Fatalf("a write without a digest left %q", m.Digest)
	}
	msgs, hashes = append(msgs, more...), append(hashes, mh...)
	d4 := store.Digest(hashes)
	unchanged(d3, false, 4)
	recorded(d4) // the start that read it
	unchanged(d4, true, 4)

	// A write that repeats the transcript (Keep 0, every message) writes
	// no message: the version stays, and the batch is smaller than one
	// message.
	big, bh := storetest.Msgs(0, 2)
	big[1] = append(bytes.Repeat([]byte(" "), 8<<10), big[1]...)
	bh[1] = storetest.HashOf(big[1])
	st = start(d4)
	finish(st, store.Diff(hashes, big, bh))
	hashes, d2 := bh, store.Digest(bh)
	recorded(d2)
	v := metaOf(t, s, k).Version
	st = start(d2)
	before := s.written.Load()
	full := store.Transcript{Messages: big, Hashes: bh, Digest: d2, Model: "m2"}
	finish(st, full)
	if m := metaOf(t, s, k); m.Version != v || m.Model != "m2" {
		t.Fatalf("repeated transcript: version %d (was %d), model %q", m.Version, v, m.Model)
	}
	if n := s.written.Load() - before; n >= 8<<10 {
		t.Fatalf("repeated transcript: the finish wrote %d bytes", n)
	}
	// The same without the digest compares the hashes: still nothing.
	st = start(d2)
	full.Digest = ""
	finish(st, full)
	if m := metaOf(t, s, k); m.Version != v {
		t.Fatalf("repeated transcript without its digest: version %d (was %d)", m.Version, v)
	}
	recorded(d2)

	// A fork records its prefix's digest.
	to := store.Key{Tenant: "t", Thread: "fork"}
	if _, err := s.ForkThread(ctx, store.Fork{From: k, To: to, At: 1}); err != nil {
		t.Fatal(err)
	}
	if m := metaOf(t, s, to); m.Digest != fmt.Sprintf("%d:%s", m.Version, store.Digest(hashes[:1])) {
		t.Fatalf("fork records %q", m.Digest)
	}
}

// TestDigestAfterMigration: threads copied from bbolt have no digest
// record; a start that knows their digest is answered from the hashes,
// and records it.
func TestDigestAfterMigration(t *testing.T) {
	legacy, err := os.ReadFile("testdata/legacy-bbolt/chronicle.db")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, legacyFile), legacy, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	page, err := s.ListThreads(ctx, store.ThreadQuery{})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for i, sum := range page.Threads {
		th, err := s.LoadThread(ctx, sum.Key)
		if err != nil {
			t.Fatal(err)
		}
		if m := metaOf(t, s, sum.Key); m.Digest != "" {
			t.Fatalf("%s: a digest record %q before any start", sum.Key, m.Digest)
		}
		d := store.Digest(th.Hashes)
		st, err := s.StartRun(ctx, store.StartRun{Key: sum.Key, RunID: fmt.Sprintf("digest-%d", i), TTL: time.Minute,
			LoadThread: true, KnownDigest: d})
		if errors.Is(err, store.ErrLeaseHeld) {
			continue
		}
		if err != nil || !st.Unchanged {
			t.Fatalf("%s: start knowing the digest: %+v %v", sum.Key, st, err)
		}
		if m := metaOf(t, s, sum.Key); m.Digest != fmt.Sprintf("%d:%s", th.Version, d) {
			t.Fatalf("%s: records %q after the start", sum.Key, m.Digest)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no migrated thread to start")
	}
}
