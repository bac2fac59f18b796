package proxy

import (
	"sync"

	"github.com/valyala/fasthttp"
)

// turnStarters run beginTurn off the connection's goroutine. Starting a
// turn goes deep (composing, restoring, repairing, the store's round trip:
// 9 to 11 KiB below fasthttp's frames), and the connection's goroutine,
// which a stream then parks for its whole life, would keep the 16 KiB
// stack that grew to rather than 8 (docs/design.md, an open stream's
// stack).
//
// The goroutines are kept: a new one per call starts at the runtime's
// starting stack size and grows to 16 KiB, copying its stack each time
// (2.7 µs a call, against 0.7 µs for a handoff to one that already has
// grown). At most maxIdleStarters wait between calls; a burst's extra ones
// end. Calls and answers go by value through channels: nothing is
// allocated per call.
type turnStarters struct {
	mu      sync.Mutex
	idle    []*turnStarter
	stopped bool
}

const maxIdleStarters = 32

type turnStarter struct {
	call chan startCall
	done chan startDone
}

type startCall struct {
	s    *Server
	ctx  *fasthttp.RequestCtx
	ex   *exchange
	body []byte
}

type startDone struct {
	t   *turn
	out []byte
	ok  bool
}

// begin is s.beginTurn(ctx, ex, body) run by a starter. The waiting
// goroutine readies the starter into its P's next slot and parks, so the
// call starts at once, as a direct one would.
func (p *turnStarters) begin(s *Server, ctx *fasthttp.RequestCtx, ex *exchange, body []byte) (*turn, []byte, bool) {
	w := p.get()
	w.call <- startCall{s, ctx, ex, body}
	d := <-w.done
	p.put(w)
	return d.t, d.out, d.ok
}

func (p *turnStarters) get() *turnStarter {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return w
	}
	p.mu.Unlock()
	w := &turnStarter{call: make(chan startCall), done: make(chan startDone)}
	go w.loop()
	return w
}

// put keeps w for the next call, or ends it when enough wait already or
// the server is shutting down.
func (p *turnStarters) put(w *turnStarter) {
	p.mu.Lock()
	if !p.stopped && len(p.idle) < maxIdleStarters {
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	close(w.call)
}

// stop ends the idle starters (Shutdown); a call in flight ends its own
// when it returns, and later calls get starters of their own.
func (p *turnStarters) stop() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.stopped = nil, true
	p.mu.Unlock()
	for _, w := range idle {
		close(w.call)
	}
}

// idleStarters is how many starters wait for a call.
func (p *turnStarters) idleStarters() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

func (w *turnStarter) loop() {
	for c := range w.call {
		t, out, ok := c.s.beginTurn(c.ctx, c.ex, c.body)
		w.done <- startDone{t, out, ok}
	}
}
