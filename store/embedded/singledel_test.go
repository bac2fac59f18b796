package embedded

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/storetest"
)

// TestDeleteOnce drives every path that sets or deletes the keys removed
// with Bucket.deleteOnce (the audit index entries and the active runs),
// with a clock that stands still and goes back, so updated times repeat:
// turns, runs whose lease lapsed (swept, or taken over by the next
// start), threads deleted and made again under the same name at the same
// millisecond. Flushed and compacted after each phase, pebble must never
// find a single delete over a key set twice, and the listings must hold
// each thread once, at its meta's updated time.
func TestDeleteOnce(t *testing.T) {
	var mu sync.Mutex
	clock := time.UnixMilli(1_700_000_000_000)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	step := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	s, err := Open(t.TempDir(), Options{Now: now, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	compact := func(phase string) {
		t.Helper()
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := s.db.Compact(ctx, []byte{0}, []byte{0xff, 0xff, 0xff, 0xff}, false); err != nil {
			t.Fatal(err)
		}
		if n := s.twiceSet.Load(); n != 0 {
			t.Fatalf("%s: pebble found %d single deletes over a key set twice", phase, n)
		}
	}
	runs := 0
	turn := func(k store.Key, ttl time.Duration, finish bool) {
		t.Helper()
		runs++
		st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: fmt.Sprintf("run-%d", runs), Owner: "o", TTL: ttl, FreshRunID: true})
		if err != nil {
			t.Fatal(err)
		}
		if !finish {
			return
		}
		msg, h := storetest.Msg(runs, "user")
		tr := store.Diff(nil, [][]byte{msg}, []store.Hash{h})
		if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
			t.Fatal(err)
		}
	}
	keys := []store.Key{{Tenant: "a", Thread: "one"}, {Tenant: "a", Thread: "two"}, {Tenant: "b", Thread: "one"}}

	// Turns: the clock moves 0, 1 or 2 ms, and back 3 ms now and then, so
	// an updated time is often the one before, or one a thread had.
	for i := range 300 {
		turn(keys[i%len(keys)], time.Minute, true)
		switch i % 7 {
		case 0, 3:
		case 5:
			step(-3 * time.Millisecond)
		default:
			step(time.Duration(i%3) * time.Millisecond)
		}
		if i%100 == 99 {
			compact("turns")
		}
	}
	// Lapsed leases: half swept, half taken over by the next start.
	for i := range 40 {
		k := keys[i%len(keys)]
		turn(k, time.Second, false)
		step(2 * time.Second)
		if i%2 == 0 {
			if _, err := s.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			turn(k, time.Minute, true)
		}
	}
	compact("lapsed leases")
	// Deleted and made again, at the same millisecond and after.
	for i := range 30 {
		k := keys[i%len(keys)]
		turn(k, time.Minute, true)
		if err := s.DeleteThread(ctx, k); err != nil {
			t.Fatal(err)
		}
		turn(k, time.Minute, true)
		if i%3 == 0 {
			step(time.Millisecond)
		}
	}
	compact("deleted threads")

	for _, tenant := range []string{"", "a", "b"} {
		page, err := s.ListThreads(ctx, store.ThreadQuery{Tenant: tenant, Limit: 500})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[store.Key]bool{}
		for _, th := range page.Threads {
			if seen[th.Key] {
				t.Fatalf("tenant %q: %s listed twice", tenant, th.Key)
			}
			seen[th.Key] = true
			got, err := s.LoadThread(ctx, th.Key)
			if err != nil {
				t.Fatal(err)
			}
			if !got.UpdatedAt.Equal(th.UpdatedAt) {
				t.Fatalf("%s listed at %v, updated %v", th.Key, th.UpdatedAt, got.UpdatedAt)
			}
		}
		want := 0
		for _, k := range keys {
			if tenant == "" || k.Tenant == tenant {
				want++
			}
		}
		if len(seen) != want {
			t.Fatalf("tenant %q: %d threads listed, want %d", tenant, len(seen), want)
		}
	}
	var active int
	if err := s.view(func(tx *Tx) error {
		return tx.Bucket(bActive).ForEach(func(k, _ []byte) error { active++; return nil })
	}); err != nil {
		t.Fatal(err)
	}
	if active != 0 {
		t.Fatalf("%d active runs left after every run ended", active)
	}
}

// TestBackgroundHolds: Options.Background is called as each flush and
// compaction starts, and what it returned as that one ends; none is left
// held once the store is closed.
func TestBackgroundHolds(t *testing.T) {
	var mu sync.Mutex
	started, held := 0, map[int]bool{}
	background := func() func() {
		mu.Lock()
		defer mu.Unlock()
		started++
		n := started
		held[n] = true
		return func() { mu.Lock(); delete(held, n); mu.Unlock() }
	}
	s, err := Open(t.TempDir(), Options{NoSync: true, Background: background})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 2 {
		for j := range 50 {
			k := store.Key{Tenant: "t", Thread: fmt.Sprintf("th-%d-%d", i, j)}
			st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: fmt.Sprintf("r-%d-%d", i, j), Owner: "o", TTL: time.Minute, FreshRunID: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Compact(ctx, []byte{0}, []byte{0xff, 0xff}, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if started < 3 || len(held) != 0 {
		t.Fatalf("%d holds taken (want 3 or more: two flushes and a compaction), %d still held after Close", started, len(held))
	}
}
