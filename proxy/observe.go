package proxy

import (
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
