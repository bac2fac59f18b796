package proxy

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// serverMetrics are the proxy's Prometheus metrics, on a registry of the
// Server's own. No label carries a thread or tenant id; model labels are
// capped per connection so a client cannot grow the series without bound.
type serverMetrics struct {
	reg *prometheus.Registry

	requests     *prometheus.CounterVec   // connection, route, status
	latency      *prometheus.HistogramVec // connection, route
	tokens       *prometheus.CounterVec   // connection, model, kind
	runsByStatus *prometheus.CounterVec   // status
	rejections   *prometheus.CounterVec   // connection, reason
	queueWaitH   *prometheus.HistogramVec // connection
	storeOps     *prometheus.HistogramVec // op
	storeErrs    *prometheus.CounterVec   // op
	eventsTeed   prometheus.Counter
	eventLogLag  prometheus.Histogram
	retriesC     prometheus.Counter
	unpersistedC prometheus.Counter
	replayedC    prometheus.Counter

	faults storeFaultMetrics

	models sync.Map // connection → *modelSet

	// Plain counts tests read without a scrape.
	storeErrors atomic.Int64
	unpersisted atomic.Int64
	replayed    atomic.Int64
	retries     atomic.Int64
}

func newServerMetrics() *serverMetrics {
	m := &serverMetrics{reg: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chronicle_requests_total",
		Help: "Requests answered, by connection, route (generate, stream, passthrough, api, admin) and status."},
		[]string{"connection", "route", "status"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "chronicle_request_duration_seconds",
		Help:    "Time from request to the end of the answer (the whole stream for streams).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}},
		[]string{"connection", "route"})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chronicle_tokens_total",
		Help: "Tokens the upstream reported, by connection, model and kind (input, output, cached, reasoning)."},
		[]string{"connection", "model", "kind"})
	m.runsByStatus = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chronicle_runs_total",
		Help: "Runs that ended, by status."}, []string{"status"})
	m.rejections = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chronicle_rejections_total",
		Help: "Requests the limiters refused, by connection and reason."}, []string{"connection", "reason"})
	m.queueWaitH = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "chronicle_queue_wait_seconds",
		Help: "Time spent waiting for a slot of a connection's gate.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)},
		[]string{"connection"})
	m.storeOps = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "chronicle_store_operation_seconds",
		Help: "Store operation latency, by operation.", Buckets: prometheus.ExponentialBuckets(0.0001, 3, 12)}, []string{"op"})
	m.storeErrs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chronicle_store_errors_total",
		Help: "Store operations that failed, by operation."}, []string{"op"})
	m.eventsTeed = prometheus.NewCounter(prometheus.CounterOpts{Name: "chronicle_stream_events_total",
		Help: "SSE events relayed to clients and teed to run event logs."})
	m.eventLogLag = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "chronicle_event_log_lag_seconds",
		Help: "Time from an event batch's first event being relayed to the batch being stored.", Buckets: prometheus.ExponentialBuckets(0.0001, 3, 12)})
	m.retriesC = prometheus.NewCounter(prometheus.CounterOpts{Name: "chronicle_upstream_retries_total", Help: "Upstream attempts retried after a 429 or 5xx."})
	m.unpersistedC = prometheus.NewCounter(prometheus.CounterOpts{Name: "chronicle_unpersisted_requests_total",
		Help: "Requests forwarded without persistence because the store was unreachable (on_store_error: pass)."})
	m.replayedC = prometheus.NewCounter(prometheus.CounterOpts{Name: "chronicle_replayed_requests_total",
		Help: "Retries (same X-Run-Id) answered from the store."})
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.tokens, m.runsByStatus, m.rejections, m.queueWaitH,
		m.storeOps, m.storeErrs, m.eventsTeed, m.eventLogLag, m.retriesC, m.unpersistedC, m.replayedC,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		f(c)
	}
	m.registerStoreFaults()
	return m
}

// registerGates exposes each connection's gate (slots in use, queue depth).
func (m *serverMetrics) registerThreadCache(c *threadCache) {
	if c == nil {
		return
	}
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "chronicle_thread_cache_hits_total",
		Help: "Run starts whose thread transcript this replica already held (not read from the store)."}, func() float64 { return float64(c.hits.Load()) }))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "chronicle_thread_cache_misses_total",
		Help: "Run starts on a stored thread whose transcript was read from the store."}, func() float64 { return float64(c.misses.Load()) }))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chronicle_thread_cache_bytes",
		Help: "Approximate memory held by kept thread transcripts."}, func() float64 {
		c.mu.Lock()
		defer c.mu.Unlock()
		return float64(c.size)
	}))
}

func (m *serverMetrics) registerGates(s *Server) {
	for name, up := range s.conns {
		gate := up.gate
		labels := prometheus.Labels{"connection": name}
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chronicle_gate_slots_in_use",
			Help: "Gate slots held on this replica.", ConstLabels: labels}, func() float64 { return float64(gate.Stats().InUse) }))
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chronicle_gate_queue_depth",
			Help: "Requests waiting for a gate slot on this replica.", ConstLabels: labels}, func() float64 { return float64(gate.Stats().Waiting) }))
	}
}

func (m *serverMetrics) countStoreError() {
	m.storeErrors.Add(1)
}

func (m *serverMetrics) countUnpersisted() {
	m.unpersisted.Add(1)
	m.unpersistedC.Inc()
}

func (m *serverMetrics) countReplayed() {
	m.replayed.Add(1)
	m.replayedC.Inc()
}

func (m *serverMetrics) countRetry() {
	m.retries.Add(1)
	m.retriesC.Inc()
}

// runs counts a finished run by status.
func (m *serverMetrics) runs(s store.Status) { m.runsByStatus.WithLabelValues(string(s)).Inc() }

// rejected counts a request the limiters turned away, by reason.
func (m *serverMetrics) rejected(connection, reason string) {
	m.rejections.WithLabelValues(connection, reason).Inc()
}

// modelSet caps the distinct model labels of one connection.
type modelSet struct {
	mu   sync.Mutex
	seen map[string]bool
}

const maxModelLabels = 64

// modelLabel is model, or "other" once a connection has seen too many.
func (m *serverMetrics) modelLabel(connection, model string) string {
	v, ok := m.models.Load(connection)
	if !ok {
		// LoadOrStore's argument is built on every call: only when missing.
		v, _ = m.models.LoadOrStore(connection, &modelSet{seen: map[string]bool{}})
	}
	ms := v.(*modelSet)
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.seen[model] {
		return model
	}
	if len(ms.seen) >= maxModelLabels {
		return "other"
	}
	ms.seen[model] = true
	return model
}

// observeTokens adds a turn's usage.
func (m *serverMetrics) observeTokens(connection, model string, in, out, cached, reasoning int64) {
	model = m.modelLabel(connection, model)
	for _, kv := range []struct {
		kind string
		n    int64
	}{{"input", in}, {"output", out}, {"cached", cached}, {"reasoning", reasoning}} {
		if kv.n > 0 {
			m.tokens.WithLabelValues(connection, model, kv.kind).Add(float64(kv.n))
		}
	}
}

var statusText sync.Map // int → string, so the hot path does not format

func statusLabel(code int) string {
	if v, ok := statusText.Load(code); ok {
		return v.(string)
	}
	s := strconv.Itoa(code)
	statusText.Store(code, s)
	return s
}

// observeRequest records one answered request.
func (m *serverMetrics) observeRequest(connection, route string, status int, d time.Duration) {
	m.requests.WithLabelValues(connection, route, statusLabel(status)).Inc()
	m.latency.WithLabelValues(connection, route).Observe(d.Seconds())
}

// observeStore records one store operation.
func (m *serverMetrics) observeStore(op string, start time.Time, err error) {
	m.storeOps.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil && !isNotFound(err) {
		m.storeErrs.WithLabelValues(op).Inc()
		m.storeErrors.Add(1)
	}
}

// handler serves the registry in Prometheus text format.
func (m *serverMetrics) handler() fasthttp.RequestHandler {
	return fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
}
