package proxy

import (
	"sync"
	"sync/atomic"
	"time"
)

// dispatchOrder makes a gated connection's requests go upstream in the
// order they took their gate slots. Between the slot and the upstream
// call lies the turn's start, a store round trip whose latency varies
// from request to request (on a Redis Cluster, from node to node): a
// request admitted after another could overtake it there. Each admitted
// request takes a ticket with its slot; before its upstream call it waits
// until every earlier ticket has gone upstream or given its slot back, and
// it passes its own once its request is being written on its upstream
// connection (a request that passes before its call could still be
// overtaken by the next one while it dials). The wait is bounded (maxOrderWait), so a
// predecessor whose start hangs on a store fault holds no one up for
// longer than the store's own timeout.
type dispatchOrder struct {
	mu     sync.Mutex
	next   uint64          // the next ticket handed out
	head   uint64          // every ticket below head has passed
	passed map[uint64]bool // tickets above head that passed already
	moved  chan struct{}   // closed (and replaced) when head moves
}

// maxOrderWait bounds a request's wait for its predecessors.
const maxOrderWait = 5 * time.Second

// take hands out the next ticket, in slot order: the caller holds its
// gate slot.
func (d *dispatchOrder) take() uint64 {
	d.mu.Lock()
	t := d.next
	d.next++
	d.mu.Unlock()
	return t
}

// wait returns once every ticket before t has passed, or after
// maxOrderWait.
func (d *dispatchOrder) wait(t uint64) {
	var timeout <-chan time.Time
	for {
		d.mu.Lock()
		if d.head >= t {
			d.mu.Unlock()
			return
		}
		if d.moved == nil {
			d.moved = make(chan struct{})
		}
		moved := d.moved
		d.mu.Unlock()
		if orderHook != nil {
			orderHook()
		}
		if timeout == nil {
			tm := time.NewTimer(maxOrderWait)
			defer tm.Stop()
			timeout = tm.C
		}
		select {
		case <-moved:
		case <-timeout:
			return
		}
	}
}

// pass marks ticket t as gone upstream (or given up); idempotent.
func (d *dispatchOrder) pass(t uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t < d.head || d.passed[t] {
		return
	}
	if t != d.head {
		if d.passed == nil {
			d.passed = map[uint64]bool{}
		}
		d.passed[t] = true
		return
	}
	d.head++
	for d.passed[d.head] {
		delete(d.passed, d.head)
		d.head++
	}
	if d.moved != nil {
		close(d.moved)
		d.moved = nil
	}
}

// orderHook, when set (by a test, before the server starts), runs as a
// request begins to wait for its predecessors.
var orderHook func()

// orderTicket is an admitted request's place in its connection's
// dispatchOrder.
type orderTicket struct {
	d      *dispatchOrder
	t      uint64
	passed atomic.Bool
}

// await returns when the request may go upstream: every request that took
// a slot before it has. A nil ticket (no gate) goes at once.
func (o *orderTicket) await() {
	if o == nil || o.passed.Load() {
		return
	}
	o.d.wait(o.t)
}

// pending reports whether the ticket has yet to pass.
func (o *orderTicket) pending() bool { return o != nil && !o.passed.Load() }

// give passes the ticket: the request is being written upstream, or ends
// without an upstream call. Idempotent, from any goroutine.
func (o *orderTicket) give() {
	if o == nil || o.passed.Swap(true) {
		return
	}
	o.d.pass(o.t)
}
