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
	retries     atomic.Int64 // upstream attempts retried
	queueWait   atomic.Int64 // nanoseconds spent waiting for gate slots

	rejectedRate, rejectedQueueFull, rejectedQueueTimeout, rejectedStreams, rejectedGone atomic.Int64
}

// rejected counts a request the limiters turned away, by reason.
func (m *serverMetrics) rejected(reason string) {
	switch reason {
	case "rate_limited":
		m.rejectedRate.Add(1)
	case "queue_full":
		m.rejectedQueueFull.Add(1)
	case "queue_timeout":
		m.rejectedQueueTimeout.Add(1)
	case "tenant_streams":
		m.rejectedStreams.Add(1)
	case "client_gone":
		m.rejectedGone.Add(1)
	}
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
