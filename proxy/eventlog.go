package proxy

import (
	"bytes"
	"context"
	"sync"
	"time"
)

// eventLog appends a run's events to the store in batches, off the relay,
// so the relay never waits on the store. add keeps a copy of each event (of
// its size: a batch held up by a slow store does not grow a buffer by
// doubling); a batch that is due goes to the server's event writers, a few
// goroutines shared by every run, so an open stream holds no goroutine for
// its log, and a store that falls behind makes batches larger, not
// goroutines more numerous.
type eventLog struct {
	t  *turn
	mu sync.Mutex
	// Events are copied back to back into chunks of eventChunk bytes:
	// one allocation per chunk, not per event, and no buffer that grows
	// by doubling while the store lags. A queued event is a slice of a
	// chunk; later events go past it, so a batch being written is never
	// touched.
	chunk   []byte
	events  [][]byte  // queued
	spare   [][]byte  // a written batch's slice, for the next one
	next    int64     // seq of the first queued event
	firstAt time.Time // when the oldest queued event was relayed
	armed   bool      // a batch window is open: its end hands the batch to the writers
	arm     uint64    // counts windows opened; a window's end for an older one is stale
	queued  bool      // with the writers: waiting for one, or being written
	writing bool      // a writer is writing it
	closing bool
	idle    sync.Cond // on mu; close waits on it for the writer

	// The writer's own (the event writer that took the log, or close).
	failed bool
}

func newEventLog(t *turn) *eventLog {
	l := &eventLog{t: t, next: 1}
	l.idle.L = &l.mu
	return l
}

// add queues one event as forwarded to the client.
func (l *eventLog) add(raw []byte) {
	if r := l.t.up.redact; r != nil {
		raw = r.Event(raw)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.events) == 0 {
		l.firstAt = time.Now()
		if l.events == nil {
			l.events, l.spare = l.spare, nil
		}
	}
	var ev []byte
	switch {
	case len(raw) > eventChunk:
		ev = bytes.Clone(raw)
	default:
		if cap(l.chunk)-len(l.chunk) < len(raw) {
			l.chunk = make([]byte, 0, eventChunk)
		}
		start := len(l.chunk)
		l.chunk = append(l.chunk, raw...)
		ev = l.chunk[start:len(l.chunk):len(l.chunk)]
	}
	l.events = append(l.events, ev)
	switch {
	case l.queued:
		// The writer takes it with the rest.
	case !l.armed:
		// Unarmed and not queued, the log held no event before this one:
		// the window opens at firstAt.
		l.armed = true
		l.arm++
		l.t.s.eventWindows.add(l, l.arm, l.firstAt.Add(l.t.s.cfg.Store.EventBatchWindow.D()))
	case len(l.events) >= eventBatchMax:
		l.armed = false // the window's end finds it stale
		l.queued = true
		l.t.s.eventWriters.add(l)
	}
}

// Event log batching: a batch is written store.event_batch_window (50 ms
// by default) after its first event, or as soon as it holds eventBatchMax
// events, or when the run ends. A stream then costs a store write per
// window, not per event; a follower on another replica sees events at
// most a window late.
const (
	eventBatchMax = 128
	eventChunk    = 1 << 10 // bytes per chunk of queued events; a larger event is copied alone
)

// windowEnded hands the batch to the writers when the window arm opened
// is over, unless the log was queued or closed since.
func (l *eventLog) windowEnded(arm uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.armed || l.arm != arm {
		return
	}
	l.armed = false
	if !l.queued && len(l.events) > 0 {
		l.queued = true
		l.t.s.eventWriters.add(l)
	}
}

// eventTail is what an event log still holds when its run ends: the run's
// Finish appends it in its own step, so that the last batch costs no store
// write of its own while the client waits for its last event.
type eventTail struct {
	first    int64
	events   [][]byte
	queuedAt time.Time // when the oldest was relayed
}

// close ends the log once no writer is busy with it, and returns what is
// still queued (none after a failed write: the log stops at its gap). A
// log still waiting for a writer is not written by one.
func (l *eventLog) close() eventTail {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closing = true
	l.armed = false // its window's end finds it stale
	l.queued = l.writing
	for l.writing {
		l.idle.Wait()
	}
	l.queued = false
	if l.failed || len(l.events) == 0 {
		return eventTail{}
	}
	tail := eventTail{first: l.next, events: l.events, queuedAt: l.firstAt}
	l.next += int64(len(l.events))
	l.events = nil
	return tail
}

// writeQueued is a writer's turn at the log, unless close took it over.
func (l *eventLog) writeQueued() {
	l.mu.Lock()
	if !l.queued {
		l.mu.Unlock()
		return
	}
	l.writing = true
	l.mu.Unlock()
	l.write()
}

// write stores the queued events, batch after batch, until none is left.
func (l *eventLog) write() {
	for {
		l.mu.Lock()
		if len(l.events) == 0 {
			l.queued, l.writing = false, false
			if l.closing {
				l.idle.Broadcast()
			}
			l.mu.Unlock()
			return
		}
		batch := l.events
		l.events = nil
		first := l.next
		l.next += int64(len(batch))
		queuedAt := l.firstAt
		l.mu.Unlock()

		if !l.failed {
			rctx, cancel := context.WithTimeout(context.Background(), l.t.s.storeTimeout)
			err := l.t.st.AppendEvents(rctx, l.t.lease, first, batch)
			cancel()
			l.t.s.metrics.EventLogLag.Observe(time.Since(queuedAt).Seconds())
			if err != nil {
				// Later batches would leave a gap; the log stops
				// here and the run's transcript is still written.
				l.failed = true
				l.t.s.log.Warn("event log append failed; replay of this run stops here", "run", l.t.runID, "err", err)
			}
		}
		// The store keeps no reference to a batch once AppendEvents
		// returned: its slice (not the events' bytes, which stay in their
		// chunks) serves the next batch.
		if cap(batch) <= eventBatchMax {
			clear(batch)
			l.mu.Lock()
			if l.spare == nil {
				l.spare = batch[:0]
			}
			l.mu.Unlock()
		}
	}
}

// eventWriters write the due batches of every run's event log. They are
// goroutines that exist only while logs wait, at most maxEventWriters at
// once, however many streams are open.
type eventWriters struct {
	mu      sync.Mutex
	queue   []*eventLog
	running int
}

// maxEventWriters is how many batches are written at once: as many as one
// group commit of the embedded store takes (the Redis pool is smaller).
const maxEventWriters = 128

// add queues l for a writer, starting one if fewer than the cap run.
func (w *eventWriters) add(l *eventLog) {
	w.mu.Lock()
	w.queue = append(w.queue, l)
	start := w.running < maxEventWriters
	if start {
		w.running++
	}
	w.mu.Unlock()
	if start {
		go w.work()
	}
}

func (w *eventWriters) work() {
	for {
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.running--
			w.mu.Unlock()
			return
		}
		l := w.queue[0]
		w.queue[0] = nil
		w.queue = w.queue[1:]
		w.mu.Unlock()
		l.writeQueued()
	}
}

// eventWindows ends the batch windows of every run's event log. One
// goroutine serves them all, asleep until the oldest window ends; a timer
// per log would start a goroutine at the end of every window, which with a
// few thousand open streams is tens of thousands of goroutines a second,
// each with a fresh stack. Every window has the same length
// (store.event_batch_window), so windows end in the order they opened: a
// queue, not a heap. The goroutine runs only while a window is open.
type eventWindows struct {
	mu      sync.Mutex
	open    []openWindow // in the order they end
	running bool
	ended   []openWindow // the goroutine's, reused
}

// windowEnder is what a window belongs to (an *eventLog).
type windowEnder interface{ windowEnded(arm uint64) }

type openWindow struct {
	l    windowEnder
	arm  uint64
	ends time.Time
}

// windowSlack lets a wake-up end the windows that end within it too, so
// that windows opened a few microseconds apart cost one wake-up, not one
// each: a batch goes at most this much before its window's end.
const windowSlack = time.Millisecond

// add opens a window for l that ends at ends; its end calls
// l.windowEnded(arm). ends must not be before the ends of the windows
// already open (every window has the same length).
func (w *eventWindows) add(l windowEnder, arm uint64, ends time.Time) {
	w.mu.Lock()
	w.open = append(w.open, openWindow{l, arm, ends})
	start := !w.running
	w.running = true
	w.mu.Unlock()
	if start {
		go w.run()
	}
}

// run ends windows as they come due, and returns when none is open.
func (w *eventWindows) run() {
	var t *time.Timer
	for {
		w.mu.Lock()
		if len(w.open) == 0 {
			w.running = false
			w.mu.Unlock()
			if t != nil {
				t.Stop()
			}
			return
		}
		now := time.Now()
		n := 0
		for n < len(w.open) && w.open[n].ends.Before(now.Add(windowSlack)) {
			n++
		}
		if n == 0 {
			d := w.open[0].ends.Sub(now)
			w.mu.Unlock()
			if t == nil {
				t = time.NewTimer(d)
			} else {
				t.Reset(d)
			}
			<-t.C
			continue
		}
		w.ended = append(w.ended[:0], w.open[:n]...)
		clear(w.open[:n]) // no log stays reachable from the spent part
		w.open = w.open[n:]
		if len(w.open) == 0 {
			w.open = w.open[:0:0] // let a long queue's array go
		}
		w.mu.Unlock()
		for i, e := range w.ended {
			e.l.windowEnded(e.arm)
			w.ended[i] = openWindow{}
		}
	}
}
