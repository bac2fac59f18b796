package embedded

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/storetest"
)

// TestHotCacheChangesNothing runs the same random steps (starts, half
// knowing the transcript's digest; events; finishes that append or
// rewrite, half with their digest; thread deletions; sweeps with expired
// leases and event logs; session ids) on a store with the committer's
// hot cache and one without, and fails on the first answer or stored
// key, value, thread, run or event that differs.
func TestHotCacheChangesNothing(t *testing.T) {
	// Also with groups so small that every few steps fill one.
	for _, limit := range []int{0, 3} {
		t.Run(fmt.Sprint("limit=", limit), func(t *testing.T) { hotCacheChangesNothing(t, limit) })
	}
}

func hotCacheChangesNothing(t *testing.T, limit int) {
	ctx := context.Background()
	clock := storetest.NewClock()
	open := func(hot bool) *Store {
		s, err := Open(t.TempDir(), Options{NoSync: true, Now: clock.Now, EventRetention: time.Minute, MaxEvents: 5})
		if err != nil {
			t.Fatal(err)
		}
		if !hot {
			s.hot = nil
		} else if limit > 0 {
			s.hot.perThread, s.hot.perRoot = limit, limit
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	stores := []*Store{open(true), open(false)}
	rng := rand.New(rand.NewPCG(1, 2))
	leases := make([]map[string]store.Lease, len(stores))
	for i := range leases {
		leases[i] = map[string]store.Lease{}
	}
	stored := map[string][]store.Hash{} // per thread, as the first store holds it
	used := map[string]bool{}           // run ids started: the others are fresh
	var succeeded [10]int               // per op, to show the steps did things
	defer func() { t.Logf("steps that succeeded, per op: %v", succeeded) }()
	for step := range 600 {
		th := fmt.Sprintf("th%d", rng.IntN(3))
		k := store.Key{Tenant: "t", Thread: th}
		op := rng.IntN(10)
		run := fmt.Sprintf("%s-r%d", th, rng.IntN(6))
		msgs, hashes := storetest.Msgs(rng.IntN(50), 1+rng.IntN(3))
		keep := rng.IntN(3)
		ttl := time.Duration(1+rng.IntN(2)) * time.Minute
		first := 1 + int64(rng.IntN(4))
		prev := stored[th]
		keep = min(keep, len(prev))
		tr := store.Transcript{Keep: keep, Messages: msgs, Hashes: hashes}
		if keep > 0 {
			tr.KeepHash = prev[keep-1]
		}
		// Half the writes bring their digest, half the starts know one.
		if rng.IntN(2) == 0 {
			tr.Digest = store.Digest(append(append([]store.Hash{}, prev[:keep]...), hashes...))
		}
		known := ""
		if rng.IntN(2) == 0 && prev != nil {
			known = store.Digest(prev)
		}
		finished := false
		answers := make([]string, len(stores))
		for i, s := range stores {
			var err error
			var note string
			switch op {
			case 0, 1, 2:
				var st *store.Started
				st, err = s.StartRun(ctx, store.StartRun{Key: k, RunID: run, TTL: ttl, LoadThread: true, FreshRunID: !used[run], KnownDigest: known})
				if err == nil {
					leases[i][th] = st.Lease
					note = fmt.Sprintf("%v %d %v %v %v", st.Run.Status, len(st.Thread.Messages), st.Created, st.ThreadFound, st.Unchanged)
				}
			case 3, 4:
				l := leases[i][th]
				err = s.AppendEvents(ctx, l, first, [][]byte{[]byte("data: a\n\n"), []byte("data: b\n\n")})
			case 5, 6:
				l := leases[i][th]
				tr := tr
				err = s.Finish(ctx, l, &store.Finish{Status: store.Completed, Transcript: &tr})
				finished = finished || (err == nil && i == 0)
			case 7:
				err = s.DeleteThread(ctx, k)
				if i == 0 {
					delete(stored, th)
				}
			case 8:
				var lost []store.RunRef
				lost, err = s.Sweep(ctx)
				note = fmt.Sprint(lost)
			case 9:
				var id string
				id, err = s.SessionID(ctx, "c", th, fmt.Sprintf("cand-%d", step))
				note = id
			}
			answers[i] = fmt.Sprintf("%s %v", note, err)
		}
		if strings.HasSuffix(answers[0], "<nil>") {
			succeeded[op]++
		}
		if op <= 2 {
			used[run] = true
		}
		if finished {
			stored[th] = append(append([]store.Hash{}, prev[:keep]...), hashes...)
		}
		if answers[0] != answers[1] {
			t.Fatalf("step %d (op %d on %s): with the hot cache %q, without %q", step, op, th, answers[0], answers[1])
		}
		if step%7 == 0 {
			clock.Advance(time.Duration(rng.IntN(90)) * time.Second)
		}
		got, err := summarize(ctx, stores[0])
		if err != nil {
			t.Fatal(err)
		}
		want, err := summarize(ctx, stores[1])
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(string(want), string(got)); d != "" {
			t.Fatalf("step %d (op %d on %s): the stores differ (-without +with the hot cache):\n%s", step, op, th, d)
		}
		// Every value too (the meta's digest record, the counters).
		gotKV, err := stores[0].DebugDump(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantKV, err := stores[1].DebugDump(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(wantKV, gotKV); d != "" {
			t.Fatalf("step %d (op %d on %s): the stored values differ (-without +with the hot cache):\n%s", step, op, th, d)
		}
	}
}

// TestHotCacheBounded: the cache keeps at most two generations of
// hotThreads threads or hotBytes, and hotPerThread entries a thread.
func TestHotCacheBounded(t *testing.T) {
	h := newHotCache()
	big := make([]byte, 64<<10)
	for th := range 3 * hotThreads {
		tp := childPrefix(threadsPrefix, []byte(fmt.Sprintf("t\x00th%d", th)))
		fills := map[string]*hotVal{}
		for i := range 2 * hotPerThread {
			fills[string(tp)+fmt.Sprint(i)] = &hotVal{v: big[:th%4*1024], ok: true}
		}
		h.fill(fills)
	}
	entries, bytes := 0, 0
	for _, gen := range []map[string]map[string]hotVal{h.cur, h.old} {
		if len(gen) > hotThreads {
			t.Fatalf("a generation of %d threads", len(gen))
		}
		for _, m := range gen {
			if len(m) > hotPerThread {
				t.Fatalf("a thread of %d entries", len(m))
			}
			for k, v := range m {
				entries++
				bytes += len(k) + len(v.v)
			}
		}
	}
	if bytes > 2*hotBytes+hotPerThread*(64<<10) {
		t.Fatalf("%d entries hold %d bytes", entries, bytes)
	}
	t.Logf("%d entries, %d bytes", entries, bytes)
}

// TestHotCacheKeepsThreadHead: a thread's group that fills up with the
// records of finished runs keeps the thread's marker, meta, system blob
// and running run; the keys outside threads are grouped by root bucket,
// so one bucket's keys do not evict another's.
func TestHotCacheKeepsThreadHead(t *testing.T) {
	h := newHotCache()
	tp := childPrefix(threadsPrefix, []byte("t\x00th"))
	tb := &Bucket{prefix: tp}
	runs := &Bucket{prefix: childPrefix(tp, bRuns)}
	head := []string{string(tp), string(tb.leaf(kMeta)), string(tb.leaf(kSys)), string(runs.leaf([]byte("running")))}
	fills := map[string]*hotVal{}
	for _, k := range head {
		fills[k] = &hotVal{v: []byte("v"), ok: true}
	}
	fills[head[3]] = &hotVal{v: []byte("v"), ok: true, dec: &runRec{Status: store.Running}}
	h.fill(fills)
	upd := &Bucket{prefix: childPrefix(nil, bUpd)}
	for i := range 10 * hotPerThread {
		h.fill(map[string]*hotVal{
			string(runs.leaf([]byte(fmt.Sprint("done-", i)))):  {v: []byte("v"), ok: true, dec: &runRec{Status: store.Completed}},
			string(upd.leaf([]byte(fmt.Sprint("t\x00th", i)))): {v: []byte("v"), ok: true},
		})
		if n := len(h.cur[string(tp)]); n > hotPerThread {
			t.Fatalf("turn %d: the thread holds %d entries", i, n)
		}
	}
	for _, k := range head {
		if _, ok := h.get([]byte(k)); !ok {
			t.Fatalf("%q left the cache", k)
		}
	}
	for i := range 10 * hotPerThread {
		if _, ok := h.get(upd.leaf([]byte(fmt.Sprint("t\x00th", i)))); !ok {
			t.Fatalf("upd entry %d left the cache", i)
		}
	}
}

// TestHotCacheCountsBytesHeld: a key filled again (a hit each turn
// records its read) counts once, so the generation turns over at
// hotBytes held, not at hotBytes read.
func TestHotCacheCountsBytesHeld(t *testing.T) {
	h := newHotCache()
	tb := &Bucket{prefix: childPrefix(threadsPrefix, []byte("t\x00th"))}
	key := string(tb.leaf(kSys))
	blob := make([]byte, 100<<10)
	for range 50 {
		h.fill(map[string]*hotVal{key: {v: blob, ok: true}})
	}
	if want := len(key) + len(blob); h.curBytes != want {
		t.Fatalf("curBytes = %d after filling one key 50 times, want %d", h.curBytes, want)
	}
}
