package sched

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"
)

// BodyPool lends large requests (those the proxy counts as large, with a
// Content-Length) the buffers fasthttp reads their bodies into, and takes
// them back for the next one.
//
// fasthttp reads a body into a buffer from a pool of its own, which
// calibrates to the common size: once it has, every large body gets a new
// buffer rounded up to a power of two, 16 MiB for a 10 MB body, zeroed and
// faulted in. That was most of what a large turn allocated, so most of the
// garbage collections it caused, and their marking competes with every
// other connection for the CPU.
//
// The proxy lends a buffer from its HeaderReceived hook, before the body
// is read (SwapBody: fasthttp appends the body into it), and gives it back once
// nothing can read the request body any more: when the handler returns, or
// for a streamed answer when the relay has finished (bodyWriter.done), the
// same points at which fasthttp would recycle the body itself. giveBack
// takes a buffer back only while it is still the request's body, so one
// fasthttp kept (a failed read resets the request) is never lent twice.
//
// Idle buffers are kept up to largeBodyKeep bytes in all, and all dropped
// when no large request has come for largeBodyIdle. (A sync.Pool would not
// do: a buffer put back on one P is out of reach of a Get on another.)
type BodyPool struct {
	mu     sync.Mutex
	free   []*[]byte
	bytes  int          // the free buffers' capacity in all
	idle   *time.Timer  // drops the free buffers
	reused atomic.Int64 // lends served from a kept buffer
}

const (
	// largeBodyRound is the granularity of a new buffer's size, so bodies
	// of nearby sizes share buffers.
	largeBodyRound = 1 << 20
	largeBodyKeep  = 64 << 20
	largeBodyIdle  = 30 * time.Second
)

// Lend makes a buffer with room for n bytes req's body: the smallest free
// one that fits, or a new one.
func (p *BodyPool) Lend(req *fasthttp.Request, n int) *[]byte {
	var b *[]byte
	p.mu.Lock()
	best := -1
	for i, f := range p.free {
		if cap(*f) >= n && (best < 0 || cap(*f) < cap(*p.free[best])) {
			best = i
		}
	}
	if best >= 0 {
		b = p.free[best]
		p.free[best] = p.free[len(p.free)-1]
		p.free[len(p.free)-1] = nil
		p.free = p.free[:len(p.free)-1]
		p.bytes -= cap(*b)
	}
	p.mu.Unlock()
	if b != nil {
		p.reused.Add(1)
	} else {
		nb := make([]byte, 0, (n+largeBodyRound-1)/largeBodyRound*largeBodyRound)
		b = &nb
	}
	req.SwapBody((*b)[:0])
	return b
}

// GiveBack takes b back from req, if it is still req's body.
func (p *BodyPool) GiveBack(req *fasthttp.Request, b *[]byte) {
	body := req.Body()
	if cap(body) == 0 || cap(*b) == 0 || unsafe.SliceData(body) != unsafe.SliceData(*b) {
		return
	}
	req.SwapBody(nil)
	*b = (*b)[:0]
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bytes+cap(*b) > largeBodyKeep {
		return // left to the garbage collector
	}
	p.free = append(p.free, b)
	p.bytes += cap(*b)
	if p.idle == nil {
		p.idle = time.AfterFunc(largeBodyIdle, p.drop)
	} else {
		p.idle.Reset(largeBodyIdle)
	}
}

// drop lets the garbage collector have the free buffers.
func (p *BodyPool) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.free)
	p.free, p.bytes = p.free[:0], 0
}

// RequestOf returns the Request whose Header h is. fasthttp's server calls
// HeaderReceived with &ctx.Request.Header (TestHeaderReceivedIsRequests
// holds it to that), and the Request is what the body buffer is lent to.
func RequestOf(h *fasthttp.RequestHeader) *fasthttp.Request {
	return (*fasthttp.Request)(unsafe.Add(unsafe.Pointer(h), -int(requestHeaderOffset)))
}

var requestHeaderOffset = unsafe.Offsetof((*fasthttp.Request)(nil).Header)

// Reused counts the lends served from a kept buffer.
func (p *BodyPool) Reused() int64 { return p.reused.Load() }
