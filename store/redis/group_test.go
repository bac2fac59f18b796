package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/redistest"
)

// openOwn opens a store on a private server through a client the test
// can hook.
func openOwn(t *testing.T) (*Store, *redis.Client) {
	t.Helper()
	cl := redistest.Start(t).Client(t)
	s, err := Open(context.Background(), Options{Client: cl})
	if err != nil {
		t.Fatal(err)
	}
	return s, cl
}

// startRun starts run on k with a one-minute lease, failing the test if
// it cannot.
func startRun(t *testing.T, s *Store, k store.Key, run string) store.Lease {
	t.Helper()
	st, err := s.StartRun(context.Background(), store.StartRun{Key: k, RunID: run, Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return st.Lease
}

// gate holds the store's pipelines at the client until opened, and reports
// each one's command count as it arrives. Pipelines that go-redis itself
// sends to set up a new connection (HELLO, CLIENT SETINFO) pass.
type gate struct {
	on      chan struct{} // closed: pipelines pass
	arrived chan int
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() == "hello" || cmds[0].Name() == "client" {
			return next(ctx, cmds)
		}
		g.arrived <- len(cmds)
		<-g.on
		return next(ctx, cmds)
	}
}

// queuedBatches is how many batches wait in s's sender queue.
func queuedBatches(s *Store) int {
	s.send.mu.Lock()
	defer s.send.mu.Unlock()
	return len(s.send.queue)
}

// waitQueued yields until n batches wait in s's sender queue.
func waitQueued(s *Store, n int) {
	for queuedBatches(s) != n {
		runtime.Gosched()
	}
}

// TestConcurrentBatchesShareRoundTrips holds both lanes' round trips at the
// client, queues more starts behind them, cancels one queued start, and
// then lets everything through: the queued starts go as one pipeline, each
// gets its own result, and the cancelled one is never sent.
func TestConcurrentBatchesShareRoundTrips(t *testing.T) {
	ctx := context.Background()
	s, cl := openOwn(t)
	// A lease for the big write below, taken before the gate is in place.
	bigKey := store.Key{Tenant: "t", Thread: "big"}
	bigRun, err := s.StartRun(ctx, store.StartRun{Key: bigKey, RunID: "big", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{on: make(chan struct{}), arrived: make(chan int, 64)}
	cl.AddHook(g)

	type started struct {
		i   int
		res *store.Started
		err error
	}
	done := make(chan started, 16)
	start := func(ctx context.Context, i int) {
		res, err := s.StartRun(ctx, store.StartRun{Key: store.Key{Tenant: "t", Thread: fmt.Sprintf("th%d", i)},
			RunID: fmt.Sprintf("run%d", i), Owner: "o", TTL: time.Minute, Fingerprint: "fp", Model: "m"})
		done <- started{i, res, err}
	}
	// Two starts take both lanes and are held at the gate.
	for i := 0; i < sendLanes; i++ {
		go start(ctx, i)
		if n := <-g.arrived; n != 1 {
			t.Fatalf("lone start sent %d commands, want 1 (one script on a single node)", n)
		}
	}
	// A transcript bigger than bigBatch goes at once, on its own, and
	// does not wait for a lane.
	bigDone := make(chan error, 1)
	go func() {
		msgs, hashes := [][]byte{[]byte(`{"role":"user","content":"` + strings.Repeat("x", bigBatch) + `"}`)}, []store.Hash{{1}}
		bigDone <- s.SaveTranscript(ctx, bigRun.Lease, store.Diff(nil, msgs, hashes))
	}()
	if n := <-g.arrived; n != 4 {
		t.Fatalf("the big transcript went in a pipeline of %d commands, want 4 (its own)", n)
	}
	const waiting = 6
	for i := sendLanes; i < sendLanes+waiting; i++ {
		go start(ctx, i)
	}
	waitQueued(s, waiting)
	cctx, cancel := context.WithCancel(ctx)
	go start(cctx, 99)
	waitQueued(s, waiting+1)
	cancel()
	if r := <-done; r.i != 99 || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled queued start: %d %v, want 99 context.Canceled", r.i, r.err)
	}
	if n := queuedBatches(s); n != waiting {
		t.Fatalf("queue holds %d after the cancel, want %d", n, waiting)
	}

	close(g.on)
	if err := <-bigDone; err != nil {
		t.Fatal(err)
	}
	for range sendLanes + waiting {
		r := <-done
		if r.err != nil || !r.res.Created || r.res.Lease.RunID != fmt.Sprintf("run%d", r.i) ||
			r.res.Lease.Key.Thread != fmt.Sprintf("th%d", r.i) || r.res.Lease.Token != 1 {
			t.Fatalf("start %d: %+v %v", r.i, r.res.Lease, r.err)
		}
	}
	if n := <-g.arrived; n != waiting {
		t.Fatalf("the queued starts went as a pipeline of %d commands, want %d (one round trip)", n, waiting)
	}
	select {
	case n := <-g.arrived:
		t.Fatalf("one more pipeline of %d commands", n)
	default:
	}
	if _, err := s.FindRun(ctx, "t", "run99"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the cancelled start ran: FindRun = %v", err)
	}
	if _, err := s.FindRun(ctx, "t", "run5"); err != nil {
		t.Fatalf("a grouped start's run: %v", err)
	}
}

// TestGroupsBoundedByBytes: queued batches share a round trip up to
// maxGroupBytes of arguments; the rest go in the next one.
func TestGroupsBoundedByBytes(t *testing.T) {
	ctx := context.Background()
	s, cl := openOwn(t)
	const saves = 20
	const msgBytes = 60_000 // 17 fit in maxGroupBytes, 18 do not
	leases := make([]store.Lease, saves)
	for i := range leases {
		st, err := s.StartRun(ctx, store.StartRun{Key: store.Key{Tenant: "t", Thread: fmt.Sprintf("big%d", i)}, RunID: fmt.Sprintf("b%d", i), Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = st.Lease
	}
	g := &gate{on: make(chan struct{}), arrived: make(chan int, 64)}
	cl.AddHook(g)
	errs := make(chan error, saves+sendLanes)
	for i := 0; i < sendLanes; i++ { // every lane held at the gate
		go func() {
			_, err := s.StartRun(ctx, store.StartRun{Key: store.Key{Tenant: "t", Thread: fmt.Sprintf("lane%d", i)}, RunID: fmt.Sprintf("l%d", i), Owner: "o", TTL: time.Minute})
			errs <- err
		}()
		<-g.arrived
	}
	for _, l := range leases {
		go func() {
			msg := []byte(`{"role":"user","content":"` + strings.Repeat("x", msgBytes) + `"}`)
			errs <- s.SaveTranscript(ctx, l, store.Diff(nil, [][]byte{msg}, []store.Hash{{1}}))
		}()
	}
	waitQueued(s, saves)
	close(g.on)
	for range saves + sendLanes {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Every pipeline has arrived (each save returned after its own).
	// Each save is its script and three index commands.
	var got []int
	for len(g.arrived) > 0 {
		got = append(got, <-g.arrived/4)
	}
	slices.Sort(got)
	if !slices.Equal(got, []int{3, 17}) {
		t.Fatalf("the queued saves went in groups of %v, want [3 17]", got)
	}
}

// TestAsyncSavesQueue: an asynchronous save takes a free lane through a
// sender goroutine (its caller never sends), queues behind busy lanes like
// any batch and shares their round trips, and one whose context ended
// while it was queued is not sent: its done gets the context's error.
func TestAsyncSavesQueue(t *testing.T) {
	ctx := context.Background()
	s, cl := openOwn(t)
	lease := func(thread string) store.Lease {
		return startRun(t, s, store.Key{Tenant: "t", Thread: thread}, "r-"+thread)
	}
	first, live, dead := lease("first"), lease("live"), lease("dead")
	g := &gate{on: make(chan struct{}), arrived: make(chan int, 64)}
	cl.AddHook(g)
	msgs, hashes := [][]byte{[]byte(`{"role":"user","content":"hi"}`)}, []store.Hash{{1}}
	tr := store.Diff(nil, msgs, hashes)
	done := make(chan error, 3)
	s.SaveTranscriptAsync(ctx, first, tr, func(err error) { done <- err })
	// Its script and three index commands, sent by a sender goroutine
	// while this goroutine goes on.
	if n := <-g.arrived; n != 4 {
		t.Fatalf("the lone async save went as %d commands, want 4", n)
	}
	errs := make(chan error, sendLanes)
	for i := 1; i < sendLanes; i++ { // every other lane held at the gate
		go func() {
			_, err := s.StartRun(ctx, store.StartRun{Key: store.Key{Tenant: "t", Thread: fmt.Sprintf("lane%d", i)}, RunID: fmt.Sprintf("l%d", i), Owner: "o", TTL: time.Minute})
			errs <- err
		}()
		<-g.arrived
	}
	deadCtx, cancel := context.WithCancel(ctx)
	s.SaveTranscriptAsync(deadCtx, dead, tr, func(err error) { done <- err })
	s.SaveTranscriptAsync(ctx, live, tr, func(err error) { done <- err })
	waitQueued(s, 2)
	cancel()
	close(g.on)
	got := map[bool]int{}
	for range 3 {
		err := <-done
		switch {
		case err == nil:
			got[true]++
		case errors.Is(err, context.Canceled):
			got[false]++
		default:
			t.Fatalf("async save: %v", err)
		}
	}
	if got[true] != 2 || got[false] != 1 {
		t.Fatalf("async saves: %d applied, %d cancelled; want 2, 1", got[true], got[false])
	}
	for i := 1; i < sendLanes; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := <-g.arrived; n != 4 {
		t.Fatalf("the queued async saves went as %d commands, want 4 (the live one alone)", n)
	}
	if _, err := s.LoadThread(ctx, dead.Key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the cancelled async save was applied: LoadThread = %v", err)
	}
	if _, err := s.LoadThread(ctx, live.Key); err != nil {
		t.Fatalf("the queued async save: %v", err)
	}
}

// TestCloseAnswersQueued: batches still queued when the store closes are
// not sent, and their callers, waiting or not, get ErrUnavailable; so
// does an asynchronous save queued after.
func TestCloseAnswersQueued(t *testing.T) {
	ctx := context.Background()
	s, cl := openOwn(t)
	queued := startRun(t, s, store.Key{Tenant: "t", Thread: "queued"}, "q")
	g := &gate{on: make(chan struct{}), arrived: make(chan int, 64)}
	cl.AddHook(g)
	errs := make(chan error, sendLanes+2)
	for i := 0; i < sendLanes; i++ { // every lane held at the gate
		go func() {
			_, err := s.StartRun(ctx, store.StartRun{Key: store.Key{Tenant: "t", Thread: fmt.Sprintf("lane%d", i)}, RunID: fmt.Sprintf("l%d", i), Owner: "o", TTL: time.Minute})
			errs <- err
		}()
		<-g.arrived
	}
	msgs, hashes := [][]byte{[]byte(`{"role":"user","content":"hi"}`)}, []store.Hash{{1}}
	waiting := make(chan error, 1)
	go func() { waiting <- s.SaveTranscript(ctx, queued, store.Diff(nil, msgs, hashes)) }()
	waitQueued(s, 1)
	async := make(chan error, 2)
	s.SaveTranscriptAsync(ctx, queued, store.Diff(nil, msgs, hashes), func(err error) { async <- err })
	waitQueued(s, 2)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("queued save at close: %v, want ErrUnavailable", err)
	}
	if err := <-async; !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("queued async save at close: %v, want ErrUnavailable", err)
	}
	s.SaveTranscriptAsync(ctx, queued, store.Diff(nil, msgs, hashes), func(err error) { async <- err })
	if err := <-async; !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("async save after close: %v, want ErrUnavailable", err)
	}
	close(g.on) // the lanes' round trips, sent before the close, complete
	for i := 0; i < sendLanes; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("a start sent before the close: %v", err)
		}
	}
	if _, err := s.LoadThread(ctx, queued.Key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a save queued at close was applied: LoadThread = %v", err)
	}
}
