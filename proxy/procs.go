package proxy

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
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
// only between goroutines, or from sysmon after 10 ms). With more Ps, an
// idle P's thread waits in the network poller and the kernel runs it
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

// hold counts a large request in until the returned hold is released, or
// until d has passed, whichever comes first: a request whose body never
// arrives (the client left mid-body) reaches no handler to release it.
func (b *procBoost) hold(d time.Duration) *boostHold {
	b.enter()
	h := &boostHold{b: b}
	h.timer = time.AfterFunc(d, h.release)
	return h
}

// boostHold is one large request's count in a procBoost.
type boostHold struct {
	b     *procBoost
	timer *time.Timer
	done  atomic.Bool
}

// release counts the request out, once.
func (h *boostHold) release() {
	if h != nil && h.done.CompareAndSwap(false, true) {
		h.timer.Stop()
		h.b.exit()
	}
}

// headerReceived is the server's fasthttp HeaderReceived hook: a request
// that announces a large body gets its hold before the body is read, since
// reading 10 MB that arrive as fast as the socket gives them keeps the
// goroutine busy for tens of ms without parking. The parse-error handler
// releases the hold of a request that failed before any handler.
func (s *Server) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if s.procs != nil && h.ContentLength() >= largeRequestBytes {
		s.holdLarge(h)
	}
	return fasthttp.RequestConfig{}
}

// holdLarge takes a procBoost hold for the request with header h, for
// Server.handle to release when it returns (a streamed answer's handler
// returns when the relay starts: relaying is light and may last minutes).
// The timer ends a hold that no handler takes.
func (s *Server) holdLarge(h *fasthttp.RequestHeader) {
	s.pendingHolds.Store(h, s.procs.hold(s.cfg.Limits.ReadTimeout.D()+time.Second))
}

// takeHold returns the hold headerReceived took for this request, if any.
func (s *Server) takeHold(ctx *fasthttp.RequestCtx) *boostHold {
	if v, ok := s.pendingHolds.LoadAndDelete(&ctx.Request.Header); ok {
		return v.(*boostHold)
	}
	return nil
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
