// The relay stage for SSE: events forwarded as they arrive, never
// buffered, teed into the assembler and the run's event log; the answer's
// last event held back until the turn is stored (finish), and the stream's
// own clocks (idle, total, heartbeats).

package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"time"

	"github.com/chronicle-proxy/chronicle/adapters/sse"
	"github.com/chronicle-proxy/chronicle/limiter"
	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/chronicle-proxy/chronicle/store"
)

// heartbeat is the SSE comment sent during upstream silence. SSE parsers
// ignore comments; a write that fails tells the proxy the client left.
var heartbeat = []byte(": keep-alive\n\n")

// relaySSE forwards an event stream to the client event by event, on
// fasthttp's connection goroutine: it reads an event, writes (and flushes)
// it, and only then reads the next, so event buffers are reused and nothing
// piles up. The idle and total clocks, a cancel request and the heartbeats
// sent during silence are timer callbacks (relayControl), so an open stream
// holds one goroutine. Each forwarded event is teed to the assembler and
// the run's event log.
//
// The loop's state lives in an sseRelay on the heap and the work per event
// in its methods, so the frames below the read a stream waits in stay small
// (about 3 KiB in all): the garbage collector then shrinks a waiting
// stream's goroutine stack to 8 KiB, where handling the request grew it.
func (ex *exchange) relaySSE(w *bufio.Writer) {
	// No defer: fasthttp does not recover a panicking handler, so one
	// would only make this frame larger.
	r := newSSERelay(ex, w)
	for {
		ev, err := r.reader.Next()
		if ev != nil && !r.relayEvent(ev, err == nil && r.reader.Buffered()) {
			break
		}
		if err != nil {
			r.readEnded(err)
			break
		}
	}
	r.close()
	ex.closeUpstream()
}

// sseRelay is one stream relay's state (see relaySSE).
type sseRelay struct {
	rc     relayControl
	ex     *exchange
	reader *sse.Reader
	dog    *limiter.Watchdog
	o      outcome
	last   outcome // the turn recorded at the provider's last event (setLast)

	errHead      []byte
	firstWritten bool
	detachNoted  bool
	snapshots    bool
	lastSnapshot time.Time
}

//go:noinline
func newSSERelay(ex *exchange, w *bufio.Writer) *sseRelay {
	cfg := ex.up.cfg
	limits := ex.s.cfg.Limits
	r := &sseRelay{
		ex:           ex,
		reader:       sse.NewReader(ex.resp.BodyStream(), limits.MaxSSELineBytes),
		o:            outcome{status: ex.resp.StatusCode()},
		snapshots:    ex.turn != nil && ex.asm != nil && cfg.SnapshotStreaming,
		lastSnapshot: time.Now(),
	}
	r.rc.init(ex, w)
	// The stream's own clocks start now, with the gate slot held and the
	// response head in (timeouts.first_byte bounded the wait for that).
	r.dog = limiter.NewWatchdog(context.Background(), limiter.Timeouts{Idle: cfg.Timeouts.Idle.D(), Total: cfg.Timeouts.Total.D()})
	dog := r.dog
	r.rc.stopOn(dog.Context(), stopTimeout, func() bool { return dog.Fired() != "" })
	if ex.turn != nil {
		r.rc.stopOn(ex.turn.cancelCtx, stopCancelled, nil)
	}
	r.rc.heartbeats(limits.Heartbeat.D(), dog)
	return r
}

// own writes one of chronicle's own error events: to the client, and to
// the event log, so a replay shows what the client saw.
func (r *sseRelay) own(ev []byte) {
	ex := r.ex
	if ex.turn != nil && ex.turn.events != nil && !ex.turnDone {
		ex.turn.events.add(ev)
	}
	r.rc.write(ev, false)
}

// relayEvent handles one upstream event: the assembler, the event log, the
// client. more: the next event is already buffered, so the flush can wait
// for it (a burst goes out in one write). It reports false when the relay
// must stop because the client left.
//
//go:noinline
func (r *sseRelay) relayEvent(ev *sse.Event, more bool) bool {
	ex := r.ex
	r.dog.Touch() // also puts the next heartbeat off
	if ev.Kind == sse.KindEvent {
		ex.s.metrics.EventsTeed.Inc()
		if ex.firstEvent.IsZero() {
			ex.firstEvent = time.Now()
		}
	}
	// Assemble first: stripping edits the event's bytes in place, and Data
	// aliases them.
	if ex.asm != nil && ev.Kind == sse.KindEvent && ev.HasData {
		if err := ex.asm.Feed(ev.Data); err != nil {
			ex.s.log.Debug("unreadable stream event", "connection", ex.up.cfg.Name, "err", err)
		}
	}
	raw := ev.Raw
	drop := false
	if ex.prepared.AddedUsage && ev.Kind == sse.KindEvent {
		raw, drop = ex.ad.StripAddedUsage(raw)
	}
	if r.o.status >= 300 && len(r.errHead) < 64<<10 {
		r.errHead = append(r.errHead, raw...)
	}
	if !drop && ex.turn != nil && ex.turn.events != nil && ev.Kind == sse.KindEvent && !ex.turnDone {
		ex.turn.events.add(raw)
	}
	if ex.turn != nil && !ex.turnDone && ex.asm != nil && ex.asm.Done() {
		// The provider's last event: record the turn before the client
		// sees it, so a client that sends its next turn as soon as it
		// reads the end finds the thread free.
		r.setLast()
		if ex.finishOnce(&r.last) != nil {
			// The turn is neither stored nor spooled: the client must
			// not read a clean end, so the provider's last event is
			// replaced by an error event.
			r.notStored()
			return false
		}
	}
	clientGone := false
	if !drop {
		if !r.firstWritten && ex.turn != nil {
			r.firstWritten = true
			ex.turn.awaitPending()
		}
		clientGone = r.rc.write(raw, more)
	}
	if clientGone && !ex.detach {
		r.rc.stop(stopClientLeft) // the client left: stop the upstream request
		r.o.aborted, r.o.reason = true, "client_disconnected"
		return false
	}
	if clientGone && ex.turn != nil && !r.detachNoted {
		r.detachNoted = true
		now := time.Now()
		ex.turn.offerPatch(func(p *store.RunPatch) { p.DetachedSince = now })
	}
	if r.snapshots && time.Since(r.lastSnapshot) >= ex.up.cfg.SnapshotInterval.D() && !ex.turnDone {
		r.lastSnapshot = time.Now()
		text := []byte(ex.up.redact.Text(ex.ad.MessageText(ex.asm.Result().Message)))
		ex.turn.offerPatch(func(p *store.RunPatch) { p.Partial = text })
	}
	return true
}

// notStored ends a stream whose turn could not be recorded at its last
// event: an error event (store_unavailable) goes out where the provider's
// last event would have, and nothing after it.
//
//go:noinline
func (r *sseRelay) notStored() {
	ex := r.ex
	ex.s.metrics.CountTurnRefused()
	r.rc.write(apierr.Event(ex.ad, apierr.New(apierr.StoreUnavailable,
		"The answer arrived whole, but the conversation store could not keep it; it is not saved. Send the turn again.")), false)
	r.rc.stop(stopClientLeft) // ends the upstream request
}

// readEnded handles the error that ended the upstream read: a stop from
// outside (a clock, a cancel, a client gone during a heartbeat), a broken
// stream, or the stream's end.
//
//go:noinline
func (r *sseRelay) readEnded(err error) {
	ex := r.ex
	if ex.asm != nil && ex.asm.Result().Terminal {
		// The answer was whole (and its end recorded) before the stop or
		// the error landed: nothing follows a terminal event.
		return
	}
	why := r.rc.reason()
	switch why {
	case stopTimeout:
		if r.dog.Fired() == limiter.IdleTimeout {
			r.own(apierr.Event(ex.ad, apierr.New(apierr.IdleTimeout,
				"The upstream sent nothing for longer than the connection's timeouts.idle.")))
			r.o.reason = string(apierr.IdleTimeout)
		} else {
			r.own(apierr.Event(ex.ad, apierr.New(apierr.TotalTimeout,
				"The upstream stream ran longer than the connection's timeouts.total.")))
			r.o.reason = string(apierr.TotalTimeout)
		}
	case stopCancelled:
		r.own(apierr.Event(ex.ad, apierr.New(apierr.RunCancelled, "The run was cancelled.")))
		r.o.aborted, r.o.reason = true, "cancelled"
	case stopClientLeft:
		r.o.aborted, r.o.reason = true, "client_disconnected"
	default:
		if !errors.Is(err, io.EOF) {
			ex.s.log.Warn("upstream stream failed", "connection", ex.up.cfg.Name, "err", err)
			r.own(apierr.Event(ex.ad, apierr.New(apierr.StreamTruncated,
				"The upstream stream broke off before its end.")))
			r.o.reason = string(apierr.StreamTruncated)
		} else if ex.asm != nil && !ex.asm.Result().Terminal {
			// The upstream closed cleanly but without its end marker:
			// the answer is cut short, and the client must not take it
			// for a whole one.
			ex.s.log.Warn("upstream stream ended without its terminal marker", "connection", ex.up.cfg.Name)
			r.own(apierr.Event(ex.ad, apierr.New(apierr.StreamTruncated,
				"The upstream stream ended before its end marker; the answer is incomplete.")))
			r.o.reason = string(apierr.StreamTruncated)
		}
	}
}

// setLast sets the outcome the turn is recorded with at the provider's
// last event. It is built in the relay (on the heap) by a function whose
// frame is gone before the finish: the finish's round trip runs below
// relayEvent, on the connection's goroutine, and every frame on that path
// counts against the 8 KiB stack an open stream keeps.
//
//go:noinline
func (r *sseRelay) setLast() {
	r.last = outcome{status: r.o.status, turn: r.ex.asm.Result()}
}

// close stops the clocks and callbacks and records the exchange's end.
//
//go:noinline
func (r *sseRelay) close() {
	ex := r.ex
	r.rc.finish()
	r.dog.Stop()
	if ex.asm != nil && (ex.turn != nil || ex.adm.wantsUsage() || ex.spanRecording()) {
		r.o.turn = ex.asm.Result()
	}
	r.o.errBody = r.errHead
	ex.conclude(&r.o)
}
