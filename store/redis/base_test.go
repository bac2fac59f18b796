package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/store"
	redisstore "github.com/chronicle-proxy/chronicle/store/redis"
	"github.com/chronicle-proxy/chronicle/store/redistest"
	"github.com/chronicle-proxy/chronicle/store/storetest"
)

// TestDiffBase: Diff names the transcript it was computed against.
func TestDiffBase(t *testing.T) {
	msgs, hashes := storetest.Msgs(0, 6)
	for _, tc := range []struct{ stored, next int }{{0, 0}, {0, 3}, {3, 3}, {3, 6}, {6, 3}, {6, 6}} {
		stored := hashes[:tc.stored]
		other, oh := storetest.Msg(100, "assistant")
		next, nextH := msgs[:tc.next], hashes[:tc.next]
		for _, replace := range []bool{false, true} {
			if replace && tc.next > 0 {
				next, nextH = append(slices.Clone(next[:tc.next-1]), other), append(slices.Clone(nextH[:tc.next-1]), oh)
			}
			tr := store.Diff(stored, next, nextH)
			if tr.BaseDigest != store.Digest(stored) || tr.BaseLen != len(stored) || tr.Digest != store.Digest(nextH) {
				t.Errorf("Diff(%d stored, %d next, replace %v): base %s/%d digest %s, want %s/%d %s", tc.stored, tc.next, replace,
					tr.BaseDigest, tr.BaseLen, tr.Digest, store.Digest(stored), len(stored), store.Digest(nextH))
			}
		}
	}
}

// TestStaleDigest: a transcript write trusts the thread's digest (meta
// field 'dg') in place of reading the stored hashes only while it names
// the thread's version. A writer that does not keep it (an older
// chronicle's, which moves the version on and leaves 'dg' as it was)
// makes it stale: a write computed against the transcript 'dg' still
// names is then checked against the stored hashes, and refused where they
// differ, and a write computed against the stored transcript goes through
// the checks that read it. Overwrites in place (a replaced answer) and
// cuts leave what a rewrite would, blobs included.
func TestStaleDigest(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	cl := srv.Client(t)
	s, err := redisstore.Open(ctx, redisstore.Options{Client: cl})
	if err != nil {
		t.Fatal(err)
	}
	k := store.Key{Tenant: "t", Thread: "dg"}
	meta := "chr:{t/dg}:meta"
	msgs, hashes := storetest.Msgs(0, 4)
	run := 0
	// write starts a run and finishes it with tr.
	write := func(tr store.Transcript) error {
		t.Helper()
		run++
		st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: "r" + strings.Repeat("x", run), TTL: 30e9})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr})
		if err != nil {
			// A refused finish leaves the run to its lease.
			if rerr := s.Release(ctx, st.Lease); rerr != nil {
				t.Fatal(rerr)
			}
		}
		return err
	}
	check := func(want [][]byte) {
		t.Helper()
		th, err := s.LoadThread(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if len(th.Messages) != len(want) {
			t.Fatalf("%d messages, want %d", len(th.Messages), len(want))
		}
		for i := range want {
			if !bytes.Equal(th.Messages[i], want[i]) || th.Hashes[i] != storetest.HashOf(want[i]) {
				t.Fatalf("message %d: %.60q, want %.60q", i, th.Messages[i], want[i])
			}
		}
	}
	if err := write(store.Diff(nil, msgs, hashes)); err != nil {
		t.Fatal(err)
	}
	dg := cl.HGet(ctx, meta, "dg").Val()
	if dg != "1:"+store.Digest(hashes) {
		t.Fatalf("dg %q after the first write", dg)
	}

	// An older writer replaces the last two messages: v moves on, dg stays.
	alt, altH := storetest.Msgs(50, 2)
	old := store.Diff(hashes, append(slices.Clone(msgs[:2]), alt...), append(slices.Clone(hashes[:2]), altH...))
	old.Digest, old.BaseDigest, old.BaseLen = "", "", 0
	if err := write(old); err != nil {
		t.Fatal(err)
	}
	if got := cl.HGet(ctx, meta, "dg").Val(); got != dg || cl.HGet(ctx, meta, "v").Val() != "2" {
		t.Fatalf("after the older write: dg %q v %q", got, cl.HGet(ctx, meta, "v").Val())
	}
	stored := append(slices.Clone(msgs[:2]), alt...)
	storedH := append(slices.Clone(hashes[:2]), altH...)

	// A writer that still holds the first transcript: its base is what
	// the stale dg names, but the stored hashes differ from it.
	reply, rh := storetest.Msg(10, "assistant")
	stale := store.Diff(hashes, append(slices.Clone(msgs), reply), append(slices.Clone(hashes), rh))
	if err := write(stale); !isConflict(err) {
		t.Fatalf("a write on the transcript the stale dg names: %v, want a conflict", err)
	}
	check(stored)

	// A writer that holds the stored transcript: the checks read it.
	next, nextH := append(slices.Clone(stored), reply), append(slices.Clone(storedH), rh)
	if err := write(store.Diff(storedH, next, nextH)); err != nil {
		t.Fatal(err)
	}
	check(next)
	if got := cl.HGet(ctx, meta, "dg").Val(); got != "3:"+store.Digest(nextH) {
		t.Fatalf("dg %q after a write that knows the digest", got)
	}

	// From here dg holds: the answer replaced in place by a large one (a
	// blob), then by a small one (the blob goes), then a cut, then the same
	// transcript again, then a stale base once more.
	big := []byte(`{"role":"assistant","content":"` + strings.Repeat("b", 200<<10) + `"}`)
	bh := storetest.HashOf(big)
	for _, step := range []struct {
		msgs   [][]byte
		hashes []store.Hash
	}{
		{append(slices.Clone(next[:4]), big), append(slices.Clone(nextH[:4]), bh)},
		{append(slices.Clone(next[:4]), big, reply), append(slices.Clone(nextH[:4]), bh, rh)},
		{append(slices.Clone(next[:4]), reply, big), append(slices.Clone(nextH[:4]), rh, bh)},
		{next, nextH},
		{next[:2], nextH[:2]},
		{next[:2], nextH[:2]},
		{nil, nil},
		{next, nextH},
	} {
		cur, err := s.LoadThread(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if err := write(store.Diff(cur.Hashes, step.msgs, step.hashes)); err != nil {
			t.Fatal(err)
		}
		check(step.msgs)
	}
	keys, err := s.DebugKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		if strings.Contains(key, "blob:") || strings.Contains(key, "stage:") {
			t.Errorf("key %s left behind", key)
		}
	}
	// A base the thread moved past (this writer's view is two writes
	// old): dg does not name it, and the stored hashes are checked as
	// ever (the kept prefix matches, so the write goes through).
	final, finalH := append(slices.Clone(next[:2]), reply), append(slices.Clone(nextH[:2]), rh)
	if err := write(store.Diff(nextH[:2], final, finalH)); err != nil {
		t.Fatal(err)
	}
	check(final)
}

func isConflict(err error) bool { return errors.Is(err, store.ErrConflict) }
