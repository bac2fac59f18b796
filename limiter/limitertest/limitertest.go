// Package limitertest holds the conformance suites every limiter.Gates and
// limiter.RateLimiter implementation passes: the in-process ones in package
// limiter and the Redis ones in limiter/redislimit.
package limitertest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/limiter"
)

// NewGates returns two gate sets that stand for two replicas: a gate name
// shared between them must share state (for in-process gates, return the
// same set twice).
type NewGates func(t *testing.T) (a, b limiter.Gates)

// waitFor spins until cond holds, yielding the processor; it fails the test
// after a generous deadline. It synchronises on observable state (queue
// depth), never on elapsed time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

func acquire(t *testing.T, g limiter.Gate) limiter.Slot {
	t.Helper()
	s, err := g.Acquire(context.Background())
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return s
}

// RunGateTests runs the gate conformance suite.
func RunGateTests(t *testing.T, newGates NewGates) {
	t.Run("FIFO100AcrossReplicas", func(t *testing.T) { testFIFO(t, newGates) })
	t.Run("CapAcrossReplicas", func(t *testing.T) { testCap(t, newGates) })
	t.Run("QueueFull", func(t *testing.T) { testQueueFull(t, newGates) })
	t.Run("QueueTimeout", func(t *testing.T) { testQueueTimeout(t, newGates) })
	t.Run("CancelGivesPlaceUp", func(t *testing.T) { testCancel(t, newGates) })
	t.Run("NoHeadOfLineAcrossGates", func(t *testing.T) { testNoHOL(t, newGates) })
	t.Run("NoCap", func(t *testing.T) { testNoCap(t, newGates) })
	t.Run("ReleaseIdempotent", func(t *testing.T) { testReleaseTwice(t, newGates) })
}

func testFIFO(t *testing.T, newGates NewGates) {
	a, b := newGates(t)
	cfg := limiter.GateConfig{MaxConcurrent: 1}
	ga, gb := a.Gate("fifo", cfg), b.Gate("fifo", cfg)
	same := ga == gb
	holder := acquire(t, ga)

	const n = 100
	order := make(chan int, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	perGate := map[limiter.Gate]int{}
	for i := 0; i < n; i++ {
		g := ga
		if i%2 == 1 {
			g = gb
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := g.Acquire(context.Background())
			if err != nil {
				errs <- err
				return
			}
			order <- i
			s.Release()
		}()
		// The next waiter starts only once this one is queued.
		perGate[g]++
		want := perGate[g]
		if same {
			want = i + 1
		}
		waitFor(t, fmt.Sprintf("waiter %d queued", i), func() bool { return g.Stats().Waiting >= want })
	}
	holder.Release()
	wg.Wait()
	close(order)
	close(errs)
	for err := range errs {
		t.Fatalf("waiter: %v", err)
	}
	i := 0
	for got := range order {
		if got != i {
			t.Fatalf("admission %d went to waiter %d; want strict arrival order", i, got)
		}
		i++
	}
	if i != n {
		t.Fatalf("%d admitted, want %d", i, n)
	}
}

func testCap(t *testing.T, newGates NewGates) {
	a, b := newGates(t)
	cfg := limiter.GateConfig{MaxConcurrent: 3}
	gates := []limiter.Gate{a.Gate("cap", cfg), b.Gate("cap", cfg)}
	var cur, max, done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 60)
	for i := 0; i < 60; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := gates[i%2].Acquire(context.Background())
			if err != nil {
				errs <- err
				return
			}
			n := cur.Add(1)
			for {
				m := max.Load()
				if n <= m || max.CompareAndSwap(m, n) {
					break
				}
			}
			for j := 0; j < 10; j++ {
				runtime.Gosched()
			}
			cur.Add(-1)
			done.Add(1)
			s.Release()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("holder: %v", err)
	}
	if m := max.Load(); m > 3 {
		t.Fatalf("max concurrent holders %d, cap 3", m)
	}
	if d := done.Load(); d != 60 {
		t.Fatalf("%d holders completed, want 60", d)
	}
}

func testQueueFull(t *testing.T, newGates NewGates) {
	a, b := newGates(t)
	cfg := limiter.GateConfig{MaxConcurrent: 1, MaxWaiting: 2}
	ga, gb := a.Gate("full", cfg), b.Gate("full", cfg)
	holder := acquire(t, ga)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s, err := ga.Acquire(ctx); err == nil {
				s.Release()
			}
		}()
		want := i + 1
		waitFor(t, "waiter queued", func() bool { return ga.Stats().Waiting >= want })
	}
	for _, g := range []limiter.Gate{ga, gb} {
		if _, err := g.Acquire(context.Background()); !errors.Is(err, limiter.ErrQueueFull) {
			t.Fatalf("third waiter: %v, want ErrQueueFull", err)
		}
	}
	if got := ga.Stats().QueueFull + gb.Stats().QueueFull; got < 2 {
		t.Fatalf("QueueFull counter %d, want >= 2", got)
	}
	cancel()
	wg.Wait()
	holder.Release()

	// Negative MaxWaiting: nobody waits.
	nw := a.Gate("nowait", limiter.GateConfig{MaxConcurrent: 1, MaxWaiting: -1})
	h := acquire(t, nw)
	if _, err := b.Gate("nowait", limiter.GateConfig{MaxConcurrent: 1, MaxWaiting: -1}).Acquire(context.Background()); !errors.Is(err, limiter.ErrQueueFull) {
		t.Fatalf("no-wait gate: %v, want ErrQueueFull", err)
	}
	h.Release()
	acquire(t, nw).Release()
}

func testQueueTimeout(t *testing.T, newGates NewGates) {
	a, b := newGates(t)
	cfg := limiter.GateConfig{MaxConcurrent: 1, Timeout: 50 * time.Millisecond}
	ga, gb := a.Gate("timeout", cfg), b.Gate("timeout", cfg)
	holder := acquire(t, ga)
	if _, err := gb.Acquire(context.Background()); !errors.Is(err, limiter.ErrQueueTimeout) {
		t.Fatalf("Acquire: %v, want ErrQueueTimeout", err)
	}
	if gb.Stats().QueueTimeout != 1 || gb.Stats().Waiting != 0 {
		t.Fatalf("stats after timeout: %+v", gb.Stats())
	}
	holder.Release()
	// The timed-out waiter left no trace: the slot is free.
	acquire(t, gb).Release()
}

func testCancel(t *testing.T, newGates NewGates) {
	a, b := newGates(t)
	cfg := limiter.GateConfig{MaxConcurrent: 1}
	ga, gb := a.Gate("cancel", cfg), b.Gate("cancel", cfg)
	same := ga == gb
	holder := acquire(t, ga)

	ctx1, cancel1 := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		s, err := gb.Acquire(ctx1)
		if err == nil {
			s.Release()
		}
		first <- err
	}()
	waitFor(t, "first waiter queued", func() bool { return gb.Stats().Waiting >= 1 })
	second := make(chan limiter.Slot, 1)
	go func() {
		s, err := ga.Acquire(context.Background())
		if err != nil {
			t.Errorf("second waiter: %v", err)
		}
		second <- s
	}()
	want := 1
	if same {
		want = 2
	}
	waitFor(t, "second waiter queued", func() bool { return ga.Stats().Waiting >= want })

	cancel1()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v, want context.Canceled", err)
	}
	holder.Release()
	s := <-second
	if s == nil {
		t.FailNow()
	}
	s.Release()
	if st := gb.Stats(); st.Cancelled != 1 || st.Waiting != 0 {
		t.Fatalf("stats after cancel: %+v", st)
	}
}

func testNoHOL(t *testing.T, newGates NewGates) {
	a, b := newGates(t)
	cfg := limiter.GateConfig{MaxConcurrent: 1}
	x := a.Gate("conn-x", cfg)
	holder := acquire(t, x)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if s, err := x.Acquire(ctx); err == nil {
			s.Release()
		}
	}()
	waitFor(t, "waiter on x", func() bool { return x.Stats().Waiting == 1 })
	for _, g := range []limiter.Gate{a.Gate("conn-y", cfg), b.Gate("tenant:z", cfg)} {
		c, stop := context.WithTimeout(context.Background(), 20*time.Second)
		s, err := g.Acquire(c)
		stop()
		if err != nil {
			t.Fatalf("other gate blocked by x: %v", err)
		}
		s.Release()
	}
	cancel()
	<-done
	holder.Release()
}

func testNoCap(t *testing.T, newGates NewGates) {
	a, b := newGates(t)
	var slots []limiter.Slot
	for i := 0; i < 20; i++ {
		g := a.Gate("nocap", limiter.GateConfig{})
		if i%2 == 1 {
			g = b.Gate("nocap", limiter.GateConfig{})
		}
		slots = append(slots, acquire(t, g))
	}
	if got := a.Gate("nocap", limiter.GateConfig{}).Stats().InUse; got < 10 {
		t.Fatalf("InUse %d, want >= 10", got)
	}
	for _, s := range slots {
		s.Release()
	}
}

func testReleaseTwice(t *testing.T, newGates NewGates) {
	a, b := newGates(t)
	cfg := limiter.GateConfig{MaxConcurrent: 2}
	ga, gb := a.Gate("twice", cfg), b.Gate("twice", cfg)
	s1 := acquire(t, ga)
	s1.Release()
	s1.Release() // must not free a second slot
	s2, s3 := acquire(t, ga), acquire(t, gb)
	c, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if s, err := ga.Acquire(c); err == nil {
		s.Release()
		t.Fatal("a double Release freed an extra slot: third holder admitted with cap 2")
	}
	s2.Release()
	s3.Release()
	if st := ga.Stats(); st.InUse != 0 {
		t.Fatalf("InUse %d after all released", st.InUse)
	}
}
