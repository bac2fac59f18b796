package proxy

import (
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/internal/sched"
	"github.com/valyala/fasthttp"
)

// largeRequestBytes is the body size from which a request counts as large
// for sched.ProcBoost: about 3 ms of validation, hashing and copying on this
// project's machines.
const largeRequestBytes = 1 << 20

// headerReceived is the server's fasthttp HeaderReceived hook. A request
// that announces a large body gets, before the body is read, its sched.ProcBoost
// hold (reading 10 MB that arrive as fast as the socket gives them keeps
// the goroutine busy for tens of ms without parking) and a body buffer from
// largeBodies. Server.handle takes both when it runs (takeLarge), the
// parse-error handler when the request failed before any handler.
func (s *Server) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if n := h.ContentLength(); n >= largeRequestBytes {
		lr := s.startLarge(h)
		if n <= s.cfg.Limits.MaxBodyBytes {
			lr.body = s.largeBodies.Lend(sched.RequestOf(h), n)
		}
	}
	return fasthttp.RequestConfig{}
}

// largeRequest is what a large request holds from its headers until its
// handler takes it: a sched.ProcBoost hold and a lent body buffer, either nil.
type largeRequest struct {
	hold  *sched.Hold
	body  *[]byte
	timer *time.Timer
}

// startLarge records a large request under its header, with a sched.ProcBoost
// hold when boosting is on. A timer at limits.read_timeout plus a second
// drops a record no handler took (a client that left mid-body reaches
// none) and ends its hold.
func (s *Server) startLarge(h *fasthttp.RequestHeader) *largeRequest {
	lr := &largeRequest{}
	lr.hold = s.procs.Hold()
	s.pendingLarge.Store(h, lr)
	lr.timer = time.AfterFunc(s.cfg.Limits.ReadTimeout.D()+time.Second, func() {
		s.pendingLarge.CompareAndDelete(h, lr)
		lr.hold.Release()
	})
	return lr
}

// HoldProcs holds the extra Ps of Options.LargeRequestProcs until the
// returned func is called, for work of the process's own that runs for
// milliseconds beside the requests as a large one does: the embedded
// store's flushes and compactions (embedded.Options.Background). Without
// the boost it holds nothing.
func (s *Server) HoldProcs() (release func()) {
	return s.procs.Hold().Release
}

// holdLarge starts a sched.ProcBoost hold for a large request headerReceived
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
	lr.hold.Release()
	if lr.body == nil {
		return
	}
	if !ctx.Response.IsBodyStream() {
		s.largeBodies.GiveBack(&ctx.Request, lr.body)
		return
	}
	if bw, ok := ctx.Response.BodyStream().(*bodyWriter); ok {
		body := lr.body
		bw.done = func() { s.largeBodies.GiveBack(&ctx.Request, body) }
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
		lr.hold.Release()
	}
}
