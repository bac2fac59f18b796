package limiter

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// GateConfig caps one gate. It mirrors a connection's max_concurrent and
// queue settings.
type GateConfig struct {
	// MaxConcurrent is the number of slots; 0 means no cap (every Acquire
	// succeeds at once, and slots are still counted).
	MaxConcurrent int
	// MaxWaiting bounds the queue: 0 means unbounded, a negative value
	// means nobody waits (ErrQueueFull as soon as every slot is held).
	MaxWaiting int
	// Timeout bounds one wait; 0 means wait until the context ends.
	Timeout time.Duration
}

// Gate is a FIFO semaphore: waiters are admitted in strict arrival order,
// and a slot stays held until its Slot is released (the stream ended).
// Implementations are safe for concurrent use.
type Gate interface {
	// Acquire waits for a slot. It returns ErrQueueFull when the queue is
	// full, ErrQueueTimeout when the wait exceeded GateConfig.Timeout, and
	// the context's error when ctx ended first (a client that disconnects
	// gives its place up at once).
	Acquire(ctx context.Context) (Slot, error)
	// Stats reports counters for metrics; it does no I/O.
	Stats() GateStats
}

// Slot is one held place in a Gate. Release is idempotent and safe to call
// from any goroutine; it hands the slot to the next waiter.
type Slot interface {
	Release()
}

// Gates hands out gates by name (a connection, or "tenant:<id>" for a
// per-tenant stream cap). Gates with different names never block each
// other; the same name returns the same gate (in-process) or a gate sharing
// state with every replica (Redis). A later call with a different config
// updates the gate's config.
type Gates interface {
	Gate(name string, cfg GateConfig) Gate
}

// GateStats are a gate's metrics. For a shared gate, InUse and Waiting
// count this replica's holders and waiters; the counters are this
// replica's too.
type GateStats struct {
	MaxConcurrent int // configured cap; 0 = none
	InUse         int // slots held now
	Waiting       int // callers queued now

	Acquired     uint64        // slots handed out
	Queued       uint64        // of those, ones that had to wait
	WaitTime     time.Duration // total time admitted waiters spent queued
	QueueFull    uint64        // rejections: ErrQueueFull
	QueueTimeout uint64        // rejections: ErrQueueTimeout
	Cancelled    uint64        // waits ended by the caller's context
	Lost         uint64        // slots whose lease lapsed before release (shared gates only)
}

// GateCounters is the lock-free bookkeeping behind GateStats, shared by
// both gate implementations. The zero value is ready to use.
type GateCounters struct {
	InUse, Waiting                                       atomic.Int64
	Acquired, Queued, QueueFull, QueueTimeout, Cancelled atomic.Uint64
	Lost                                                 atomic.Uint64
	WaitNanos                                            atomic.Int64
}

// Snapshot turns the counters into GateStats.
func (c *GateCounters) Snapshot(maxConcurrent int) GateStats {
	return GateStats{
		MaxConcurrent: maxConcurrent,
		InUse:         int(c.InUse.Load()),
		Waiting:       int(c.Waiting.Load()),
		Acquired:      c.Acquired.Load(),
		Queued:        c.Queued.Load(),
		WaitTime:      time.Duration(c.WaitNanos.Load()),
		QueueFull:     c.QueueFull.Load(),
		QueueTimeout:  c.QueueTimeout.Load(),
		Cancelled:     c.Cancelled.Load(),
		Lost:          c.Lost.Load(),
	}
}

// LocalGates is the in-process Gates, for a single replica.
type LocalGates struct {
	mu    sync.Mutex
	gates map[string]*LocalGate
}

// NewLocalGates returns an empty set of in-process gates.
func NewLocalGates() *LocalGates { return &LocalGates{gates: map[string]*LocalGate{}} }

// Gate returns the gate called name, creating it with cfg or updating its
// config to cfg.
func (s *LocalGates) Gate(name string, cfg GateConfig) Gate {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.gates[name]
	if !ok {
		g = NewGate(cfg)
		s.gates[name] = g
		return g
	}
	g.SetConfig(cfg)
	return g
}

// LocalGate is an in-process FIFO gate. A released slot is handed directly
// to the oldest waiter, so arrival order is exact.
type LocalGate struct {
	mu      sync.Mutex
	cfg     GateConfig
	held    int
	head    *waiter
	tail    *waiter
	waiting int
	c       GateCounters
}

type waiter struct {
	ready      chan struct{}
	granted    bool
	prev, next *waiter
}

// NewGate returns an in-process gate.
func NewGate(cfg GateConfig) *LocalGate { return &LocalGate{cfg: cfg} }

// SetConfig changes the gate's caps. Raising MaxConcurrent admits waiters
// at once; lowering it lets current holders finish.
func (g *LocalGate) SetConfig(cfg GateConfig) {
	g.mu.Lock()
	if g.cfg == cfg {
		g.mu.Unlock()
		return
	}
	g.cfg = cfg
	for g.head != nil && (cfg.MaxConcurrent <= 0 || g.held < cfg.MaxConcurrent) {
		g.held++
		g.grantHead()
	}
	g.mu.Unlock()
}

// Acquire implements Gate.
func (g *LocalGate) Acquire(ctx context.Context) (Slot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	g.mu.Lock()
	cfg := g.cfg
	if cfg.MaxConcurrent <= 0 || (g.held < cfg.MaxConcurrent && g.head == nil) {
		g.held++
		g.mu.Unlock()
		g.c.InUse.Add(1)
		g.c.Acquired.Add(1)
		return &localSlot{g: g}, nil
	}
	if cfg.MaxWaiting < 0 || (cfg.MaxWaiting > 0 && g.waiting >= cfg.MaxWaiting) {
		g.mu.Unlock()
		g.c.QueueFull.Add(1)
		return nil, ErrQueueFull
	}
	w := &waiter{ready: make(chan struct{})}
	if g.tail == nil {
		g.head, g.tail = w, w
	} else {
		w.prev = g.tail
		g.tail.next = w
		g.tail = w
	}
	g.waiting++
	g.c.Waiting.Add(1)
	g.mu.Unlock()

	start := time.Now()
	var timeout <-chan time.Time
	if cfg.Timeout > 0 {
		t := time.NewTimer(cfg.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-w.ready:
		return g.admitted(start), nil
	case <-ctx.Done():
		g.mu.Lock()
		if w.granted {
			g.mu.Unlock()
			g.c.InUse.Add(1)
			g.release() // handed over just now: pass it on
		} else {
			g.unlink(w)
			g.mu.Unlock()
		}
		g.c.Cancelled.Add(1)
		return nil, ctx.Err()
	case <-timeout:
		g.mu.Lock()
		if w.granted {
			g.mu.Unlock()
			return g.admitted(start), nil
		}
		g.unlink(w)
		g.mu.Unlock()
		g.c.QueueTimeout.Add(1)
		return nil, ErrQueueTimeout
	}
}

func (g *LocalGate) admitted(start time.Time) Slot {
	g.c.InUse.Add(1)
	g.c.Acquired.Add(1)
	g.c.Queued.Add(1)
	g.c.WaitNanos.Add(int64(time.Since(start)))
	return &localSlot{g: g}
}

// unlink removes a waiter that was not granted; g.mu is held.
func (g *LocalGate) unlink(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		g.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		g.tail = w.prev
	}
	w.prev, w.next = nil, nil
	g.waiting--
	g.c.Waiting.Add(-1)
}

// grantHead hands a slot (already counted in held) to the oldest waiter;
// g.mu is held.
func (g *LocalGate) grantHead() {
	w := g.head
	g.unlink(w)
	w.granted = true
	close(w.ready)
}

func (g *LocalGate) release() {
	g.c.InUse.Add(-1)
	g.mu.Lock()
	if g.head != nil && (g.cfg.MaxConcurrent <= 0 || g.held <= g.cfg.MaxConcurrent) {
		g.grantHead()
	} else {
		g.held--
	}
	g.mu.Unlock()
}

// Stats implements Gate.
func (g *LocalGate) Stats() GateStats {
	g.mu.Lock()
	n := g.cfg.MaxConcurrent
	g.mu.Unlock()
	return g.c.Snapshot(n)
}

type localSlot struct {
	g    *LocalGate
	done atomic.Bool
}

func (s *localSlot) Release() {
	if s.done.CompareAndSwap(false, true) {
		s.g.release()
	}
}
