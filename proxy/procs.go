package proxy

import (
	"runtime"
	"sync"
)

// largeRequestBytes is the body size from which a request counts as large
// for procBoost: about 3 ms of validation, hashing and copying on this
// project's machines.
const largeRequestBytes = 1 << 20

// procBoost raises GOMAXPROCS from base to boost while any large request
// is in flight, and puts it back when the last one ends. chronicle runs so
// on one CPU (cmd/chronicle pickProcs): one P is cheapest for small
// requests, but with one P a request busy for milliseconds on a large
// body holds back every other connection's bytes (Go polls the network
// only between goroutines, or from sysmon after 10 ms). With a second P,
// that P's thread waits in the network poller and the kernel runs it
// beside the busy one as soon as other connections' bytes arrive.
//
// runtime.GOMAXPROCS stops the world for some microseconds; it is called
// twice per large request, against the tens of milliseconds such a
// request takes.
type procBoost struct {
	mu       sync.Mutex
	base     int
	boost    int
	inFlight int
}

// newProcBoost returns nil (no boosting) unless boost is above the current
// GOMAXPROCS.
func newProcBoost(boost int) *procBoost {
	base := runtime.GOMAXPROCS(0)
	if boost <= base {
		return nil
	}
	return &procBoost{base: base, boost: boost}
}

// enter counts a large request in; every enter is paired with one exit.
func (b *procBoost) enter() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inFlight++
	if b.inFlight == 1 {
		runtime.GOMAXPROCS(b.boost)
	}
}

// exit counts a large request out.
func (b *procBoost) exit() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inFlight--
	if b.inFlight == 0 {
		runtime.GOMAXPROCS(b.base)
	}
}
