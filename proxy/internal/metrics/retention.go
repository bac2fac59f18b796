package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// retentionMetrics count the retention pass's work (issue 31).
type retentionMetrics struct {
	threads, runs prometheus.Counter
	passes        *prometheus.CounterVec // result: ok, error, skipped (another replica holds the lease)
	lastPass      prometheus.Gauge
}

func (m *Metrics) registerRetention() {
	r := &m.retention
	r.threads = prometheus.NewCounter(prometheus.CounterOpts{Name: "chronicle_retention_threads_deleted_total",
		Help: "Threads the retention pass deleted (with their runs, event logs, interrupts and large values) because they outlived their retention."})
	r.runs = prometheus.NewCounter(prometheus.CounterOpts{Name: "chronicle_retention_runs_deleted_total",
		Help: "Runs deleted with those threads."})
	r.passes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chronicle_retention_passes_total",
		Help: "Retention passes by result: ok, error, or skipped (another replica holds the lease)."}, []string{"result"})
	r.lastPass = prometheus.NewGauge(prometheus.GaugeOpts{Name: "chronicle_retention_last_pass_timestamp_seconds",
		Help: "When this replica last finished a retention pass (Unix seconds); 0 until it has."})
	for _, res := range []string{"ok", "error", "skipped"} {
		r.passes.WithLabelValues(res)
	}
	m.reg.MustRegister(r.threads, r.runs, r.passes, r.lastPass)
}

// RetentionPass records one retention pass: result is ok, error or
// skipped; threads and runs what it deleted.
func (m *Metrics) RetentionPass(result string, threads, runs int, at time.Time) {
	r := &m.retention
	r.passes.WithLabelValues(result).Inc()
	r.threads.Add(float64(threads))
	r.runs.Add(float64(runs))
	if result == "ok" {
		r.lastPass.Set(float64(at.UnixNano()) / 1e9)
	}
}
