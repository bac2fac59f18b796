package storetest

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chronicle-proxy/chronicle/store"
)

// testRunEnd: a finished run records the thread's message count after it
// (Run.End), with and without a transcript write; a running run has none.
// A finish's redactions list is kept on the run.
func testRunEnd(t *testing.T, h *harness) {
	k := store.Key{Tenant: "t", Thread: "end"}
	msgs, hashes := Msgs(0, 4)
	h.turn(k, "r1", msgs, hashes)
	if r := h.run(k, "r1"); r.End != 4 {
		t.Fatalf("r1 end = %d, want 4", r.End)
	}
	l := h.start(k, "r2")
	if r := h.run(k, "r2"); r.End != 0 {
		t.Fatalf("running run end = %d, want 0", r.End)
	}
	// A failed run without a transcript write left the thread as it was.
	red := []byte(`[{"rule":"pattern:email","count":2}]`)
	h.finish(l, store.Finish{Status: store.Failed, Reason: "upstream_error", Redactions: red})
	if r := h.run(k, "r2"); r.End != 4 || string(r.Redactions) != string(red) {
		t.Fatalf("failed run end = %d, redactions %s; want 4, %s", r.End, r.Redactions, red)
	}
	if r := h.run(k, "r1"); r.Redactions != nil {
		t.Fatalf("r1 redactions = %s, want none", r.Redactions)
	}
	// A rewrite to 2 messages: the run's end is 2.
	h.turn(k, "r3", msgs[:2], hashes[:2])
	runs, err := h.s.ListRuns(h.ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	var ends []int
	for _, r := range runs {
		ends = append(ends, r.End)
	}
	if string(runs[1].Redactions) != string(red) {
		t.Fatalf("ListRuns redactions = %s, want %s", runs[1].Redactions, red)
	}
	if !slices.Equal(ends, []int{4, 4, 2}) {
		t.Fatalf("ListRuns ends = %v, want [4 4 2]", ends)
	}
}

// testFork: a fork holds the parent's prefix byte for byte with its
// hashes, system and meta, records its parent and point, appears in the
// audit listing, lives on independently of the parent (either can be
// written or deleted without the other changing), and is refused over an
// existing thread or past the parent's end.
func testFork(t *testing.T, h *harness) {
	parent := store.Key{Tenant: "t", Thread: "parent"}
	msgs, hashes := Msgs(0, 5)
	// Bytes a canonicalizing copy would change.
	msgs[1] = []byte(`{"role":"assistant","content":"x","reasoning_content":"think \u00e9 ","signature":"c2ln+/="}`)
	hashes[1] = HashOf(msgs[1])
	big := []byte(`{"role":"user","content":"` + strings.Repeat("b", 300<<10) + `"}`)
	msgs[2], hashes[2] = big, HashOf(big)
	l := h.start(parent, "p1")
	tr := store.Diff(nil, msgs, hashes)
	tr.Connection, tr.Format, tr.Model = "gem", "gemini", "gemini-2.5-pro"
	tr.System = []byte(`{"parts":[{"text":"be brief"}]}`)
	h.finish(l, store.Finish{Status: store.Completed, Transcript: &tr})

	h.clock.Advance(time.Second)
	child := store.Key{Tenant: "t", Thread: "child"}
	th, err := h.s.ForkThread(h.ctx, store.Fork{From: parent, To: child, At: 3, Run: "p1"})
	if err != nil {
		t.Fatalf("ForkThread: %v", err)
	}
	loaded := h.load(child)
	for what, got := range map[string]store.Thread{"returned": th, "loaded": loaded} {
		if diff := cmp.Diff(msgs[:3], got.Messages); diff != "" {
			t.Fatalf("%s fork messages (-want +got):\n%s", what, diff)
		}
		if diff := cmp.Diff(hashes[:3], got.Hashes); diff != "" {
			t.Fatalf("%s fork hashes (-want +got):\n%s", what, diff)
		}
		want := store.ForkPoint{Parent: "parent", At: 3, Run: "p1"}
		if got.Fork != want || got.Connection != "gem" || got.Format != "gemini" || got.Model != "gemini-2.5-pro" ||
			string(got.System) != string(tr.System) || got.Version != 1 || got.Key != child {
			t.Fatalf("%s fork = %+v", what, got)
		}
		if !got.CreatedAt.Equal(h.clock.Now().Truncate(time.Millisecond)) {
			t.Fatalf("%s fork created %v, want %v", what, got.CreatedAt, h.clock.Now())
		}
	}
	if p := h.load(parent); p.Fork != (store.ForkPoint{}) {
		t.Fatalf("parent fork point = %+v, want none", p.Fork)
	}
	if runs, err := h.s.ListRuns(h.ctx, child); err != nil || len(runs) != 0 {
		t.Fatalf("fork runs = %v, %v; want none", runs, err)
	}

	// The audit listing shows the fork and its point.
	page, err := h.s.ListThreads(h.ctx, store.ThreadQuery{Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range page.Threads {
		ids = append(ids, s.Key.Thread)
		if s.Key == child && (s.Fork != store.ForkPoint{Parent: "parent", At: 3, Run: "p1"} || s.Format != "gemini") {
			t.Fatalf("fork summary = %+v", s)
		}
		if s.Key == parent && s.Fork != (store.ForkPoint{}) {
			t.Fatalf("parent summary fork = %+v", s.Fork)
		}
	}
	if !slices.Equal(ids, []string{"child", "parent"}) {
		t.Fatalf("listing = %v, want [child parent]", ids)
	}

	// The fork takes turns of its own: a continuation that keeps the
	// copied prefix writes only the new message.
	reply, rh := Msg(50, "assistant")
	cl := h.start(child, "c1")
	ctr := store.Diff(loaded.Hashes, append(slices.Clone(msgs[:3]), reply), append(slices.Clone(hashes[:3]), rh))
	if ctr.Keep != 3 {
		t.Fatalf("continuation keeps %d, want 3", ctr.Keep)
	}
	h.finish(cl, store.Finish{Status: store.Completed, Transcript: &ctr})
	if got := h.load(child); len(got.Messages) != 4 || !bytes.Equal(got.Messages[3], reply) || got.Fork.Parent != "parent" {
		t.Fatalf("fork after a turn: %d messages, fork %+v", len(got.Messages), got.Fork)
	}
	if got := h.load(parent); len(got.Messages) != 5 {
		t.Fatalf("parent after the fork's turn: %d messages, want 5", len(got.Messages))
	}

	// Deleting the parent leaves the fork whole (its large message too).
	if err := h.s.DeleteThread(h.ctx, parent); err != nil {
		t.Fatal(err)
	}
	if got := h.load(child); !bytes.Equal(got.Messages[2], big) {
		t.Fatalf("fork's large message after the parent's delete: %d bytes", len(got.Messages[2]))
	}
	// And deleting the fork leaves nothing of it.
	if err := h.s.DeleteThread(h.ctx, child); err != nil {
		t.Fatal(err)
	}
	if kl, ok := h.s.(KeyLister); ok {
		keys, err := kl.DebugKeys(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range keys {
			if strings.Contains(key, "child") || strings.Contains(key, "parent") {
				t.Fatalf("key %q left after deleting both threads", key)
			}
		}
	}
}

// testForkRefused: what ForkThread refuses, and that a refusal writes
// nothing.
func testForkRefused(t *testing.T, h *harness) {
	parent := store.Key{Tenant: "t", Thread: "p"}
	msgs, hashes := Msgs(0, 3)
	h.turn(parent, "r1", msgs, hashes)
	other := store.Key{Tenant: "t", Thread: "other"}
	h.turn(other, "o1", msgs[:1], hashes[:1])
	leased := store.Key{Tenant: "t", Thread: "leased"}
	h.start(leased, "l1") // a run, and no transcript: the id is taken

	for _, tc := range []struct {
		name string
		f    store.Fork
		want error
	}{
		{"past the end", store.Fork{From: parent, To: store.Key{Tenant: "t", Thread: "n1"}, At: 4}, store.ErrInvalid},
		{"zero", store.Fork{From: parent, To: store.Key{Tenant: "t", Thread: "n2"}, At: 0}, store.ErrInvalid},
		{"onto itself", store.Fork{From: parent, To: parent, At: 1}, store.ErrInvalid},
		{"across tenants", store.Fork{From: parent, To: store.Key{Tenant: "u", Thread: "n3"}, At: 1}, store.ErrInvalid},
		{"no parent", store.Fork{From: store.Key{Tenant: "t", Thread: "nope"}, To: store.Key{Tenant: "t", Thread: "n4"}, At: 1}, store.ErrNotFound},
		{"onto a thread", store.Fork{From: parent, To: other, At: 2}, store.ErrConflict},
		{"onto a thread with runs only", store.Fork{From: parent, To: leased, At: 2}, store.ErrConflict},
	} {
		_, err := h.s.ForkThread(h.ctx, tc.f)
		wantErr(t, tc.name, err, tc.want)
	}
	if got := h.load(other); len(got.Messages) != 1 || got.Fork != (store.ForkPoint{}) {
		t.Fatalf("refused fork changed the target: %d messages, fork %+v", len(got.Messages), got.Fork)
	}
	for _, id := range []string{"n1", "n2", "n3", "n4"} {
		_, err := h.s.LoadThread(h.ctx, store.Key{Tenant: "t", Thread: id})
		wantErr(t, "refused fork "+id, err, store.ErrNotFound)
	}
	page, err := h.s.ListThreads(h.ctx, store.ThreadQuery{Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range page.Threads {
		if strings.HasPrefix(s.Key.Thread, "n") {
			t.Fatalf("refused fork %s listed", s.Key.Thread)
		}
	}

	// A fork of a thread whose run is in flight copies what is committed.
	l := h.start(parent, "r2")
	next, nextH := Msgs(0, 4)
	if err := h.s.SaveTranscript(h.ctx, l, store.Diff(hashes, next, nextH)); err != nil {
		t.Fatal(err)
	}
	th, err := h.s.ForkThread(h.ctx, store.Fork{From: parent, To: store.Key{Tenant: "t", Thread: "inflight"}, At: 4})
	if err != nil {
		t.Fatalf("fork during a run: %v", err)
	}
	if diff := cmp.Diff(next, th.Messages); diff != "" {
		t.Fatalf("fork during a run (-want +got):\n%s", diff)
	}
}
