package embedded

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/storetest"
)

// TestSaveCost proves that appending one message to a 1,000-message thread
// writes O(1) bytes, while an overwrite rewrites the thread's messages.
func TestSaveCost(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	k := store.Key{Tenant: "t", Thread: "long"}
	msgs, hashes := storetest.Msgs(0, 1000)
	st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: "r1", TTL: 30e9})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SaveTranscript(ctx, st.Lease, store.Diff(nil, msgs, hashes)); err != nil {
		t.Fatal(err)
	}
	written := func() int64 { return s.written.Load() }
	reply, rh := storetest.Msg(1000, "assistant")
	next, nextH := append(msgs, reply), append(hashes, rh)
	before := written()
	tr := store.Diff(hashes, next, nextH)
	if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatal(err)
	}
	appendBytes := written() - before
	st, err = s.StartRun(ctx, store.StartRun{Key: k, RunID: "r2", TTL: 30e9})
	if err != nil {
		t.Fatal(err)
	}
	other, otherH := storetest.Msgs(5000, 1000)
	before = written()
	tr = store.Diff(nextH, other, otherH)
	if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatal(err)
	}
	overwriteBytes := written() - before
	// An append writes the message, the meta, the run and the index
	// entries, not the thread's other messages.
	msgBytes := int64(len(msgs[0]) + len(store.Hash{}))
	if appendBytes > 4096 || overwriteBytes < 1000*msgBytes {
		t.Fatalf("bytes written: append one %d, overwrite 1,000 %d (a message is %d)", appendBytes, overwriteBytes, msgBytes)
	}
	t.Logf("bytes written: append one %d, overwrite 1,000 %d", appendBytes, overwriteBytes)
}

// TestKeysWritten proves that a write does not set a key to the value it
// holds: a rewrite from message 0 that changes only the last message sets
// that message and the meta, and a finish in the same millisecond as the
// thread's last update leaves its index entries alone. What is stored is
// what it was.
func TestKeysWritten(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	s, err := Open(t.TempDir(), Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	k := store.Key{Tenant: "t", Thread: "same"}
	msgs, hashes := storetest.Msgs(0, 10)
	st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: "r1", TTL: 30e9})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SaveTranscript(ctx, st.Lease, store.Diff(nil, msgs, hashes)); err != nil {
		t.Fatal(err)
	}
	last, lh := storetest.Msg(100, "assistant")
	msgs[9], hashes[9] = last, lh
	before := s.keys.Load()
	// Keep 0, every message: nine of them are stored as they are.
	tr := store.Transcript{Messages: msgs, Hashes: hashes}
	if err := s.SaveTranscript(ctx, st.Lease, tr); err != nil {
		t.Fatal(err)
	}
	if n := s.keys.Load() - before; n != 2 {
		t.Fatalf("the rewrite wrote %d keys, want 2 (message 9 and the meta)", n)
	}
	th, err := s.LoadThread(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if len(th.Messages) != 10 || string(th.Messages[9]) != string(last) || string(th.Messages[0]) != string(msgs[0]) || th.Version != 2 {
		t.Fatalf("thread after the rewrite: %d messages, version %d", len(th.Messages), th.Version)
	}
	before = s.keys.Load()
	if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed}); err != nil {
		t.Fatal(err)
	}
	// The run, its active entry and the meta (no event log to expire).
	if n := s.keys.Load() - before; n != 3 {
		t.Fatalf("the finish wrote %d keys, want 3", n)
	}
	page, err := s.ListThreads(ctx, store.ThreadQuery{Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Threads) != 1 || !page.Threads[0].UpdatedAt.Equal(now) {
		t.Fatalf("listed %+v", page.Threads)
	}
	now = now.Add(time.Millisecond)
	if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed}); err != nil {
		t.Fatal(err)
	}
	st, err = s.StartRun(ctx, store.StartRun{Key: k, RunID: "r2", TTL: 30e9})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed}); err != nil {
		t.Fatal(err)
	}
	if page, err = s.ListThreads(ctx, store.ThreadQuery{Tenant: "t"}); err != nil {
		t.Fatal(err)
	}
	if len(page.Threads) != 1 || !page.Threads[0].UpdatedAt.Equal(now) {
		t.Fatalf("listed %+v after a later finish", page.Threads)
	}
}

// TestEventExpiryEntries proves that only a run that logged events gets
// an entry for Sweep to drop its log, and that Sweep drops that log.
func TestEventExpiryEntries(t *testing.T) {
	clock := storetest.NewClock()
	s, err := Open(t.TempDir(), Options{Now: clock.Now, EventRetention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	k := store.Key{Tenant: "t", Thread: "ev"}
	for _, run := range []string{"quiet", "loud"} {
		st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: run, TTL: 30e9})
		if err != nil {
			t.Fatal(err)
		}
		f := &store.Finish{Status: store.Completed}
		if run == "loud" {
			f.EventsFrom, f.Events = 1, [][]byte{[]byte("data: a\n\n")}
		}
		if err := s.Finish(ctx, st.Lease, f); err != nil {
			t.Fatal(err)
		}
	}
	expiries := func() []string {
		keys, err := s.DebugKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, key := range keys {
			if strings.HasPrefix(key, "evexp/") {
				out = append(out, key)
			}
		}
		return out
	}
	if e := expiries(); len(e) != 1 || !strings.HasSuffix(e[0], "loud") {
		t.Fatalf("expiry entries %q, want one, of run loud", e)
	}
	events := func() int {
		n := 0
		if err := s.FollowEvents(ctx, k, "loud", 0, func(store.Event) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := events(); n != 1 {
		t.Fatalf("%d events before the retention", n)
	}
	clock.Advance(2 * time.Minute)
	if _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if e, n := expiries(), events(); len(e) != 0 || n != 0 {
		t.Fatalf("after the retention: expiry entries %q, %d events", e, n)
	}
}
