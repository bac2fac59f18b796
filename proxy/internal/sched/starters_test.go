package sched

import (
	"sync"
	"testing"
)

func TestStarters(t *testing.T) {
	const maxIdle = 4
	p := NewStarters(func(n int) int { return n * 2 }, maxIdle)
	if got := p.Run(21); got != 42 {
		t.Fatalf("Run(21) = %d, want fn's 42", got)
	}
	if n := p.Idle(); n != 1 {
		t.Fatalf("after one call %d goroutines wait, want 1", n)
	}
	p.Run(1)
	if n := p.Idle(); n != 1 {
		t.Fatalf("after two calls in a row %d goroutines wait, want the same 1", n)
	}

	var wg sync.WaitGroup
	for i := range 3 * maxIdle {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := p.Run(i); got != 2*i {
				t.Errorf("Run(%d) = %d", i, got)
			}
		}()
	}
	wg.Wait()
	if n := p.Idle(); n < 1 || n > maxIdle {
		t.Fatalf("after a burst %d goroutines wait, want 1 to %d", n, maxIdle)
	}

	p.Stop()
	if n := p.Idle(); n != 0 {
		t.Fatalf("after Stop %d goroutines wait, want 0", n)
	}
	// A call after Stop still runs, and its goroutine ends after it.
	if got := p.Run(5); got != 10 {
		t.Fatalf("Run after Stop = %d, want 10", got)
	}
	if n := p.Idle(); n != 0 {
		t.Fatalf("a goroutine was kept after Stop (%d wait)", n)
	}
	w := p.get()
	p.put(w)
	if _, open := <-w.call; open {
		t.Fatal("the goroutine's call channel is still open after Stop")
	}
}

// BenchmarkStartersRun is the hand-off's cost (a kept goroutine's stack
// stays grown: docs/design.md, "Runtime mechanics").
func BenchmarkStartersRun(b *testing.B) {
	p := NewStarters(func(n int) int { return n + 1 }, 4)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		p.Run(i)
	}
}
