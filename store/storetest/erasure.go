package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
)

// Dumper is implemented by backends that can list every key with its
// value (and, for the embedded store, every blob file), so that a test can
// prove an erasure left nothing of what it erased.
type Dumper interface {
	DebugDump(ctx context.Context) (map[string][]byte, error)
}

// Mentions returns every key of st whose name or value contains one of
// needles; st, or a store it wraps, must be a Dumper.
func Mentions(ctx context.Context, st store.Store, needles ...string) ([]string, error) {
	d, ok := store.As[Dumper](st)
	if !ok {
		return nil, fmt.Errorf("storetest: %T does not implement storetest.Dumper", st)
	}
	all, err := d.DebugDump(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for k, v := range all {
		for _, n := range needles {
			if bytes.Contains([]byte(k), []byte(n)) || bytes.Contains(v, []byte(n)) {
				out = append(out, fmt.Sprintf("%q (matches %q)", k, n))
				break
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// erasureTests are the store.Erasure conformance tests (RunTests runs them).
var erasureTests = []struct {
	name string
	fn   func(t *testing.T, h *harness)
}{
	{"Subjects", testSubjects},
	{"SubjectErasureLeavesNothing", testSubjectErasure},
	{"Tombstones", testTombstones},
	{"NamedLease", testNamedLease},
	{"ForkSubjects", testForkSubjects},
}

func (h *harness) erasure() store.Erasure {
	h.t.Helper()
	e, ok := store.As[store.Erasure](h.s) // through a wrapper (the spool)
	if !ok {
		h.t.Fatalf("%T does not implement store.Erasure", h.s)
	}
	return e
}

// startWith starts a run that carries subject.
func (h *harness) startWith(k store.Key, run, subject string) store.Lease {
	h.t.Helper()
	st, err := h.s.StartRun(h.ctx, store.StartRun{Key: k, RunID: run, Owner: "replica-a", TTL: ttl, Fingerprint: "fp-" + run, Model: "gpt-x", Subject: subject})
	if err != nil || !st.Created {
		h.t.Fatalf("StartRun %s %s subject %q: %v", k, run, subject, err)
	}
	return st.Lease
}

// turnWith is turn with a subject on the run.
func (h *harness) turnWith(k store.Key, run, subject string, msgs [][]byte) {
	h.t.Helper()
	hashes := make([]store.Hash, len(msgs))
	for i, m := range msgs {
		hashes[i] = HashOf(m)
	}
	l := h.startWith(k, run, subject)
	var stored []store.Hash
	if th, err := h.s.LoadThread(h.ctx, k); err == nil {
		stored = th.Hashes
	}
	tr := store.Diff(stored, msgs, hashes)
	tr.Connection, tr.Format = "openai", "openai-chat"
	if err := h.s.AppendEvents(h.ctx, l, 1, msgs); err != nil {
		h.t.Fatal(err)
	}
	h.finish(l, store.Finish{Status: store.Completed, Transcript: &tr, Response: msgs[len(msgs)-1], UpstreamBody: bytes.Join(msgs, []byte(","))})
}

func testSubjects(t *testing.T, h *harness) {
	e := h.erasure()
	a := store.Key{Tenant: "t", Thread: "a"}
	b := store.Key{Tenant: "t", Thread: "b"}
	c := store.Key{Tenant: "t", Thread: "c"} // no transcript: started only
	o := store.Key{Tenant: "other", Thread: "a"}
	msgs, _ := Msgs(0, 2)
	h.turnWith(a, "a1", "alice", msgs)
	h.turnWith(a, "a2", "bob", msgs) // a thread can have several subjects
	h.turnWith(a, "a3", "", msgs)    // a run without one adds none
	h.turnWith(b, "b1", "alice", msgs)
	h.startWith(c, "c1", "alice")
	h.turnWith(o, "o1", "alice", msgs) // the same subject in another tenant

	got, err := e.ThreadSubjects(h.ctx, a)
	if err != nil || !slices.Equal(got, []string{"alice", "bob"}) {
		t.Fatalf("ThreadSubjects(a) = %v, %v", got, err)
	}
	got, err = e.SubjectThreads(h.ctx, "t", "alice")
	if err != nil || !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("SubjectThreads(t, alice) = %v, %v", got, err)
	}
	got, err = e.SubjectThreads(h.ctx, "other", "alice")
	if err != nil || !slices.Equal(got, []string{"a"}) {
		t.Fatalf("SubjectThreads(other, alice) = %v, %v", got, err)
	}
	got, err = e.SubjectThreads(h.ctx, "t", "nobody")
	if err != nil || len(got) != 0 {
		t.Fatalf("SubjectThreads(t, nobody) = %v, %v", got, err)
	}
	got, err = e.TenantThreads(h.ctx, "t")
	if err != nil || !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("TenantThreads(t) = %v, %v (a thread without a transcript counts)", got, err)
	}

	// DeleteThread drops the thread's subjects and its index entries.
	if err := h.s.DeleteThread(h.ctx, a); err != nil {
		t.Fatal(err)
	}
	got, err = e.SubjectThreads(h.ctx, "t", "alice")
	if err != nil || !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("SubjectThreads(t, alice) after delete = %v, %v", got, err)
	}
	got, err = e.SubjectThreads(h.ctx, "t", "bob")
	if err != nil || len(got) != 0 {
		t.Fatalf("SubjectThreads(t, bob) after delete = %v, %v", got, err)
	}
	got, err = e.ThreadSubjects(h.ctx, a)
	if err != nil || len(got) != 0 {
		t.Fatalf("ThreadSubjects(a) after delete = %v, %v", got, err)
	}
	got, err = e.TenantThreads(h.ctx, "t")
	if err != nil || !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("TenantThreads(t) after delete = %v, %v", got, err)
	}

	_, err = h.s.StartRun(h.ctx, store.StartRun{Key: b, RunID: "bad", Owner: "o", TTL: ttl, Subject: "has space"})
	wantErr(t, "subject with a space", err, store.ErrInvalid)
	_, err = e.SubjectThreads(h.ctx, "t", "{x}")
	wantErr(t, "subject with a brace", err, store.ErrInvalid)
}

// testSubjectErasure erases a subject's threads, large messages and
// bodies included, and scans every key and value of the store for its
// content, its ids and the subject itself.
func testSubjectErasure(t *testing.T, h *harness) {
	e := h.erasure()
	const marker = "ZQX-secret-7731"
	big := bytes.Repeat([]byte("y"), 300<<10)
	bigMsg := []byte(`{"role":"user","content":"` + marker + string(big) + `"}`)
	gone := []store.Key{{Tenant: "t", Thread: "erase-me-1"}, {Tenant: "t", Thread: "erase-me-2"}}
	for i, k := range gone {
		msgs := [][]byte{[]byte(fmt.Sprintf(`{"role":"user","content":"%s %d"}`, marker, i)), bigMsg,
			[]byte(`{"role":"assistant","content":"` + marker + `"}`)}
		h.turnWith(k, fmt.Sprintf("erase-run-%d", i), "subj-9f3e", msgs)
	}
	// A parked run with an interrupt, and a run that never saved.
	l := h.startWith(gone[0], "erase-run-p", "subj-9f3e")
	h.finish(l, store.Finish{Status: store.Interrupted, Interrupts: []store.Interrupt{{CallID: "call-" + marker, Name: "f"}}, Error: []byte(marker)})
	h.startWith(store.Key{Tenant: "t", Thread: "erase-me-3"}, "erase-run-3", "subj-9f3e")
	// Kept: another subject's thread in the same tenant.
	keep := store.Key{Tenant: "t", Thread: "keep"}
	h.turnWith(keep, "keep-run", "subj-other", [][]byte{[]byte(`{"role":"user","content":"kept"}`)})

	threads, err := e.SubjectThreads(h.ctx, "t", "subj-9f3e")
	if err != nil || len(threads) != 3 {
		t.Fatalf("SubjectThreads = %v, %v", threads, err)
	}
	for _, th := range threads {
		k := store.Key{Tenant: "t", Thread: th}
		runs, _ := h.s.ListRuns(h.ctx, k)
		for _, r := range runs {
			if r.Status == store.Running { // what an erasure does with a run in flight is the caller's choice; here: end it
				h.s.Finish(h.ctx, store.Lease{Key: k, RunID: r.ID, Token: r.LeaseToken}, &store.Finish{Status: store.Aborted})
			}
		}
		if err := h.s.DeleteThread(h.ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if c, ok := store.As[store.Compactor](h.s); ok {
		if err := c.CompactDeleted(h.ctx); err != nil {
			t.Fatalf("CompactDeleted: %v", err)
		}
	}
	left, err := Mentions(h.ctx, h.s, marker, "subj-9f3e", "erase-me", "erase-run")
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("after the erasure the store still holds:\n%v", left)
	}
	if left, _ := Mentions(h.ctx, h.s, "subj-other", "keep-run"); len(left) == 0 {
		t.Fatal("the scan finds nothing of the kept thread either: it proves nothing")
	}
	if th := h.load(keep); len(th.Messages) != 1 {
		t.Fatalf("kept thread: %d messages", len(th.Messages))
	}
}

func testTombstones(t *testing.T, h *harness) {
	e := h.erasure()
	got, err := e.ListTombstones(h.ctx, 0)
	if err != nil || len(got) != 0 {
		t.Fatalf("no tombstones yet: %v %v", got, err)
	}
	for i := range 3 {
		ts := store.Tombstone{Actor: "admin", Scope: "subject", Reason: fmt.Sprint("request ", i),
			TenantHash: store.IDHash("t"), SubjectHash: store.IDHash("t", "s"), Threads: i, Runs: 2 * i, Events: 3, Messages: 4}
		if err := e.AddTombstone(h.ctx, ts); err != nil {
			t.Fatal(err)
		}
		h.clock.Advance(time.Second)
	}
	got, err = e.ListTombstones(h.ctx, 2)
	if err != nil || len(got) != 2 {
		t.Fatalf("ListTombstones(2) = %v, %v", got, err)
	}
	if got[0].Reason != "request 2" || got[1].Reason != "request 1" || got[0].ID == "" || got[0].ID == got[1].ID {
		t.Fatalf("newest first, with ids: %+v", got)
	}
	if got[0].Threads != 2 || got[0].Runs != 4 || got[0].SubjectHash != store.IDHash("t", "s") || !got[0].At.After(got[1].At) {
		t.Fatalf("tombstone read back: %+v", got[0])
	}
}

func testNamedLease(t *testing.T, h *harness) {
	e := h.erasure()
	for _, c := range []struct {
		holder string
		want   bool
	}{{"a", true}, {"b", false}, {"a", true}, {"b", false}} {
		got, err := e.Lease(h.ctx, "retention", c.holder, time.Minute)
		if err != nil || got != c.want {
			t.Fatalf("Lease(%s) = %v, %v; want %v", c.holder, got, err, c.want)
		}
	}
	// Another name is another lease.
	if got, err := e.Lease(h.ctx, "other", "b", time.Minute); err != nil || !got {
		t.Fatalf("Lease(other, b) = %v, %v", got, err)
	}
}

// testForkSubjects: a fork records the subjects it is given on the new
// thread and in the tenant's subject index, so that erasing a subject
// finds the forks of its threads; a fork refused because its target
// exists leaves the target's subjects as they were; deleting the fork
// drops its index entries.
func testForkSubjects(t *testing.T, h *harness) {
	e := h.erasure()
	parent := store.Key{Tenant: "t", Thread: "p"}
	other := store.Key{Tenant: "t", Thread: "o"}
	fork := store.Key{Tenant: "t", Thread: "f"}
	msgs, _ := Msgs(0, 2)
	h.turnWith(parent, "p1", "alice", msgs)
	h.turnWith(other, "o1", "bob", msgs)
	if _, err := h.s.ForkThread(h.ctx, store.Fork{From: parent, To: fork, At: 1, Subjects: []string{"alice", "carol"}}); err != nil {
		t.Fatalf("ForkThread: %v", err)
	}
	want := func(what string, got []string, err error, w ...string) {
		t.Helper()
		if err != nil || !slices.Equal(got, w) {
			t.Fatalf("%s = %v, %v; want %v", what, got, err, w)
		}
	}
	got, err := e.ThreadSubjects(h.ctx, fork)
	want("ThreadSubjects(fork)", got, err, "alice", "carol")
	got, err = e.SubjectThreads(h.ctx, "t", "alice")
	want("SubjectThreads(alice)", got, err, "f", "p")
	got, err = e.SubjectThreads(h.ctx, "t", "carol")
	want("SubjectThreads(carol)", got, err, "f")

	_, err = h.s.ForkThread(h.ctx, store.Fork{From: parent, To: other, At: 1, Subjects: []string{"alice", "dave"}})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("fork onto an existing thread: %v, want ErrConflict", err)
	}
	got, err = e.ThreadSubjects(h.ctx, other)
	want("ThreadSubjects(other) after a refused fork", got, err, "bob")
	got, err = e.SubjectThreads(h.ctx, "t", "alice")
	want("SubjectThreads(alice) after a refused fork", got, err, "f", "p")
	got, err = e.SubjectThreads(h.ctx, "t", "dave")
	want("SubjectThreads(dave) after a refused fork", got, err)

	if err := h.s.DeleteThread(h.ctx, fork); err != nil {
		t.Fatal(err)
	}
	got, err = e.SubjectThreads(h.ctx, "t", "carol")
	want("SubjectThreads(carol) after the fork's delete", got, err)
}
