package proxy

import (
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/internal/metrics"
)

// What the metrics read of the server's state, through the small
// interfaces proxy/internal/metrics asks for.

// connGates are the connections' gates, by connection name.
func connGates(conns map[string]*upstream) map[string]metrics.Gate {
	gates := make(map[string]metrics.Gate, len(conns))
	for name, up := range conns {
		gates[name] = up.gate
	}
	return gates
}

// threadCacheStats is what the thread-cache series read of c; nil when
// the cache is off.
func threadCacheStats(c *threadCache) metrics.ThreadCache {
	if c == nil {
		return nil
	}
	return threadCacheMetrics{c}
}

type threadCacheMetrics struct{ c *threadCache }

func (t threadCacheMetrics) Hits() int64   { return t.c.hits.Load() }
func (t threadCacheMetrics) Misses() int64 { return t.c.misses.Load() }

func (t threadCacheMetrics) Bytes() int64 {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	return t.c.size
}

// observeGenAI records a generation exchange's end in the GenAI
// semantic-convention series. A function of its own, not inlined: conclude
// runs on the connection's goroutine, and this frame is only there after
// the finish's store round trip (docs/design.md, "Runtime mechanics").
// notStored: the turn could be neither stored nor spooled.
//
//go:noinline
func (ex *exchange) observeGenAI(o *outcome, took time.Duration, notStored bool) {
	g := metrics.GenAI{
		Connection: ex.up.cfg.Name,
		Operation:  ex.genOp,
		Provider:   genAIProvider(ex.up.cfg.Provider),
		Model:      ex.op.Model,
		Duration:   took,
		ErrorType:  o.reason,
	}
	switch {
	case notStored:
		g.ErrorType = "store_unavailable"
	case g.ErrorType == "" && o.status >= 400:
		g.ErrorType = metrics.StatusLabel(o.status)
	}
	if u := o.turn.Usage; u.Present {
		g.Usage, g.InputTokens, g.OutputTokens = true, u.InputTokens, u.OutputTokens
	}
	if !ex.firstEvent.IsZero() {
		g.FirstToken = ex.firstEvent.Sub(ex.start)
	}
	ex.s.metrics.ObserveGenAI(g)
}
