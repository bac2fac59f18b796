package proxy

import (
	"bufio"
	"context"
	"sync"
	"time"

	"github.com/chronicle-proxy/chronicle/limiter"
)

// stopReason says why a relay's upstream read was cut short from outside
// the relay: a clock, a cancel request, or a client that left during a
// heartbeat.
type stopReason uint8

const (
	stopNone       stopReason = iota
	stopTimeout               // the watchdog fired (its Fired says which clock)
	stopCancelled             // the run was asked to stop
	stopClientLeft            // a heartbeat found the client gone
)

// relayControl lets timers and other goroutines stop a relay that is
// blocked reading its upstream, without a goroutine of its own per stream:
// the watchdog, a cancel request and the heartbeat are callbacks
// (context.AfterFunc, time.AfterFunc) that run only when they fire. One
// that stops the relay records why and closes the upstream body, which ends
// the read in flight; the relay then finds the reason with the error.
//
// mu also guards the client writer: the heartbeat writes from its timer's
// goroutine while the relay waits for the upstream.
type relayControl struct {
	ex  *exchange
	w   *bufio.Writer // nil: the relay writes to the client itself
	mu  sync.Mutex
	why stopReason
	// done: the relay has finished, and callbacks that run late do nothing
	// (the response they would close may be released).
	done       bool
	clientGone bool

	every time.Duration
	beat  *time.Timer
	dog   *limiter.Watchdog // its last Touch puts the next heartbeat off

	unregister []func() bool
}

func (rc *relayControl) init(ex *exchange, w *bufio.Writer) {
	rc.ex, rc.w = ex, w
	ex.s.metrics.StreamOpened(ex.up.cfg.Name) // until finish
}

// stopOn stops the relay with why when ctx ends, if cond (when not nil)
// agrees at that moment.
func (rc *relayControl) stopOn(ctx context.Context, why stopReason, cond func() bool) {
	rc.unregister = append(rc.unregister, context.AfterFunc(ctx, func() {
		if cond == nil || cond() {
			rc.stop(why)
		}
	}))
}

// heartbeats writes an SSE comment to the client whenever the upstream has
// been silent (no dog.Touch) for every; a heartbeat that finds the client
// gone stops the relay unless the exchange is detached.
func (rc *relayControl) heartbeats(every time.Duration, dog *limiter.Watchdog) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.every, rc.dog = every, dog
	rc.beat = time.AfterFunc(every, rc.onBeat)
}

func (rc *relayControl) onBeat() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.done {
		return
	}
	if wait := rc.every - rc.dog.Silence(); wait > 0 {
		rc.beat.Reset(wait)
		return
	}
	rc.writeLocked(heartbeat, false)
	if rc.clientGone && !rc.ex.detach {
		rc.stopLocked(stopClientLeft)
		return
	}
	rc.beat.Reset(rc.every)
}

// write sends b to the client and flushes it unless more follows at once;
// after the first failure it writes nothing and reports the client gone.
func (rc *relayControl) write(b []byte, more bool) (clientGone bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.writeLocked(b, more)
	return rc.clientGone
}

func (rc *relayControl) writeLocked(b []byte, more bool) {
	if rc.clientGone {
		return
	}
	if _, err := rc.w.Write(b); err != nil {
		rc.clientGone = true
		return
	}
	if !more && rc.ex.flush(rc.w) != nil {
		rc.clientGone = true
	}
}

// stop cuts the upstream read short; the first reason sticks.
func (rc *relayControl) stop(why stopReason) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.stopLocked(why)
}

func (rc *relayControl) stopLocked(why stopReason) {
	if rc.done || rc.why != stopNone {
		return
	}
	rc.why = why
	_ = rc.ex.resp.CloseBodyStream() // interrupts the read in flight
}

// reason is why the relay was stopped from outside, if it was.
func (rc *relayControl) reason() stopReason {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.why
}

// finish unregisters every callback; once it returns none touches the
// exchange again. It reports why the relay was stopped, if it was.
func (rc *relayControl) finish() stopReason {
	rc.mu.Lock()
	if !rc.done {
		rc.ex.s.metrics.StreamClosed(rc.ex.up.cfg.Name)
	}
	rc.done = true
	why := rc.why
	if rc.beat != nil {
		rc.beat.Stop()
	}
	rc.mu.Unlock()
	for _, f := range rc.unregister {
		f()
	}
	return why
}
