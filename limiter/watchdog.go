package limiter

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Timeouts are a stream's clocks; a zero field is no limit.
type Timeouts struct {
	FirstByte time.Duration // from start until the first Touch
	Idle      time.Duration // between Touches (before the first, when FirstByte is 0)
	Total     time.Duration // from start until Stop
}

// Reason names the clock that fired; the empty Reason means none did.
type Reason string

// The watchdog's reasons, worded as the run's failure reason.
const (
	FirstByteTimeout Reason = "first_byte_timeout"
	IdleTimeout      Reason = "idle_timeout"
	TotalTimeout     Reason = "total_timeout"
)

// TimeoutError is the cause of a watchdog's context when a clock fired
// (context.Cause); it matches ErrStreamTimeout.
type TimeoutError struct{ Reason Reason }

func (e *TimeoutError) Error() string { return "limiter: stream " + string(e.Reason) }

// Unwrap makes the error match ErrStreamTimeout.
func (e *TimeoutError) Unwrap() error { return ErrStreamTimeout }

// Watchdog cancels a stream's context when one of its clocks expires. Start
// it once the gate slot is held, Touch it for every upstream event, and Stop
// it when the stream ends. Touch is safe for concurrent use and cheap: one
// atomic store, no allocation and no timer work; a single timer re-arms
// itself from the last touch when it fires.
type Watchdog struct {
	t      Timeouts
	start  time.Time
	ctx    context.Context
	cancel context.CancelCauseFunc

	last  atomic.Int64 // nanoseconds since start of the last Touch, +1; 0 = none yet
	fired atomic.Pointer[Reason]

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

// NewWatchdog starts the clocks now. Its Context ends when parent does, when
// a clock fires (cause: *TimeoutError) or on Stop.
func NewWatchdog(parent context.Context, t Timeouts) *Watchdog {
	ctx, cancel := context.WithCancelCause(parent)
	w := &Watchdog{t: t, start: time.Now(), ctx: ctx, cancel: cancel}
	if d, _, ok := w.due(0); ok {
		w.mu.Lock()
		w.timer = time.AfterFunc(d, w.check)
		w.mu.Unlock()
	}
	return w
}

// Context is the stream's context: pass it to the upstream request.
func (w *Watchdog) Context() context.Context { return w.ctx }

// Touch records an upstream event (the first one stops the first-byte clock).
func (w *Watchdog) Touch() { w.last.Store(int64(time.Since(w.start)) + 1) }

// Silence is how long it has been since the last Touch (since the start
// before the first): what a relay's heartbeat waits on.
func (w *Watchdog) Silence() time.Duration {
	since := time.Since(w.start)
	if last := w.last.Load(); last > 0 {
		return since - time.Duration(last-1)
	}
	return since
}

// Fired reports which clock cancelled the context, or "" if none did.
func (w *Watchdog) Fired() Reason {
	if r := w.fired.Load(); r != nil {
		return *r
	}
	return ""
}

// Stop stops the clocks and cancels Context (use the parent context for work
// after the stream). It is idempotent.
func (w *Watchdog) Stop() {
	w.mu.Lock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
	w.cancel(nil)
}

// due computes, at elapsed since start, either the clock that expired
// (reason != "") or the wait until the earliest deadline (ok=true).
func (w *Watchdog) due(elapsed time.Duration) (wait time.Duration, reason Reason, ok bool) {
	const none = time.Duration(1<<63 - 1)
	wait = none
	consider := func(deadline time.Duration, r Reason) {
		if reason != "" {
			return
		}
		if elapsed >= deadline {
			reason = r
			return
		}
		if deadline-elapsed < wait {
			wait = deadline - elapsed
		}
	}
	if w.t.Total > 0 {
		consider(w.t.Total, TotalTimeout)
	}
	last := w.last.Load()
	switch {
	case last == 0 && w.t.FirstByte > 0:
		consider(w.t.FirstByte, FirstByteTimeout)
	case w.t.Idle > 0:
		from := time.Duration(0)
		if last > 0 {
			from = time.Duration(last - 1)
		}
		consider(from+w.t.Idle, IdleTimeout)
	}
	if reason != "" {
		return 0, reason, false
	}
	return wait, "", wait != none
}

// check runs on the timer: fire, or re-arm for the next deadline.
func (w *Watchdog) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	wait, reason, ok := w.due(time.Since(w.start))
	if reason != "" {
		w.stopped = true
		w.fired.Store(&reason)
		w.cancel(&TimeoutError{Reason: reason})
		return
	}
	if ok {
		w.timer.Reset(wait)
	}
}
