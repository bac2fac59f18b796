// Package storetest is the conformance suite every store backend runs:
// RunTests(t, newBackend) checks the contract of package store (transcripts,
// the run lifecycle, leases and fencing, interrupts, event logs, deletion,
// audit listing, session ids) against a fresh backend per subtest.
package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chronicle-proxy/chronicle/store"
)

// Clock is a manual clock shared by a test and its backend.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock starts a clock at a fixed instant.
func NewClock() *Clock {
	return &Clock{now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Factory returns a fresh, empty backend that reads time from now. The
// backend is closed by the suite.
type Factory func(t testing.TB, now func() time.Time) store.Store

// KeyLister is implemented by backends that can list every key they hold,
// so the suite can prove a delete leaves nothing behind.
type KeyLister interface {
	DebugKeys(ctx context.Context) ([]string, error)
}

// RunTests runs the conformance suite.
func RunTests(t *testing.T, newBackend Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"Transcript", testTranscript},
		{"TranscriptSuffixAndOverwrite", testSuffixOverwrite},
		{"Transitions", testTransitions},
		{"StartRunIdempotent", testStartIdempotent},
		{"StartRunFresh", testStartFresh},
		{"UpstreamBody", testUpstreamBody},
		{"StartRunLoadsThread", testStartLoad},
		{"RunningThreadListed", testRunningListed},
		{"RefusedFinishStaysSweepable", testRefusedFinishStaysSweepable},
		{"LeaseContention", testLeaseContention},
		{"StaleLeaseFenced", testStaleLease},
		{"RenewAndCancel", testRenewCancel},
		{"Interrupts", testInterrupts},
		{"ConcurrentFinish", testConcurrentFinish},
		{"Events", testEvents},
		{"FollowLive", testFollowLive},
		{"FinishEndsEventLog", testFinishEvents},
		{"RetryTwice", testRetryTwice},
		{"Delete", testDelete},
		{"LargeMessages", testLargeMessages},
		{"SystemBlob", testSystemBlob},
		{"Audit", testAudit},
		{"Sessions", testSessions},
		{"Invalid", testInvalid},
		{"SaveTranscriptAsync", testSaveAsync},
		{"RunEnd", testRunEnd},
		{"Fork", testFork},
		{"ForkRefused", testForkRefused},
		{"Keys", testKeys},
	}
	tests = append(tests, erasureTests...) // erasure.go
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewClock()
			s := newBackend(t, clock.Now)
			t.Cleanup(func() { s.Close() })
			tc.fn(t, &harness{t: t, s: s, clock: clock, ctx: context.Background()})
		})
	}
}

func (h *harness) sub(t *testing.T) *harness {
	c := *h
	c.t = t
	return &c
}

type harness struct {
	t     *testing.T
	s     store.Store
	clock *Clock
	ctx   context.Context
}

const ttl = 30 * time.Second

// Msg returns a message body and its hash.
func Msg(i int, role string) ([]byte, store.Hash) {
	m := []byte(fmt.Sprintf(`{"role":%q,"content":"message %d","x":{"keep":[1, 2 ,3]}}`, role, i))
	return m, HashOf(m)
}

// HashOf hashes raw bytes (tests only; the proxy hashes canonical JSON).
func HashOf(b []byte) store.Hash {
	s := sha256.Sum256(b)
	return store.Hash(s[:16])
}

// Msgs returns n messages and their hashes.
func Msgs(from, n int) ([][]byte, []store.Hash) {
	ms, hs := make([][]byte, n), make([]store.Hash, n)
	for i := range n {
		role := "user"
		if (from+i)%2 == 1 {
			role = "assistant"
		}
		ms[i], hs[i] = Msg(from+i, role)
	}
	return ms, hs
}

func (h *harness) start(k store.Key, run string) store.Lease {
	h.t.Helper()
	st, err := h.s.StartRun(h.ctx, store.StartRun{Key: k, RunID: run, Owner: "replica-a", TTL: ttl, Fingerprint: "fp-" + run, Model: "gpt-x"})
	if err != nil {
		h.t.Fatalf("StartRun %s %s: %v", k, run, err)
	}
	if !st.Created {
		h.t.Fatalf("StartRun %s %s: not created", k, run)
	}
	return st.Lease
}

func (h *harness) finish(l store.Lease, f store.Finish) {
	h.t.Helper()
	if err := h.s.Finish(h.ctx, l, &f); err != nil {
		h.t.Fatalf("Finish %s: %v", l.RunID, err)
	}
}

func (h *harness) load(k store.Key) store.Thread {
	h.t.Helper()
	th, err := h.s.LoadThread(h.ctx, k)
	if err != nil {
		h.t.Fatalf("LoadThread %s: %v", k, err)
	}
	return th
}

func (h *harness) run(k store.Key, id string) store.Run {
	h.t.Helper()
	r, err := h.s.GetRun(h.ctx, k, id)
	if err != nil {
		h.t.Fatalf("GetRun %s: %v", id, err)
	}
	return r
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

// turn saves msgs (a full transcript) by finishing a new run as completed.
func (h *harness) turn(k store.Key, run string, msgs [][]byte, hashes []store.Hash) store.Lease {
	h.t.Helper()
	l := h.start(k, run)
	var stored []store.Hash
	if th, err := h.s.LoadThread(h.ctx, k); err == nil {
		stored = th.Hashes
	} else if !errors.Is(err, store.ErrNotFound) {
		h.t.Fatal(err)
	}
	tr := store.Diff(stored, msgs, hashes)
	tr.Connection, tr.Format = "openai", "openai-chat"
	h.finish(l, store.Finish{Status: store.Completed, Transcript: &tr, Usage: &store.Usage{InputTokens: 10, OutputTokens: 5}})
	return l
}

func testTranscript(t *testing.T, h *harness) {
	k := store.Key{Tenant: "tenant-a", Thread: "th-1"}
	_, err := h.s.LoadThread(h.ctx, k)
	wantErr(t, "load unknown", err, store.ErrNotFound)

	l := h.start(k, "run-1")
	// A run alone does not make the thread exist.
	_, err = h.s.LoadThread(h.ctx, k)
	wantErr(t, "load leased, unsaved", err, store.ErrNotFound)

	msgs, hashes := Msgs(0, 3)
	sys := []byte(`{"parts":[{"text":"be brief"}]}`)
	tr := store.Diff(nil, msgs, hashes)
	tr.System, tr.Connection, tr.Format, tr.Model = sys, "gemini", "gemini", "gemini-2.5-pro"
	if err := h.s.SaveTranscript(h.ctx, l, tr); err != nil {
		t.Fatal(err)
	}
	th := h.load(k)
	if th.Version != 1 || th.Connection != "gemini" || th.Format != "gemini" || th.Model != "gemini-2.5-pro" {
		t.Fatalf("meta = %+v", th)
	}
	if diff := cmp.Diff(msgs, th.Messages); diff != "" {
		t.Fatalf("messages (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(hashes, th.Hashes); diff != "" {
		t.Fatalf("hashes (-want +got):\n%s", diff)
	}
	if string(th.System) != string(sys) || th.CreatedAt.IsZero() || !th.UpdatedAt.Equal(h.clock.Now().Truncate(time.Millisecond)) {
		t.Fatalf("system %q created %v updated %v", th.System, th.CreatedAt, th.UpdatedAt)
	}

	reply, rh := Msg(3, "assistant")
	all, allH := append(slices.Clone(msgs), reply), append(slices.Clone(hashes), rh)
	tr = store.Diff(th.Hashes, all, allH)
	if tr.Keep != 3 || len(tr.Messages) != 1 {
		t.Fatalf("Diff keep %d, %d messages; want 3, 1", tr.Keep, len(tr.Messages))
	}
	h.clock.Advance(time.Second)
	h.finish(l, store.Finish{Status: store.Completed, Transcript: &tr, Usage: &store.Usage{InputTokens: 7, OutputTokens: 3, CachedTokens: 2, ReasoningTokens: 1}, Response: []byte(`{"id":"resp"}`)})
	th = h.load(k)
	if diff := cmp.Diff(all, th.Messages); diff != "" {
		t.Fatalf("messages after finish (-want +got):\n%s", diff)
	}
	if th.System != nil || th.Version != 2 {
		t.Fatalf("system %q (a transcript without system clears it), version %d", th.System, th.Version)
	}
	r := h.run(k, "run-1")
	want := store.Usage{InputTokens: 7, OutputTokens: 3, CachedTokens: 2, ReasoningTokens: 1}
	if r.Status != store.Completed || r.Usage == nil || *r.Usage != want || string(r.Response) != `{"id":"resp"}` || r.FinishedAt.IsZero() || r.Model != "gpt-x" {
		t.Fatalf("run = %+v", r)
	}
}

func testSuffixOverwrite(t *testing.T, h *harness) {
	k := store.Key{Tenant: "t", Thread: "th"}
	msgs, hashes := Msgs(0, 5)
	h.turn(k, "r1", msgs, hashes)

	// Diverge at message 2: the tail is overwritten.
	alt, altH := Msgs(100, 2)
	next := append(slices.Clone(msgs[:2]), alt...)
	nextH := append(slices.Clone(hashes[:2]), altH...)
	h.turn(k, "r2", next, nextH)
	th := h.load(k)
	if diff := cmp.Diff(next, th.Messages); diff != "" {
		t.Fatalf("overwrite (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(nextH, th.Hashes); diff != "" {
		t.Fatalf("overwrite hashes (-want +got):\n%s", diff)
	}

	// A fully different transcript replaces everything.
	other, otherH := Msgs(200, 1)
	h.turn(k, "r3", other, otherH)
	if diff := cmp.Diff(other, h.load(k).Messages); diff != "" {
		t.Fatalf("replace (-want +got):\n%s", diff)
	}

	// A stale prefix is refused and changes nothing.
	l := h.start(k, "r4")
	bad := store.Transcript{Keep: 1, KeepHash: hashes[0], Messages: alt, Hashes: altH}
	wantErr(t, "stale keep hash", h.s.SaveTranscript(h.ctx, l, bad), store.ErrConflict)
	bad = store.Transcript{Keep: 5, KeepHash: otherH[0], Messages: alt, Hashes: altH}
	wantErr(t, "keep past end", h.s.SaveTranscript(h.ctx, l, bad), store.ErrConflict)
	wantErr(t, "finish with stale prefix", h.s.Finish(h.ctx, l, &store.Finish{Status: store.Completed, Transcript: &bad}), store.ErrConflict)
	if r := h.run(k, "r4"); r.Status != store.Running {
		t.Fatalf("refused finish changed status to %s", r.Status)
	}
	if diff := cmp.Diff(other, h.load(k).Messages); diff != "" {
		t.Fatalf("refused writes changed messages (-want +got):\n%s", diff)
	}
	// An empty transcript (keep 0, no messages) empties the thread.
	h.finish(l, store.Finish{Status: store.Completed, Transcript: &store.Transcript{}})
	if th := h.load(k); len(th.Messages) != 0 || len(th.Hashes) != 0 {
		t.Fatalf("emptied thread has %d messages", len(th.Messages))
	}
}

func testTransitions(t *testing.T, h *harness) {
	finals := []store.Status{store.Completed, store.Failed, store.Aborted, store.Interrupted}
	all := append([]store.Status{store.Running}, finals...)
	n := 0
	for _, from := range finals {
		for _, to := range all {
			n++
			t.Run(fmt.Sprintf("%s_to_%s", from, to), func(t *testing.T) {
				h := h.sub(t)
				k := store.Key{Tenant: fmt.Sprintf("tr-%d", n), Thread: "th"}
				l := h.start(k, "r")
				h.finish(l, store.Finish{Status: from, Reason: "first"})
				err := h.s.Finish(h.ctx, l, &store.Finish{Status: to, Reason: "second"})
				switch {
				case to == store.Running:
					wantErr(t, "finish as running", err, store.ErrIllegalTransition)
				case to == from:
					if err != nil {
						t.Fatalf("same finish again: %v", err)
					}
				default:
					wantErr(t, "second finish", err, store.ErrIllegalTransition)
				}
				if r := h.run(k, "r"); r.Status != from || r.Reason != "first" {
					t.Fatalf("run = %s %q, want %s first", r.Status, r.Reason, from)
				}
			})
		}
	}
	t.Run("running_to_running", func(t *testing.T) {
		h := h.sub(t)
		k := store.Key{Tenant: "rr", Thread: "rr"}
		l := h.start(k, "r")
		wantErr(t, "finish running", h.s.Finish(h.ctx, l, &store.Finish{Status: store.Running}), store.ErrIllegalTransition)
		wantErr(t, "finish bogus", h.s.Finish(h.ctx, l, &store.Finish{Status: "bogus"}), store.ErrIllegalTransition)
		if r := h.run(k, "r"); r.Status != store.Running {
			t.Fatalf("status %s", r.Status)
		}
		h.finish(l, store.Finish{Status: store.Aborted})
	})
	t.Run("running_to_failed_by_sweep", func(t *testing.T) {
		h := h.sub(t)
		k := store.Key{Tenant: "sw", Thread: "sw"}
		l := h.start(k, "r")
		done := h.start(store.Key{Tenant: "sw2", Thread: "sw2"}, "r")
		h.finish(done, store.Finish{Status: store.Completed})
		lost, err := h.s.Sweep(h.ctx)
		if err != nil || len(lost) != 0 {
			t.Fatalf("sweep before expiry: %v %v", lost, err)
		}
		h.clock.Advance(ttl + time.Millisecond)
		lost, err = h.s.Sweep(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]store.RunRef{{Key: k, RunID: "r"}}, lost); diff != "" {
			t.Fatalf("swept (-want +got):\n%s", diff)
		}
		r := h.run(k, "r")
		if r.Status != store.Failed || r.Reason != store.ReasonProxyLost || r.FinishedAt.IsZero() {
			t.Fatalf("swept run = %s %q", r.Status, r.Reason)
		}
		if r := h.run(store.Key{Tenant: "sw2", Thread: "sw2"}, "r"); r.Status != store.Completed {
			t.Fatalf("sweep touched a completed run: %s", r.Status)
		}
		if lost, _ := h.s.Sweep(h.ctx); len(lost) != 0 {
			t.Fatalf("second sweep: %v", lost)
		}
		// The thread is usable again, and the swept run's finish, once
		// a newer lease was taken, is fenced.
		l2 := h.start(k, "r2")
		wantErr(t, "finish after sweep and a newer lease", h.s.Finish(h.ctx, l, &store.Finish{Status: store.Completed}), store.ErrFenced)
		wantErr(t, "finish failed after sweep and a newer lease", h.s.Finish(h.ctx, l, &store.Finish{Status: store.Failed}), store.ErrFenced)
		h.finish(l2, store.Finish{Status: store.Completed})
	})
	t.Run("swept_run_revived_by_its_finish", func(t *testing.T) {
		// A replica that could not reach the store while its lease ran
		// out (it spooled the finish) finishes the run when the store is
		// back: the sweep took no newer lease, so nothing newer exists
		// and the finish lands, transcript and all.
		h := h.sub(t)
		k := store.Key{Tenant: "rv", Thread: "rv"}
		l := h.start(k, "r")
		h.clock.Advance(ttl + time.Millisecond)
		if lost, err := h.s.Sweep(h.ctx); err != nil || len(lost) != 1 {
			t.Fatalf("sweep: %v %v", lost, err)
		}
		msgs, hashes := Msgs(0, 2)
		tr := store.Transcript{Messages: msgs, Hashes: hashes}
		u := &store.Usage{InputTokens: 3, OutputTokens: 4}
		f := &store.Finish{Status: store.Completed, Transcript: &tr, Usage: u}
		if err := h.s.Finish(h.ctx, l, f); err != nil {
			t.Fatalf("finish of a swept run, no newer lease: %v", err)
		}
		if err := h.s.Finish(h.ctx, l, f); err != nil {
			t.Fatalf("the same finish again: %v", err)
		}
		r := h.run(k, "r")
		if r.Status != store.Completed || r.Reason != "" || r.Usage == nil || r.Usage.OutputTokens != 4 {
			t.Fatalf("revived run = %s %q %+v", r.Status, r.Reason, r.Usage)
		}
		th, err := h.s.LoadThread(h.ctx, k)
		if err != nil || len(th.Messages) != 2 {
			t.Fatalf("thread after the revived finish: %d messages, %v", len(th.Messages), err)
		}
		page, err := h.s.ListThreads(h.ctx, store.ThreadQuery{Tenant: "rv"})
		if err != nil || len(page.Threads) != 1 || page.Threads[0].LastStatus != store.Completed || page.Threads[0].Usage.OutputTokens != 4 {
			t.Fatalf("listing after the revived finish: %+v %v", page.Threads, err)
		}
		if lost, _ := h.s.Sweep(h.ctx); len(lost) != 0 {
			t.Fatalf("sweep after the revived finish: %v", lost)
		}
		h.finish(h.start(k, "r2"), store.Finish{Status: store.Completed})
	})
	t.Run("interrupted_resumed_by", func(t *testing.T) {
		h := h.sub(t)
		k := store.Key{Tenant: "t", Thread: "res"}
		l := h.start(k, "p")
		h.finish(l, store.Finish{Status: store.Interrupted})
		done := h.start(k, "c")
		h.finish(done, store.Finish{Status: store.Completed})
		l2 := h.start(k, "n")
		wantErr(t, "resume a completed run", h.s.Finish(h.ctx, l2, &store.Finish{Status: store.Completed, Resumes: "c"}), store.ErrIllegalTransition)
		wantErr(t, "resume an unknown run", h.s.Finish(h.ctx, l2, &store.Finish{Status: store.Completed, Resumes: "nope"}), store.ErrNotFound)
		h.finish(l2, store.Finish{Status: store.Completed, Resumes: "p"})
		if r := h.run(k, "p"); r.Status != store.Interrupted || r.ResumedBy != "n" {
			t.Fatalf("parked run = %s resumed_by %q", r.Status, r.ResumedBy)
		}
		l3 := h.start(k, "m")
		wantErr(t, "resume twice", h.s.Finish(h.ctx, l3, &store.Finish{Status: store.Completed, Resumes: "p"}), store.ErrIllegalTransition)
		l4 := h.start(store.Key{Tenant: "t", Thread: "res-running"}, "x")
		_ = l4
		wantErr(t, "resume a running run", h.s.Finish(h.ctx, l3, &store.Finish{Status: store.Completed, Resumes: "m"}), store.ErrIllegalTransition)
	})
}

// testStartFresh: a start with StartRun.FreshRunID answers and stores
// what the same start without it does, and its run id is then taken like
// any other: a later start of it (without the flag) finds the run, or is
// refused for another request or another thread.
func testStartFresh(t *testing.T, h *harness) {
	var started [2]*store.Started
	msgs, hashes := Msgs(0, 3)
	for _, fresh := range []bool{false, true} {
		k := store.Key{Tenant: "t", Thread: fmt.Sprintf("fresh-%v", fresh)}
		h.turn(k, "seed-"+k.Thread, msgs, hashes)
	}
	h.clock.Advance(time.Second)
	for i, fresh := range []bool{false, true} {
		k := store.Key{Tenant: "t", Thread: fmt.Sprintf("fresh-%v", fresh)}
		sr := store.StartRun{Key: k, RunID: "run-" + k.Thread, Owner: "o", TTL: ttl, Fingerprint: "f1", Model: "m",
			LoadThread: true, FreshRunID: fresh}
		st, err := h.s.StartRun(h.ctx, sr)
		if err != nil || !st.Created || st.Lease.Token == 0 || !st.ThreadFound || len(st.Thread.Messages) != 3 {
			t.Fatalf("start (fresh %v): %+v %v", fresh, st, err)
		}
		started[i] = st
		sr.FreshRunID = false
		again, err := h.s.StartRun(h.ctx, sr)
		if err != nil || again.Created || again.Run.Status != store.Running || again.Run.LeaseToken != st.Lease.Token {
			t.Fatalf("start again (fresh %v): %+v %v", fresh, again, err)
		}
		other := sr
		other.Fingerprint = "f2"
		_, err = h.s.StartRun(h.ctx, other)
		wantErr(t, "fresh id reused with another request", err, store.ErrConflict)
		other = sr
		other.Key.Thread = "elsewhere"
		_, err = h.s.StartRun(h.ctx, other)
		wantErr(t, "fresh id on another thread", err, store.ErrConflict)
		if got, err := h.s.FindRun(h.ctx, k.Tenant, sr.RunID); err != nil || got != k {
			t.Fatalf("FindRun: %v %v", got, err)
		}
		m, mh := Msg(3, "assistant")
		h.finish(st.Lease, store.Finish{Status: store.Completed, Transcript: &store.Transcript{Keep: 3, KeepHash: hashes[2], Messages: [][]byte{m}, Hashes: []store.Hash{mh}}})
		if r := h.run(k, sr.RunID); r.Status != store.Completed || r.End != 4 {
			t.Fatalf("run after finish: %+v", r)
		}
	}
	// The same answer but for the thread's name.
	a, b := *started[0], *started[1]
	b.Run.Key, b.Lease.Key, b.Thread.Key = a.Run.Key, a.Lease.Key, a.Thread.Key
	b.Run.ID, b.Lease.RunID = a.Run.ID, a.Lease.RunID
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("fresh start answered\n%+v\nthe same start without the flag\n%+v", b, a)
	}
}

func testStartIdempotent(t *testing.T, h *harness) {
	k := store.Key{Tenant: "t", Thread: "a"}
	sr := store.StartRun{Key: k, RunID: "run-x", Owner: "o", TTL: ttl, Fingerprint: "f1", Model: "m"}
	first, err := h.s.StartRun(h.ctx, sr)
	if err != nil || !first.Created || first.Lease.Token == 0 || first.Run.Status != store.Running {
		t.Fatalf("first start: %+v %v", first, err)
	}
	again, err := h.s.StartRun(h.ctx, sr)
	if err != nil || again.Created || again.Run.ID != "run-x" || again.Run.Status != store.Running || again.Lease.Token != 0 {
		t.Fatalf("second start: %+v %v", again, err)
	}
	sr2 := sr
	sr2.Fingerprint = "f2"
	refused, err := h.s.StartRun(h.ctx, sr2)
	wantErr(t, "other fingerprint", err, store.ErrConflict)
	if refused != nil {
		t.Fatalf("a refused start returned %+v, want nil", refused)
	}
	sr3 := sr
	sr3.Key = store.Key{Tenant: "t", Thread: "b"}
	refused, err = h.s.StartRun(h.ctx, sr3)
	wantErr(t, "run id on another thread", err, store.ErrConflict)
	if refused != nil {
		t.Fatalf("a start refused for a run id of another thread returned %+v, want nil", refused)
	}
	// Another tenant may use the same run id.
	sr4 := sr
	sr4.Key = store.Key{Tenant: "u", Thread: "b"}
	if _, err := h.s.StartRun(h.ctx, sr4); err != nil {
		t.Fatalf("same run id, other tenant: %v", err)
	}
	got, err := h.s.FindRun(h.ctx, "t", "run-x")
	if err != nil || got != k {
		t.Fatalf("FindRun = %v %v", got, err)
	}
	_, err = h.s.FindRun(h.ctx, "t", "nope")
	wantErr(t, "FindRun unknown", err, store.ErrNotFound)

	h.finish(first.Lease, store.Finish{Status: store.Completed, Response: []byte("body")})
	done, err := h.s.StartRun(h.ctx, sr)
	if err != nil || done.Created || done.Run.Status != store.Completed {
		t.Fatalf("start after finish: %+v %v", done, err)
	}
	runs, err := h.s.ListRuns(h.ctx, k)
	if err != nil || len(runs) != 1 {
		t.Fatalf("ListRuns = %d %v", len(runs), err)
	}
	if runs[0].Response != nil {
		t.Fatalf("ListRuns carries response bodies")
	}
}

// testUpstreamBody checks the audit copy of the upstream request body: kept
// byte-for-byte when a Finish carries it, read by GetRun only, nil when not
// kept, and unchanged by a repeated Finish.
func testUpstreamBody(t *testing.T, h *harness) {
	k := store.Key{Tenant: "t", Thread: "audit"}
	body := []byte("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"h\u00e9\"}],\"x\":\"\x00\x1f\xff\"}\n")
	msgs, hashes := Msgs(0, 2)
	l := h.start(k, "kept")
	tr := store.Diff(nil, msgs, hashes)
	f := store.Finish{Status: store.Completed, Transcript: &tr, Response: []byte(`{"id":"r"}`), UpstreamBody: body}
	for range 2 { // the same Finish twice changes nothing
		h.finish(l, f)
		if got := h.run(k, "kept"); string(got.UpstreamBody) != string(body) || string(got.Response) != `{"id":"r"}` {
			t.Fatalf("GetRun upstream body %q response %q; want %q", got.UpstreamBody, got.Response, body)
		}
	}
	if th := h.load(k); th.Version != 1 {
		t.Fatalf("finish twice: version %d, want 1", th.Version)
	}

	l = h.start(k, "plain")
	h.finish(l, store.Finish{Status: store.Completed})
	if got := h.run(k, "plain"); got.UpstreamBody != nil {
		t.Fatalf("run finished without an upstream body has %q", got.UpstreamBody)
	}

	runs, err := h.s.ListRuns(h.ctx, k)
	if err != nil || len(runs) != 2 {
		t.Fatalf("ListRuns = %d %v", len(runs), err)
	}
	for _, r := range runs {
		if r.UpstreamBody != nil || r.Response != nil {
			t.Fatalf("ListRuns run %s carries bodies: upstream %q response %q", r.ID, r.UpstreamBody, r.Response)
		}
	}
	again, err := h.s.StartRun(h.ctx, store.StartRun{Key: k, RunID: "kept", Owner: "replica-a", TTL: ttl, Fingerprint: "fp-kept", Model: "gpt-x"})
	if err != nil || again.Created || again.Run.UpstreamBody != nil {
		t.Fatalf("retried start: created %v upstream %q err %v", again.Created, again.Run.UpstreamBody, err)
	}
}

func testLeaseContention(t *testing.T, h *harness) {
	k := store.Key{Tenant: "t", Thread: "busy"}
	const contenders = 8
	var wg sync.WaitGroup
	results := make([]*store.Started, contenders)
	errs := make([]error, contenders)
	for i := range contenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = h.s.StartRun(h.ctx, store.StartRun{Key: k, RunID: fmt.Sprintf("c%d", i), TTL: ttl, Owner: "o"})
		}()
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("two winners: %d and %d", winner, i)
			}
			winner = i
		case errors.Is(err, store.ErrLeaseHeld):
		default:
			t.Fatalf("contender %d: %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no winner")
	}
	for i, err := range errs {
		if i != winner {
			if results[i].Lease.RunID != results[winner].Lease.RunID {
				t.Fatalf("loser %d sees holder %q, want %q", i, results[i].Lease.RunID, results[winner].Lease.RunID)
			}
			_ = err
		}
	}
	// A loser forging a lease (its own run id, the winner's token) is refused.
	loser := store.Lease{Key: k, RunID: fmt.Sprintf("c%d", (winner+1)%contenders), Token: results[winner].Lease.Token, TTL: ttl}
	msgs, hashes := Msgs(0, 1)
	wantErr(t, "loser save", h.s.SaveTranscript(h.ctx, loser, store.Diff(nil, msgs, hashes)), store.ErrFenced)
	wantErr(t, "loser events", h.s.AppendEvents(h.ctx, loser, 1, msgs), store.ErrFenced)
	_, err := h.s.Renew(h.ctx, loser, store.RunPatch{})
	wantErr(t, "loser renew", err, store.ErrFenced)
	wantErr(t, "loser finish", h.s.Finish(h.ctx, loser, &store.Finish{Status: store.Completed}), store.ErrNotFound)
	// Losers created no run.
	runs, err := h.s.ListRuns(h.ctx, k)
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs after contention: %d %v", len(runs), err)
	}
	if _, err := h.s.FindRun(h.ctx, "t", loser.RunID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refused run left a run id: %v", err)
	}
	h.finish(results[winner].Lease, store.Finish{Status: store.Completed})
	// Released: the next run takes the lease with a larger token.
	next := h.start(k, "after")
	if next.Token <= results[winner].Lease.Token {
		t.Fatalf("token %d not above %d", next.Token, results[winner].Lease.Token)
	}
}

func testStaleLease(t *testing.T, h *harness) {
	k := store.Key{Tenant: "t", Thread: "stale"}
	old := h.start(k, "old")
	msgs, hashes := Msgs(0, 2)
	if err := h.s.SaveTranscript(h.ctx, old, store.Diff(nil, msgs, hashes)); err != nil {
		t.Fatal(err)
	}
	if err := h.s.AppendEvents(h.ctx, old, 1, [][]byte{[]byte("e1")}); err != nil {
		t.Fatal(err)
	}
	// Before expiry the lease is held.
	_, err := h.s.StartRun(h.ctx, store.StartRun{Key: k, RunID: "new", TTL: ttl})
	wantErr(t, "start on held lease", err, store.ErrLeaseHeld)
	// The refused start left no run id claim.
	if _, err := h.s.FindRun(h.ctx, k.Tenant, "new"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("FindRun after a refused start: %v, want ErrNotFound", err)
	}
	h.clock.Advance(ttl + time.Second)
	nw := h.start(k, "new")
	if r := h.run(k, "old"); r.Status != store.Failed || r.Reason != store.ReasonProxyLost {
		t.Fatalf("expired holder = %s %q", r.Status, r.Reason)
	}
	more, moreH := Msgs(2, 1)
	wantErr(t, "stale save", h.s.SaveTranscript(h.ctx, old, store.Transcript{Keep: 2, KeepHash: hashes[1], Messages: more, Hashes: moreH}), store.ErrFenced)
	wantErr(t, "stale events", h.s.AppendEvents(h.ctx, old, 2, [][]byte{[]byte("e2")}), store.ErrFenced)
	_, err = h.s.Renew(h.ctx, old, store.RunPatch{})
	wantErr(t, "stale renew", err, store.ErrFenced)
	wantErr(t, "stale finish", h.s.Finish(h.ctx, old, &store.Finish{Status: store.Completed}), store.ErrFenced)
	if err := h.s.Release(h.ctx, old); err != nil {
		t.Fatalf("stale release: %v", err)
	}
	// The stale release did not free the new holder's lease.
	_, err = h.s.StartRun(h.ctx, store.StartRun{Key: k, RunID: "third", TTL: ttl})
	wantErr(t, "start after stale release", err, store.ErrLeaseHeld)
	if th := h.load(k); len(th.Messages) != 2 {
		t.Fatalf("stale writes landed: %d messages", len(th.Messages))
	}
	var got []string
	if err := h.s.FollowEvents(h.ctx, k, "old", 0, func(e store.Event) error { got = append(got, string(e.Data)); return nil }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"e1"}, got); diff != "" {
		t.Fatalf("events of the lost run (-want +got):\n%s", diff)
	}
	// Release frees the thread at once; the released run is then swept.
	if err := h.s.Release(h.ctx, nw); err != nil {
		t.Fatal(err)
	}
	h.start(k, "fourth")
	if lost, err := h.s.Sweep(h.ctx); err != nil || len(lost) != 1 || lost[0].RunID != "new" {
		t.Fatalf("sweep of the released run: %v %v", lost, err)
	}
	if r := h.run(k, "new"); r.Status != store.Failed || r.Reason != store.ReasonProxyLost {
		t.Fatalf("released run after a new start = %s %q", r.Status, r.Reason)
	}
}

func testRenewCancel(t *testing.T, h *harness) {
	k := store.Key{Tenant: "t", Thread: "rc"}
	l := h.start(k, "r")
	h.clock.Advance(ttl - time.Second)
	rn, err := h.s.Renew(h.ctx, l, store.RunPatch{Partial: []byte("hel"), DetachedSince: h.clock.Now()})
	if err != nil || rn.CancelRequested {
		t.Fatalf("renew: %+v %v", rn, err)
	}
	if !rn.Lease.Expires.Equal(h.clock.Now().Add(ttl).Truncate(time.Millisecond)) {
		t.Fatalf("renewed expiry %v", rn.Lease.Expires)
	}
	h.clock.Advance(2 * time.Second) // past the first expiry, within the renewed one
	if lost, err := h.s.Sweep(h.ctx); err != nil || len(lost) != 0 {
		t.Fatalf("sweep swept a renewed run: %v %v", lost, err)
	}
	r, err := h.s.RequestCancel(h.ctx, k, "r")
	if err != nil || !r.CancelRequested || string(r.Partial) != "hel" || r.DetachedSince.IsZero() {
		t.Fatalf("cancel: %+v %v", r, err)
	}
	rn, err = h.s.Renew(h.ctx, rn.Lease, store.RunPatch{})
	if err != nil || !rn.CancelRequested {
		t.Fatalf("renew after cancel: %+v %v", rn, err)
	}
	h.finish(rn.Lease, store.Finish{Status: store.Aborted, Reason: "cancelled", Partial: []byte("hello")})
	r, err = h.s.RequestCancel(h.ctx, k, "r")
	if err != nil || r.Status != store.Aborted || string(r.Partial) != "hello" {
		t.Fatalf("cancel of an ended run: %+v %v", r, err)
	}
	_, err = h.s.RequestCancel(h.ctx, k, "nope")
	wantErr(t, "cancel unknown", err, store.ErrNotFound)
}

func testInterrupts(t *testing.T, h *harness) {
	k := store.Key{Tenant: "t", Thread: "tools"}
	l := h.start(k, "p1")
	h.finish(l, store.Finish{Status: store.Interrupted, Interrupts: []store.Interrupt{{CallID: "call_a", Name: "search"}, {CallID: "call_b", Name: "write"}}})
	r := h.run(k, "p1")
	want := []store.Interrupt{{CallID: "call_a", Name: "search", Status: store.Pending, RunID: "p1"}, {CallID: "call_b", Name: "write", Status: store.Pending, RunID: "p1"}}
	sortIntr(r.Interrupts)
	if diff := cmp.Diff(want, r.Interrupts); diff != "" {
		t.Fatalf("pending interrupts (-want +got):\n%s", diff)
	}
	l2 := h.start(k, "n1")
	h.finish(l2, store.Finish{Status: store.Completed, Resolve: []string{"call_a"}, Cancel: []string{"call_b", "call_unknown"}, Resumes: "p1"})
	runs, err := h.s.ListRuns(h.ctx, k)
	if err != nil || len(runs) != 2 || runs[0].ID != "p1" || runs[1].ID != "n1" {
		t.Fatalf("runs: %+v %v", runs, err)
	}
	sortIntr(runs[0].Interrupts)
	want[0].Status, want[1].Status = store.Resolved, store.Cancelled
	if diff := cmp.Diff(want, runs[0].Interrupts); diff != "" {
		t.Fatalf("interrupts after resume (-want +got):\n%s", diff)
	}
	if runs[0].ResumedBy != "n1" || runs[0].Status != store.Interrupted || len(runs[1].Interrupts) != 0 {
		t.Fatalf("runs = %+v", runs)
	}
	// Resolving again changes nothing (resolved is final).
	l3 := h.start(k, "n2")
	h.finish(l3, store.Finish{Status: store.Completed, Cancel: []string{"call_a"}})
	if r := h.run(k, "p1"); r.Interrupts[0].Status == store.Cancelled && r.Interrupts[0].CallID == "call_a" {
		t.Fatal("resolved interrupt became cancelled")
	}
}

func sortIntr(in []store.Interrupt) {
	slices.SortFunc(in, func(a, b store.Interrupt) int { return strings.Compare(a.CallID, b.CallID) })
}

func testConcurrentFinish(t *testing.T, h *harness) {
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := store.Key{Tenant: fmt.Sprintf("tenant-%d", i%4), Thread: fmt.Sprintf("th-%d", i)}
			st, err := h.s.StartRun(h.ctx, store.StartRun{Key: k, RunID: fmt.Sprintf("run-%d", i), TTL: ttl})
			if err != nil {
				errs <- err
				return
			}
			msgs, hashes := Msgs(i, 2)
			tr := store.Diff(nil, msgs, hashes)
			if err := h.s.AppendEvents(h.ctx, st.Lease, 1, msgs); err != nil {
				errs <- err
				return
			}
			if err := h.s.Finish(h.ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr, Usage: &store.Usage{InputTokens: int64(i)}}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range n {
		k := store.Key{Tenant: fmt.Sprintf("tenant-%d", i%4), Thread: fmt.Sprintf("th-%d", i)}
		msgs, _ := Msgs(i, 2)
		if diff := cmp.Diff(msgs, h.load(k).Messages); diff != "" {
			t.Fatalf("thread %d (-want +got):\n%s", i, diff)
		}
		if r := h.run(k, fmt.Sprintf("run-%d", i)); r.Status != store.Completed || r.Events != 2 {
			t.Fatalf("run %d: %s, %d events", i, r.Status, r.Events)
		}
	}
}

func collect(t *testing.T, h *harness, k store.Key, run string, after int64) []store.Event {
	t.Helper()
	var got []store.Event
	if err := h.s.FollowEvents(h.ctx, k, run, after, func(e store.Event) error { got = append(got, e); return nil }); err != nil {
		t.Fatalf("FollowEvents after %d: %v", after, err)
	}
	return got
}

func events(from, to int64) []store.Event {
	var out []store.Event
	for i := from; i <= to; i++ {
		out = append(out, store.Event{Seq: i, Data: []byte(fmt.Sprintf("data: {\"n\":%d}\n\n", i))})
	}
	return out
}

func datas(evs []store.Event) [][]byte {
	out := make([][]byte, len(evs))
	for i, e := range evs {
		out[i] = e.Data
	}
	return out
}

func testEvents(t *testing.T, h *harness) {
	k := store.Key{Tenant: "t", Thread: "ev"}
	l := h.start(k, "r")
	all := events(1, 600)
	if err := h.s.AppendEvents(h.ctx, l, 1, datas(all[:300])); err != nil {
		t.Fatal(err)
	}
	if err := h.s.AppendEvents(h.ctx, l, 301, datas(all[300:])); err != nil {
		t.Fatal(err)
	}
	// A retried batch (overlapping what is stored) adds only the new tail.
	if err := h.s.AppendEvents(h.ctx, l, 599, datas(events(599, 601))); err != nil {
		t.Fatal(err)
	}
	all = events(1, 601)
	wantErr(t, "gap", h.s.AppendEvents(h.ctx, l, 700, [][]byte{[]byte("x")}), store.ErrConflict)
	h.finish(l, store.Finish{Status: store.Completed})
	wantErr(t, "append after finish", h.s.AppendEvents(h.ctx, l, 602, [][]byte{[]byte("x")}), store.ErrFenced)
	if diff := cmp.Diff(all, collect(t, h, k, "r", 0)); diff != "" {
		t.Fatalf("replay from start (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(all[555:], collect(t, h, k, "r", 555)); diff != "" {
		t.Fatalf("replay after 555 (-want +got):\n%s", diff)
	}
	if got := collect(t, h, k, "r", 601); len(got) != 0 {
		t.Fatalf("replay after the last: %d events", len(got))
	}
	if r := h.run(k, "r"); r.Events != 601 {
		t.Fatalf("run events = %d", r.Events)
	}
	// A run with no events ends at once.
	l2 := h.start(k, "empty")
	h.finish(l2, store.Finish{Status: store.Failed, Error: []byte(`{"error":{}}`), AnswerStatus: 400})
	if got := collect(t, h, k, "empty", 0); len(got) != 0 {
		t.Fatalf("empty run: %d events", len(got))
	}
	// The status the client was answered with is kept, for a retry that
	// answers the same.
	if r := h.run(k, "empty"); r.AnswerStatus != 400 || string(r.Error) != `{"error":{}}` {
		t.Fatalf("empty run: answer %d %s, want 400 and its error", r.AnswerStatus, r.Error)
	}
	if r := h.run(k, "r"); r.AnswerStatus != 0 {
		t.Fatalf("a run finished without an answer status has %d", r.AnswerStatus)
	}
	err := h.s.FollowEvents(h.ctx, k, "nope", 0, func(store.Event) error { return nil })
	wantErr(t, "follow unknown run", err, store.ErrNotFound)
	// fn's error stops the follow.
	stop := errors.New("stop")
	err = h.s.FollowEvents(h.ctx, k, "r", 0, func(store.Event) error { return stop })
	wantErr(t, "fn error", err, stop)
}

// testFinishEvents: a finish may carry the event log's last batch; it is
// appended as AppendEvents would, in the same step, and a gap drops the
// events but not the finish.
func testFinishEvents(t *testing.T, h *harness) {
	k := store.Key{Tenant: "t", Thread: "finev"}
	check := func(run string, want []store.Event) {
		t.Helper()
		if diff := cmp.Diff(want, collect(t, h, k, run, 0)); diff != "" {
			t.Fatalf("%s: replay (-want +got):\n%s", run, diff)
		}
		if r := h.run(k, run); r.Events != int64(len(want)) || r.Status != store.Completed {
			t.Fatalf("%s: %s with %d events, want completed with %d", run, r.Status, r.Events, len(want))
		}
	}

	// A live follower sees the finish's events and then the end.
	l := h.start(k, "r1")
	if err := h.s.AppendEvents(h.ctx, l, 1, datas(events(1, 3))); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	followed := make(chan []store.Event, 1)
	go func() {
		var got []store.Event
		err := h.s.FollowEvents(h.ctx, k, "r1", 0, func(e store.Event) error {
			got = append(got, e)
			if e.Seq == 3 {
				close(ready)
			}
			return nil
		})
		if err != nil {
			t.Errorf("follow: %v", err)
		}
		followed <- got
	}()
	<-ready
	// The batch overlaps what is stored (a retried append): only 4..6 are new.
	f := store.Finish{Status: store.Completed, EventsFrom: 3, Events: datas(events(3, 6))}
	h.finish(l, f)
	if diff := cmp.Diff(events(1, 6), <-followed); diff != "" {
		t.Fatalf("follower (-want +got):\n%s", diff)
	}
	check("r1", events(1, 6))
	// A retried finish changes nothing.
	if err := h.s.Finish(h.ctx, l, &f); err != nil {
		t.Fatalf("retried finish: %v", err)
	}
	check("r1", events(1, 6))

	// A run's whole log in its finish, with its transcript.
	l = h.start(k, "r2")
	msgs, hashes := Msgs(0, 2)
	tr := store.Diff(nil, msgs, hashes)
	h.finish(l, store.Finish{Status: store.Completed, Transcript: &tr, EventsFrom: 1, Events: datas(events(1, 4))})
	check("r2", events(1, 4))
	if th := h.load(k); len(th.Messages) != 2 {
		t.Fatalf("transcript with the finish's events: %d messages", len(th.Messages))
	}

	// A gap: the events are dropped, the run finishes.
	l = h.start(k, "r3")
	if err := h.s.AppendEvents(h.ctx, l, 1, datas(events(1, 2))); err != nil {
		t.Fatal(err)
	}
	h.finish(l, store.Finish{Status: store.Completed, EventsFrom: 5, Events: datas(events(5, 6))})
	check("r3", events(1, 2))

	l = h.start(k, "r4")
	err := h.s.Finish(h.ctx, l, &store.Finish{Status: store.Completed, Events: datas(events(1, 1))})
	wantErr(t, "finish events without a first number", err, store.ErrInvalid)
}

func testFollowLive(t *testing.T, h *harness) {
	k := store.Key{Tenant: "t", Thread: "live"}
	l := h.start(k, "r")
	all := events(1, 50)
	if err := h.s.AppendEvents(h.ctx, l, 1, datas(all[:5])); err != nil {
		t.Fatal(err)
	}
	type result struct {
		got []store.Event
		err error
	}
	follow := func(after int64, ready chan<- struct{}) <-chan result {
		out := make(chan result, 1)
		go func() {
			var got []store.Event
			err := h.s.FollowEvents(h.ctx, k, "r", after, func(e store.Event) error {
				got = append(got, e)
				if ready != nil && e.Seq == 5 {
					close(ready)
				}
				return nil
			})
			out <- result{got, err}
		}()
		return out
	}
	// One follower from the start, one from id 3; both must be following
	// (have seen event 5) before the rest is appended.
	ready1, ready2 := make(chan struct{}), make(chan struct{})
	f1, f2 := follow(0, ready1), follow(3, ready2)
	<-ready1
	<-ready2
	for i := 5; i < 50; i += 5 {
		if err := h.s.AppendEvents(h.ctx, l, int64(i+1), datas(all[i:i+5])); err != nil {
			t.Fatal(err)
		}
	}
	h.finish(l, store.Finish{Status: store.Completed})
	r1, r2 := <-f1, <-f2
	if r1.err != nil || r2.err != nil {
		t.Fatalf("followers: %v, %v", r1.err, r2.err)
	}
	if diff := cmp.Diff(all, r1.got); diff != "" {
		t.Fatalf("follower from start (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(all[3:], r2.got); diff != "" {
		t.Fatalf("follower from 3 (-want +got):\n%s", diff)
	}
	// A follower of a run that is swept stops too.
	k2 := store.Key{Tenant: "t", Thread: "live2"}
	l2 := h.start(k2, "r2")
	if err := h.s.AppendEvents(h.ctx, l2, 1, [][]byte{[]byte("only")}); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- h.s.FollowEvents(h.ctx, k2, "r2", 0, func(store.Event) error { close(ready); return nil })
	}()
	<-ready
	h.clock.Advance(ttl + time.Second)
	if _, err := h.s.Sweep(h.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("follower of a swept run: %v", err)
	}
	// A cancelled context ends a follow of a live run.
	k3 := store.Key{Tenant: "t", Thread: "live3"}
	h.start(k3, "r3")
	ctx, cancel := context.WithCancel(h.ctx)
	cancel()
	err := h.s.FollowEvents(ctx, k3, "r3", 0, func(store.Event) error { return nil })
	wantErr(t, "cancelled follow", err, context.Canceled)
}

func testRetryTwice(t *testing.T, h *harness) {
	k := store.Key{Tenant: "t", Thread: "retry"}
	msgs, hashes := Msgs(0, 4)
	h.turn(k, "r1", msgs[:3], hashes[:3])
	l := h.start(k, "r2")
	th := h.load(k)
	tr := store.Diff(th.Hashes, msgs, hashes)
	// The same save twice leaves one copy.
	for range 2 {
		if err := h.s.SaveTranscript(h.ctx, l, tr); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(msgs, h.load(k).Messages); diff != "" {
		t.Fatalf("save twice (-want +got):\n%s", diff)
	}
	reply, rh := Msg(4, "assistant")
	fin := store.Transcript{Keep: 4, KeepHash: hashes[3], Messages: [][]byte{reply}, Hashes: []store.Hash{rh}}
	f := store.Finish{Status: store.Completed, Transcript: &fin, Usage: &store.Usage{InputTokens: 1}}
	for range 2 {
		if err := h.s.Finish(h.ctx, l, &f); err != nil {
			t.Fatal(err)
		}
	}
	th = h.load(k)
	if len(th.Messages) != 5 || th.Version != 3 {
		t.Fatalf("finish twice: %d messages, version %d; want 5, 3", len(th.Messages), th.Version)
	}
	page, err := h.s.ListThreads(h.ctx, store.ThreadQuery{Tenant: "t"})
	if err != nil || len(page.Threads) != 1 || page.Threads[0].Usage.InputTokens != 11 {
		t.Fatalf("usage counted twice or lost: %+v %v", page, err)
	}
}

func testDelete(t *testing.T, h *harness) {
	keep := store.Key{Tenant: "t", Thread: "keep"}
	gone := store.Key{Tenant: "t", Thread: "gone"}
	other := store.Key{Tenant: "solo", Thread: "gone"}
	for _, k := range []store.Key{keep, gone, other} {
		msgs, hashes := Msgs(0, 3)
		l := h.start(k, k.Thread+"-p")
		if err := h.s.AppendEvents(h.ctx, l, 1, msgs); err != nil {
			t.Fatal(err)
		}
		tr := store.Diff(nil, msgs, hashes)
		h.finish(l, store.Finish{Status: store.Interrupted, Transcript: &tr, Interrupts: []store.Interrupt{{CallID: "c1", Name: "f"}},
			Response: []byte("{}"), UpstreamBody: []byte(`{"messages":[]}`)})
		l = h.start(k, k.Thread+"-q")
		h.finish(l, store.Finish{Status: store.Completed, Resumes: k.Thread + "-p", Resolve: []string{"c1"}})
		h.start(k, k.Thread+"-live") // a running run with a lease
	}
	lister, ok := h.s.(KeyLister)
	if !ok {
		t.Fatal("backend does not implement storetest.KeyLister")
	}
	before, err := lister.DebugKeys(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []store.Key{gone, other} {
		if err := h.s.DeleteThread(h.ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.s.DeleteThread(h.ctx, gone); err != nil {
		t.Fatalf("delete twice: %v", err)
	}
	after, err := lister.DebugKeys(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range after {
		if strings.Contains(key, "gone") || strings.Contains(key, "solo") {
			t.Errorf("key left after delete: %q", key)
		}
	}
	if len(after) >= len(before) || len(after) == 0 {
		t.Fatalf("keys before %d, after %d", len(before), len(after))
	}
	_, err = h.s.LoadThread(h.ctx, gone)
	wantErr(t, "load deleted", err, store.ErrNotFound)
	_, err = h.s.ListRuns(h.ctx, gone)
	wantErr(t, "runs of deleted", err, store.ErrNotFound)
	_, err = h.s.FindRun(h.ctx, "t", "gone-p")
	wantErr(t, "run id of deleted", err, store.ErrNotFound)
	if th := h.load(keep); len(th.Messages) != 3 {
		t.Fatalf("kept thread: %d messages", len(th.Messages))
	}
	if lost, err := h.s.Sweep(h.ctx); err != nil || len(lost) != 0 {
		t.Fatalf("sweep after delete: %v %v", lost, err)
	}
	tenants, err := h.s.ListTenants(h.ctx)
	if err != nil || !slices.Equal(tenants, []string{"t"}) {
		t.Fatalf("tenants after delete: %v %v", tenants, err)
	}
}

func testAudit(t *testing.T, h *harness) {
	type spec struct {
		k      store.Key
		conn   string
		status store.Status
	}
	var specs []spec
	for i := range 12 {
		st := store.Completed
		if i%3 == 0 {
			st = store.Failed
		}
		conn := "openai"
		if i%2 == 0 {
			conn = "gemini"
		}
		specs = append(specs, spec{store.Key{Tenant: fmt.Sprintf("ten/%d=", i%3), Thread: fmt.Sprintf("th-%02d", i)}, conn, st})
	}
	for _, s := range specs {
		h.clock.Advance(time.Second)
		l := h.start(s.k, "r-"+s.k.Thread)
		msgs, hashes := Msgs(0, 1)
		tr := store.Diff(nil, msgs, hashes)
		tr.Connection, tr.Format = s.conn, "openai-chat"
		h.finish(l, store.Finish{Status: s.status, Transcript: &tr, Model: "model-" + s.conn, Usage: &store.Usage{InputTokens: 3, OutputTokens: 4}})
	}
	// Newest first across tenants, paged by 5.
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		page, err := h.s.ListThreads(h.ctx, store.ThreadQuery{Limit: 5, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range page.Threads {
			got = append(got, s.Key.Thread)
		}
		if page.NextCursor == "" {
			break
		}
		if pages > 5 {
			t.Fatal("cursor does not advance")
		}
		cursor = page.NextCursor
	}
	var want []string
	for i := 11; i >= 0; i-- {
		want = append(want, fmt.Sprintf("th-%02d", i))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("all threads (-want +got):\n%s", diff)
	}
	page, err := h.s.ListThreads(h.ctx, store.ThreadQuery{Tenant: "ten/0=", Status: store.Failed, Connection: "gemini"})
	if err != nil {
		t.Fatal(err)
	}
	// Tenant 0 holds 0,3,6,9; failed: 0,3,6,9; gemini: 0,6.
	if len(page.Threads) != 2 || page.Threads[0].Key.Thread != "th-06" || page.Threads[1].Key.Thread != "th-00" {
		t.Fatalf("filtered: %+v", page.Threads)
	}
	s := page.Threads[0]
	if s.Model != "model-gemini" || s.Runs != 1 || s.LastStatus != store.Failed || s.Usage != (store.Usage{InputTokens: 3, OutputTokens: 4}) || s.Format != "openai-chat" || s.CreatedAt.IsZero() {
		t.Fatalf("summary = %+v", s)
	}
	// Updated times are base+1s … base+12s; since/until bound them.
	base := NewClock().Now()
	page, err = h.s.ListThreads(h.ctx, store.ThreadQuery{Model: "model-openai", Since: base.Add(8 * time.Second), Until: base.Add(11 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, s := range page.Threads {
		got = append(got, s.Key.Thread)
	}
	if diff := cmp.Diff([]string{"th-09", "th-07"}, got); diff != "" {
		t.Fatalf("since/until/model (-want +got):\n%s", diff)
	}
	tenants, err := h.s.ListTenants(h.ctx)
	if err != nil || !slices.Equal(tenants, []string{"ten/0=", "ten/1=", "ten/2="}) {
		t.Fatalf("tenants = %v %v", tenants, err)
	}
}

func testSessions(t *testing.T, h *harness) {
	a, err := h.s.SessionID(h.ctx, "openai", "gpt-5", "sess-1")
	if err != nil || a != "sess-1" {
		t.Fatalf("first: %q %v", a, err)
	}
	b, err := h.s.SessionID(h.ctx, "openai", "gpt-5", "sess-2")
	if err != nil || b != "sess-1" {
		t.Fatalf("second: %q %v", b, err)
	}
	c, err := h.s.SessionID(h.ctx, "openai", "gpt-4", "sess-3")
	if err != nil || c != "sess-3" {
		t.Fatalf("other model: %q %v", c, err)
	}
}

func testInvalid(t *testing.T, h *harness) {
	for _, k := range []store.Key{{Tenant: "t", Thread: "a{b}"}, {Tenant: "t{x}", Thread: "a"}, {Tenant: "", Thread: "a"}, {Tenant: "t", Thread: strings.Repeat("a", 129)}, {Tenant: "t", Thread: "a/b"}} {
		_, err := h.s.LoadThread(h.ctx, k)
		wantErr(t, "load "+k.String(), err, store.ErrInvalid)
		_, err = h.s.StartRun(h.ctx, store.StartRun{Key: k, RunID: "r", TTL: ttl})
		wantErr(t, "start "+k.String(), err, store.ErrInvalid)
	}
	_, err := h.s.StartRun(h.ctx, store.StartRun{Key: store.Key{Tenant: "t", Thread: "a"}, RunID: "r{1}", TTL: ttl})
	wantErr(t, "bad run id", err, store.ErrInvalid)
}

func testStartLoad(t *testing.T, h *harness) {
	start := func(k store.Key, run, fp string) (*store.Started, error) {
		return h.s.StartRun(h.ctx, store.StartRun{Key: k, RunID: run, Owner: "o", TTL: ttl, Fingerprint: fp, Model: "m", LoadThread: true})
	}
	// A fresh thread: created, no thread.
	k := store.Key{Tenant: "t", Thread: "load"}
	st, err := start(k, "r1", "f1")
	if err != nil || !st.Created || st.ThreadFound || st.Thread.Messages != nil || st.Thread.Version != 0 {
		t.Fatalf("fresh thread: %+v %v", st, err)
	}
	// The retry of a run whose thread has no transcript yet.
	again, err := start(k, "r1", "f1")
	if err != nil || again.Created || again.ThreadFound || again.Run.Status != store.Running {
		t.Fatalf("retry before any transcript: %+v %v", again, err)
	}
	msgs, hashes := Msgs(0, 4)
	tr := store.Diff(nil, msgs, hashes)
	tr.System, tr.Connection, tr.Format, tr.Model = []byte(`{"parts":[]}`), "gemini", "gemini", "gemini-2.5-pro"
	h.finish(st.Lease, store.Finish{Status: store.Interrupted, Transcript: &tr, Interrupts: []store.Interrupt{{CallID: "c1", Name: "f"}}})
	want := h.load(k)

	// An existing thread: the same thread LoadThread returns.
	h.clock.Advance(time.Second)
	st, err = start(k, "r2", "f2")
	if err != nil || !st.Created || !st.ThreadFound {
		t.Fatalf("existing thread: %+v %v", st, err)
	}
	if diff := cmp.Diff(want, st.Thread); diff != "" {
		t.Fatalf("thread with the start (-LoadThread +StartRun):\n%s", diff)
	}
	if st.Lease.Token == 0 || st.Run.Status != store.Running || st.Run.ID != "r2" {
		t.Fatalf("run %+v lease %+v", st.Run, st.Lease)
	}
	// Without the flag, no thread.
	if st, err := h.s.StartRun(h.ctx, store.StartRun{Key: k, RunID: "r2", TTL: ttl, Fingerprint: "f2"}); err != nil || st.ThreadFound || st.Thread.Messages != nil {
		t.Fatalf("start without LoadThread: %+v %v", st, err)
	}

	// The lease is held: refused, no thread.
	held, err := start(k, "r3", "f3")
	wantErr(t, "start on a held lease", err, store.ErrLeaseHeld)
	if held.ThreadFound || held.Lease.RunID != "r2" {
		t.Fatalf("held: %+v", held)
	}

	// The retry of an existing run: the run as stored, and the thread.
	reply, rh := Msg(4, "assistant")
	fin := store.Diff(want.Hashes, append(slices.Clone(msgs), reply), append(slices.Clone(hashes), rh))
	fin.System = []byte(`{"parts":[{"text":"kept"}]}`)
	h.finish(st.Lease, store.Finish{Status: store.Completed, Transcript: &fin, Resumes: "r1", Resolve: []string{"c1"}})
	want = h.load(k)
	for _, run := range []string{"r1", "r2"} {
		again, err := start(k, run, "f"+run[1:])
		if err != nil || again.Created || again.Lease.Token != 0 || !again.ThreadFound {
			t.Fatalf("retry of %s: %+v %v", run, again, err)
		}
		stored := h.run(k, run)
		stored.Response = nil
		if diff := cmp.Diff(stored, again.Run); diff != "" {
			t.Fatalf("retried run %s (-GetRun +StartRun):\n%s", run, diff)
		}
		if diff := cmp.Diff(want, again.Thread); diff != "" {
			t.Fatalf("thread with the retry of %s (-LoadThread +StartRun):\n%s", run, diff)
		}
	}
	if r := h.run(k, "r1"); len(r.Interrupts) != 1 || r.Interrupts[0].Status != store.Resolved || r.ResumedBy != "r2" {
		t.Fatalf("r1 = %+v", r)
	}

	// KnownDigest: a caller holding the stored transcript gets the meta
	// without the messages; a stale digest gets the whole thread.
	known := func(run, digest string) *store.Started {
		t.Helper()
		st, err := h.s.StartRun(h.ctx, store.StartRun{Key: k, RunID: run, Owner: "o", TTL: ttl, Fingerprint: "f" + run[1:], Model: "m",
			LoadThread: true, KnownDigest: digest})
		if err != nil || !st.ThreadFound {
			t.Fatalf("start %s with a known digest: %+v %v", run, st, err)
		}
		return st
	}
	same := known("r2", store.Digest(want.Hashes))
	meta := want
	meta.Messages, meta.Hashes = nil, nil
	if diff := cmp.Diff(meta, same.Thread); diff != "" || !same.Unchanged {
		t.Fatalf("unchanged transcript: Unchanged=%v (-meta +StartRun):\n%s", same.Unchanged, diff)
	}
	stale := known("r2", store.Digest(want.Hashes[:len(want.Hashes)-1]))
	if diff := cmp.Diff(want, stale.Thread); diff != "" || stale.Unchanged {
		t.Fatalf("stale digest: Unchanged=%v (-LoadThread +StartRun):\n%s", stale.Unchanged, diff)
	}
	// NoSystem: the same thread without its system blob.
	for _, digest := range []string{"", store.Digest(want.Hashes)} {
		st, err := h.s.StartRun(h.ctx, store.StartRun{Key: k, RunID: "r2", Owner: "o", TTL: ttl, Fingerprint: "f2", Model: "m",
			LoadThread: true, KnownDigest: digest, NoSystem: true})
		wantTh := want
		if digest != "" {
			wantTh = meta
		}
		wantTh.System = nil
		if diff := cmp.Diff(wantTh, st.Thread); err != nil || diff != "" || want.System == nil {
			t.Fatalf("NoSystem, digest %q: %v (-want +StartRun):\n%s", digest, err, diff)
		}
	}

	// A run id of another thread is refused and leaves that thread as it
	// was: no run, no lease, same summary.
	other := store.Key{Tenant: "t", Thread: "other"}
	h.turn(other, "o1", msgs[:1], hashes[:1])
	before, err := h.s.ListThreads(h.ctx, store.ThreadQuery{Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = start(other, "r2", "f2")
	wantErr(t, "run id of another thread", err, store.ErrConflict)
	after, err := h.s.ListThreads(h.ctx, store.ThreadQuery{Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Fatalf("refused start changed the listing (-before +after):\n%s", diff)
	}
	if got, err := h.s.FindRun(h.ctx, "t", "r2"); err != nil || got != k {
		t.Fatalf("FindRun r2 = %v %v", got, err)
	}
	next, err := start(other, "o2", "f")
	if err != nil || !next.Created || !next.ThreadFound || len(next.Thread.Messages) != 1 {
		t.Fatalf("start after the refused one: %+v %v", next, err)
	}
	runs, err := h.s.ListRuns(h.ctx, other)
	if err != nil || len(runs) != 2 || runs[0].ID != "o1" || runs[1].ID != "o2" {
		t.Fatalf("runs of the other thread: %+v %v", runs, err)
	}
}

// testRunningListed: a thread whose run is still running is listed once
// the run saved its pending turn (a thread without a transcript is not).
func testRunningListed(t *testing.T, h *harness) {
	k := store.Key{Tenant: "t", Thread: "running"}
	l := h.start(k, "r1")
	page, err := h.s.ListThreads(h.ctx, store.ThreadQuery{Tenant: "t"})
	if err != nil || len(page.Threads) != 0 {
		t.Fatalf("listed before any transcript: %+v %v", page, err)
	}
	msgs, hashes := Msgs(0, 1)
	h.clock.Advance(time.Second)
	if err := h.s.SaveTranscript(h.ctx, l, store.Diff(nil, msgs, hashes)); err != nil {
		t.Fatal(err)
	}
	for _, q := range []store.ThreadQuery{{Tenant: "t"}, {}, {Since: h.clock.Now()}} {
		page, err = h.s.ListThreads(h.ctx, q)
		if err != nil || len(page.Threads) != 1 || page.Threads[0].Key != k || page.Threads[0].LastStatus != store.Running {
			t.Fatalf("running thread, query %+v: %+v %v", q, page, err)
		}
	}
	if tenants, err := h.s.ListTenants(h.ctx); err != nil || !slices.Equal(tenants, []string{"t"}) {
		t.Fatalf("tenants %v %v", tenants, err)
	}
	// A finish without a transcript moves the thread to its time.
	h.clock.Advance(time.Second)
	h.finish(l, store.Finish{Status: store.Failed, Reason: "upstream"})
	page, err = h.s.ListThreads(h.ctx, store.ThreadQuery{Since: h.clock.Now()})
	if err != nil || len(page.Threads) != 1 || page.Threads[0].LastStatus != store.Failed || !page.Threads[0].UpdatedAt.Equal(h.clock.Now()) {
		t.Fatalf("after a failed finish: %+v %v", page, err)
	}
	// A run that fails before any transcript does not list its thread
	// nor its tenant.
	l = h.start(store.Key{Tenant: "quiet", Thread: "q"}, "q1")
	h.finish(l, store.Finish{Status: store.Failed})
	if tenants, err := h.s.ListTenants(h.ctx); err != nil || !slices.Equal(tenants, []string{"t"}) {
		t.Fatalf("tenants after a run without transcript: %v %v", tenants, err)
	}
}

// testRefusedFinishStaysSweepable: a finish the store refuses leaves a
// running run that the sweeper still fails once its lease is gone.
func testRefusedFinishStaysSweepable(t *testing.T, h *harness) {
	msgs, hashes := Msgs(0, 2)
	k := store.Key{Tenant: "t", Thread: "refused"}
	l := h.start(k, "r1")
	bad := store.Transcript{Keep: 2, KeepHash: hashes[1], Messages: msgs, Hashes: hashes}
	wantErr(t, "finish with a prefix past the end", h.s.Finish(h.ctx, l, &store.Finish{Status: store.Completed, Transcript: &bad}), store.ErrConflict)
	k2 := store.Key{Tenant: "t", Thread: "released"}
	l2 := h.start(k2, "r2")
	if err := h.s.Release(h.ctx, l2); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "finish after release", h.s.Finish(h.ctx, l2, &store.Finish{Status: store.Completed}), store.ErrFenced)
	if lost, err := h.s.Sweep(h.ctx); err != nil || len(lost) != 1 || lost[0].RunID != "r2" {
		t.Fatalf("sweep of the released run: %v %v", lost, err)
	}
	h.clock.Advance(ttl + time.Second)
	if lost, err := h.s.Sweep(h.ctx); err != nil || len(lost) != 1 || lost[0].RunID != "r1" {
		t.Fatalf("sweep of the refused run: %v %v", lost, err)
	}
	for _, ref := range []store.RunRef{{Key: k, RunID: "r1"}, {Key: k2, RunID: "r2"}} {
		if r := h.run(ref.Key, ref.RunID); r.Status != store.Failed || r.Reason != store.ReasonProxyLost {
			t.Fatalf("%s = %s %q", ref.RunID, r.Status, r.Reason)
		}
	}
}

// bigMsg is a message of about size bytes, distinct per i.
func bigMsg(i, size int) ([]byte, store.Hash) {
	m := []byte(fmt.Sprintf(`{"role":"user","content":"%d %s"}`, i, strings.Repeat("x", size)))
	return m, HashOf(m)
}

// testLargeMessages: messages of megabytes (which a backend may keep apart
// from the others) are stored, read, replaced, started from and deleted
// like any other.
func testLargeMessages(t *testing.T, h *harness) {
	k := store.Key{Tenant: "t", Thread: "large"}
	small, smallH := Msgs(0, 4)
	big1, big1H := bigMsg(1, 1<<20)
	big2, big2H := bigMsg(2, 300<<10)
	big3, big3H := bigMsg(3, 2<<20)

	msgs := [][]byte{small[0], big1, small[1], big2}
	hashes := []store.Hash{smallH[0], big1H, smallH[1], big2H}
	h.turn(k, "r1", msgs, hashes)
	check := func(what string, th store.Thread, msgs [][]byte, hashes []store.Hash) {
		t.Helper()
		if !slices.EqualFunc(msgs, th.Messages, bytes.Equal) { // cmp.Diff crawls over megabytes
			t.Fatalf("%s: messages differ (%d stored, %d sent)", what, len(th.Messages), len(msgs))
		}
		if diff := cmp.Diff(hashes, th.Hashes); diff != "" {
			t.Fatalf("%s: hashes (-want +got):\n%s", what, diff)
		}
	}
	check("first turn", h.load(k), msgs, hashes)

	// A pending-turn save appends one, then the turn replaces the tail:
	// the second large message goes, a third comes.
	l := h.start(k, "r2")
	more := store.Transcript{Keep: 4, KeepHash: hashes[3], Messages: [][]byte{big3}, Hashes: []store.Hash{big3H}}
	if err := h.s.SaveTranscript(h.ctx, l, more); err != nil {
		t.Fatal(err)
	}
	check("saved", h.load(k), append(slices.Clone(msgs), big3), append(slices.Clone(hashes), big3H))
	msgs = [][]byte{small[0], big1, small[1], big3, small[2]}
	hashes = []store.Hash{smallH[0], big1H, smallH[1], big3H, smallH[2]}
	tr := store.Transcript{Keep: 3, KeepHash: hashes[2], Messages: msgs[3:], Hashes: hashes[3:]}
	h.finish(l, store.Finish{Status: store.Completed, Transcript: &tr})
	check("replaced tail", h.load(k), msgs, hashes)

	// A retried finish changes nothing.
	if err := h.s.Finish(h.ctx, l, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatalf("retried finish: %v", err)
	}
	check("retried", h.load(k), msgs, hashes)

	// StartRun reads it too.
	st, err := h.s.StartRun(h.ctx, store.StartRun{Key: k, RunID: "r3", Owner: "o", TTL: ttl, LoadThread: true})
	if err != nil || !st.ThreadFound {
		t.Fatalf("start with load: %+v %v", st.Lease, err)
	}
	check("started", st.Thread, msgs, hashes)

	// A stale holder's write is refused and leaves the thread as it was.
	stale := l
	big4, big4H := bigMsg(4, 1<<20)
	bad := store.Transcript{Keep: 5, KeepHash: hashes[4], Messages: [][]byte{big4}, Hashes: []store.Hash{big4H}}
	wantErr(t, "stale save", h.s.SaveTranscript(h.ctx, stale, bad), store.ErrFenced)

	// Rewritten from scratch, by a run whose answer and upstream request
	// are large too.
	msgs, hashes = [][]byte{big4, small[3]}, []store.Hash{big4H, smallH[3]}
	tr = store.Transcript{Keep: 0, Messages: msgs, Hashes: hashes}
	resp, up := bytes.Repeat([]byte("r"), 700<<10), bytes.Repeat([]byte("u"), 1<<20)
	h.finish(st.Lease, store.Finish{Status: store.Completed, Transcript: &tr, Response: resp, UpstreamBody: up})
	check("rewritten", h.load(k), msgs, hashes)
	if r := h.run(k, "r3"); !bytes.Equal(r.Response, resp) || !bytes.Equal(r.UpstreamBody, up) {
		t.Fatalf("large bodies: response %d bytes, upstream %d bytes", len(r.Response), len(r.UpstreamBody))
	}
	if err := h.s.Finish(h.ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr, Response: resp, UpstreamBody: up}); err != nil {
		t.Fatalf("retried finish with large bodies: %v", err)
	}
	if r := h.run(k, "r3"); !bytes.Equal(r.Response, resp) || !bytes.Equal(r.UpstreamBody, up) {
		t.Fatalf("large bodies after a retry: response %d bytes, upstream %d bytes", len(r.Response), len(r.UpstreamBody))
	}

	if err := h.s.DeleteThread(h.ctx, k); err != nil {
		t.Fatal(err)
	}
	_, err = h.s.LoadThread(h.ctx, k)
	wantErr(t, "load deleted", err, store.ErrNotFound)
}

// testSystemBlob follows a thread's system blob, small and large, through
// writes that set, keep, change and clear it, as LoadThread and StartRun
// read it.
func testSystemBlob(t *testing.T, h *harness) {
	k := store.Key{Tenant: "t", Thread: "system"}
	msgs, hashes := Msgs(0, 13)
	small := []byte(`{"parts":[{"text":"be brief"}]}`)
	large := []byte(`{"parts":[{"text":"` + strings.Repeat("a", 600<<10) + `"}]}`)
	large2 := []byte(`{"parts":[{"text":"` + strings.Repeat("b", 300<<10) + `"}]}`)
	var stored []store.Hash
	n := 0
	// write saves the pending turn and finishes it with one more message,
	// both with sys, and checks what both reads return.
	write := func(run string, sys []byte) {
		t.Helper()
		st, err := h.s.StartRun(h.ctx, store.StartRun{Key: k, RunID: run, Owner: "o", TTL: ttl, Fingerprint: run, LoadThread: true})
		if err != nil {
			t.Fatal(err)
		}
		pending := store.Diff(stored, msgs[:n+1], hashes[:n+1])
		pending.System = sys
		if err := h.s.SaveTranscript(h.ctx, st.Lease, pending); err != nil {
			t.Fatalf("%s: save: %v", run, err)
		}
		if got := h.load(k).System; !bytes.Equal(got, sys) || (got == nil) != (sys == nil) {
			t.Fatalf("%s: after the pending save, system of %d bytes, want %d", run, len(got), len(sys))
		}
		fin := store.Diff(hashes[:n+1], msgs[:n+2], hashes[:n+2])
		fin.System = sys
		h.finish(st.Lease, store.Finish{Status: store.Completed, Transcript: &fin})
		n += 2
		stored = hashes[:n]
		for _, read := range []struct {
			name string
			sys  func() []byte
		}{
			{"LoadThread", func() []byte { return h.load(k).System }},
			{"StartRun", func() []byte {
				st, err := h.s.StartRun(h.ctx, store.StartRun{Key: k, RunID: run, Owner: "o", TTL: ttl, Fingerprint: run, LoadThread: true})
				if err != nil || !st.ThreadFound {
					t.Fatalf("%s: retried start: %+v %v", run, st, err)
				}
				return st.Thread.System
			}},
		} {
			if got := read.sys(); !bytes.Equal(got, sys) || (got == nil) != (sys == nil) {
				t.Fatalf("%s: %s read a system of %d bytes, want %d", run, read.name, len(got), len(sys))
			}
		}
	}
	write("r1", large)  // set, large
	write("r2", large)  // kept
	write("r3", large2) // changed to another large one
	write("r4", small)  // to a small one
	write("r5", large)  // back to large
	write("r6", nil)    // cleared
	// A finish that brings a new large system with no pending save
	// before it (on Redis: the finish itself is sent again with it).
	st, err := h.s.StartRun(h.ctx, store.StartRun{Key: k, RunID: "r7", Owner: "o", TTL: ttl, Fingerprint: "r7"})
	if err != nil {
		t.Fatal(err)
	}
	fin := store.Diff(stored, msgs[:n+1], hashes[:n+1])
	fin.System = large2
	h.finish(st.Lease, store.Finish{Status: store.Completed, Transcript: &fin})
	if got := h.load(k); !bytes.Equal(got.System, large2) || len(got.Messages) != n+1 {
		t.Fatalf("finish alone: system of %d bytes, %d messages", len(got.System), len(got.Messages))
	}
	if r := h.run(k, "r7"); r.Status != store.Completed {
		t.Fatalf("finish alone: run %s", r.Status)
	}
	if err := h.s.DeleteThread(h.ctx, k); err != nil {
		t.Fatal(err)
	}
	_, err = h.s.LoadThread(h.ctx, k)
	wantErr(t, "load deleted", err, store.ErrNotFound)
}

// testSaveAsync: a store.AsyncSaver's queued write lands as
// SaveTranscript's would, and each done gets SaveTranscript's outcome,
// once: applied, fenced, conflicting, invalid, a large message, and a
// large system blob that changes (on Redis a second send).
func testSaveAsync(t *testing.T, h *harness) {
	as, ok := h.s.(store.AsyncSaver)
	if !ok {
		t.Skip("the store saves transcripts synchronously only")
	}
	save := func(l store.Lease, tr store.Transcript) error {
		t.Helper()
		done := make(chan error, 2)
		as.SaveTranscriptAsync(h.ctx, l, tr, func(err error) { done <- err })
		err := <-done
		select {
		case again := <-done:
			t.Fatalf("done called twice: %v, then %v", err, again)
		default:
		}
		return err
	}
	k := store.Key{Tenant: "t", Thread: "async"}
	l := h.start(k, "r1")
	msgs, hashes := Msgs(0, 3)
	big := []byte(`{"role":"user","content":"` + strings.Repeat("b", 200<<10) + `"}`)
	msgs, hashes = append(msgs, big), append(hashes, HashOf(big))
	sys := []byte(`{"parts":[{"text":"` + strings.Repeat("s", 200<<10) + `"}]}`)
	tr := store.Diff(nil, msgs, hashes)
	tr.System = sys
	if err := save(l, tr); err != nil {
		t.Fatalf("async save: %v", err)
	}
	th := h.load(k)
	if diff := cmp.Diff(msgs, th.Messages); diff != "" {
		t.Fatalf("messages after the async save (-want +got):\n%s", diff)
	}
	if !bytes.Equal(th.System, sys) {
		t.Fatalf("system after the async save: %d bytes, want %d", len(th.System), len(sys))
	}
	// The same write again changes nothing; a new system blob of the same
	// size replaces the stored one.
	if err := save(l, tr); err != nil {
		t.Fatalf("repeated async save: %v", err)
	}
	sys2 := bytes.ReplaceAll(slices.Clone(sys), []byte("s"), []byte("z"))
	tr2 := store.Diff(hashes, msgs, hashes)
	tr2.System = sys2
	if err := save(l, tr2); err != nil {
		t.Fatalf("async save with a new system: %v", err)
	}
	if th := h.load(k); !bytes.Equal(th.System, sys2) {
		t.Fatalf("system after the change: %.20q", th.System)
	}
	stale := l
	stale.Token++
	wantErr(t, "async save under a stale lease", save(stale, tr2), store.ErrFenced)
	wrong := store.Transcript{Keep: 2, KeepHash: store.Hash{9}, Messages: [][]byte{[]byte(`{}`)}, Hashes: []store.Hash{{7}}}
	wantErr(t, "async save on another prefix", save(l, wrong), store.ErrConflict)
	wantErr(t, "async save of an invalid transcript", save(l, store.Transcript{Messages: [][]byte{[]byte(`{}`)}}), store.ErrInvalid)
	if th := h.load(k); len(th.Messages) != len(msgs) {
		t.Fatalf("refused async saves changed the thread: %d messages", len(th.Messages))
	}
}
