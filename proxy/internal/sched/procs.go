package sched

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// ProcBoost raises GOMAXPROCS from base to boost while any large request
// is in flight, and puts it back when the last one ends. chronicle runs so
// on one CPU (cmd/chronicle pickProcs): one P is cheapest for small
// requests, but with one P a request busy for milliseconds on a large body
// holds back every other connection's bytes (Go polls the network only
// between goroutines, or from sysmon after 10 ms). With more Ps, an idle
// P's thread waits in the network poller and the kernel runs it beside the
// busy one as soon as other connections' bytes arrive.
//
// runtime.GOMAXPROCS stops the world for some microseconds; it is called
// twice per large request, against the tens of milliseconds such a
// request takes. Safe for concurrent use.
type ProcBoost struct {
	mu       sync.Mutex
	base     int
	boost    int
	inFlight int
}

// NewProcBoost returns nil (no boosting) unless boost is above the current
// GOMAXPROCS. A nil *ProcBoost's Hold returns a nil *Hold, whose Release
// does nothing.
func NewProcBoost(boost int) *ProcBoost {
	base := runtime.GOMAXPROCS(0)
	if boost <= base {
		return nil
	}
	return &ProcBoost{base: base, boost: boost}
}

// Hold counts a large request in until the returned hold is released.
func (b *ProcBoost) Hold() *Hold {
	if b == nil {
		return nil
	}
	b.enter()
	return &Hold{b: b}
}

// Hold is one large request's count in a ProcBoost.
type Hold struct {
	b    *ProcBoost
	done atomic.Bool
}

// Release counts the request out, once; later calls do nothing.
func (h *Hold) Release() {
	if h != nil && h.done.CompareAndSwap(false, true) {
		h.b.exit()
	}
}

// enter counts a large request in; every enter is paired with one exit.
func (b *ProcBoost) enter() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inFlight++
	if b.inFlight == 1 {
		runtime.GOMAXPROCS(b.boost)
	}
}

// exit counts a large request out.
func (b *ProcBoost) exit() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inFlight--
	if b.inFlight == 0 {
		runtime.GOMAXPROCS(b.base)
	}
}
