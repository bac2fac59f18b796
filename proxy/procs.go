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

// hold counts a large request in until the returned hold is released
// (largeRequest's timer releases one that no handler takes).
func (b *procBoost) hold() *boostHold {
	b.enter()
	return &boostHold{b: b}
}

// boostHold is one large request's count in a procBoost.
type boostHold struct {
	b    *procBoost
	done atomic.Bool
}

// release counts the request out, once.
func (h *boostHold) release() {
	if h != nil && h.done.CompareAndSwap(false, true) {
		h.b.exit()
	}
}

// headerReceived is the server's fasthttp HeaderReceived hook. A request
// that announces a large body gets, before the body is read, its procBoost
// hold (reading 10 MB that arrive as fast as the socket gives them keeps
// the goroutine busy for tens of ms without parking) and a body buffer from
// largeBodies. Server.handle takes both when it runs (takeLarge), the
// parse-error handler when the request failed before any handler.
func (s *Server) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if n := h.ContentLength(); n >= largeRequestBytes {
		lr := s.startLarge(h)
		if n <= s.cfg.Limits.MaxBodyBytes {
			lr.body = s.largeBodies.lend(requestOf(h), n)
		}
	}
	return fasthttp.RequestConfig{}
}

// largeRequest is what a large request holds from its headers until its
// handler takes it: a procBoost hold and a lent body buffer, either nil.
type largeRequest struct {
	hold  *boostHold
	body  *[]byte
	timer *time.Timer
}

// startLarge records a large request under its header, with a procBoost
// hold when boosting is on. A timer at limits.read_timeout plus a second
// drops a record no handler took (a client that left mid-body reaches
// none) and ends its hold.
func (s *Server) startLarge(h *fasthttp.RequestHeader) *largeRequest {
	lr := &largeRequest{}
	if s.procs != nil {
		lr.hold = s.procs.hold()
	}
	s.pendingLarge.Store(h, lr)
	lr.timer = time.AfterFunc(s.cfg.Limits.ReadTimeout.D()+time.Second, func() {
		s.pendingLarge.CompareAndDelete(h, lr)
		lr.hold.release()
	})
	return lr
}

// holdLarge starts a procBoost hold for a large request headerReceived
// could not see coming (a chunked body), for Server.handle to end as the
// others.
func (s *Server) holdLarge(h *fasthttp.RequestHeader) {
	if _, ok := s.pendingLarge.Load(h); !ok {
		s.startLarge(h)
	}
}

// takeLarge returns what headerReceived recorded for this request, if
// anything.
func (s *Server) takeLarge(ctx *fasthttp.RequestCtx) *largeRequest {
	if v, ok := s.pendingLarge.LoadAndDelete(&ctx.Request.Header); ok {
		return v.(*largeRequest)
	}
	return nil
}

// handled ends a large request's hold when its handler returns (a streamed
// answer's handler returns when the relay starts: relaying is light and may
// last minutes), and gives its body buffer back once nothing can read the
// body any more: now, or for a streamed answer when the relay ends.
func (lr *largeRequest) handled(s *Server, ctx *fasthttp.RequestCtx) {
	if lr == nil {
		return
	}
	lr.timer.Stop()
	lr.hold.release()
	if lr.body == nil {
		return
	}
	if !ctx.Response.IsBodyStream() {
		s.largeBodies.giveBack(&ctx.Request, lr.body)
		return
	}
	if bw, ok := ctx.Response.BodyStream().(*bodyWriter); ok {
		body := lr.body
		bw.done = func() { s.largeBodies.giveBack(&ctx.Request, body) }
	}
	// Any other body stream may still read the request: the buffer is
	// left to fasthttp and the garbage collector.
}

// failed ends a large request that failed before any handler. Its body
// buffer is not given back: fasthttp resets a request whose body read
// failed, and may have pooled the buffer itself.
func (lr *largeRequest) failed() {
	if lr != nil {
		lr.timer.Stop()
		lr.hold.release()
	}
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
