package proxy

import (
	"sync/atomic"

	"github.com/chronicle-proxy/chronicle/store"
)

// serverMetrics are the proxy's counters. They are plain atomics so the hot
// path pays one atomic add; /metrics renders them.
type serverMetrics struct {
	storeErrors atomic.Int64 // store operations that failed
	unpersisted atomic.Int64 // requests forwarded without persistence (on_store_error: pass)
	replayed    atomic.Int64 // retries answered from the store
	completed   atomic.Int64
	failed      atomic.Int64
	aborted     atomic.Int64
	interrupted atomic.Int64
}

// runs counts a finished run by status.
func (m *serverMetrics) runs(s store.Status) {
	switch s {
	case store.Completed:
		m.completed.Add(1)
	case store.Failed:
		m.failed.Add(1)
	case store.Aborted:
		m.aborted.Add(1)
	case store.Interrupted:
		m.interrupted.Add(1)
	}
}
