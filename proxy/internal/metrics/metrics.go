// Package metrics owns chronicle's Prometheus metrics: every series the
// proxy exposes on /metrics (names, labels, help texts and buckets), the
// registry they live on, the handler that serves it, and the store wrapper
// that times every store call. It reads the server's state (gates, the
// thread cache, a store's journal) only through the small interfaces it is
// given at registration, so it imports nothing of the proxy.
//
// Recording on the request path allocates nothing once a series exists:
// each connection's series are resolved once and kept in maps keyed by
// what the path already holds.
package metrics

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chronicle-proxy/chronicle/limiter"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// Metrics are the proxy's Prometheus metrics, on a registry of the
// Server's own. No label carries a thread or tenant id; model labels are
// capped per connection so a client cannot grow the series without bound.
//
// The request path never looks a series up by its label values: each
// connection's series (connMetrics) are resolved once, at start or at a
// label combination's first use, and kept in maps keyed by what the path
// already holds, so recording costs no allocation (TestMetricsHotPathAllocs).
// Counters with known label values (rejection reasons, store operations, run
// statuses) exist from the start at 0, so a rate() over them is defined
// before the first event.
type Metrics struct {
	reg *prometheus.Registry

	requests     *prometheus.CounterVec   // connection, route, status
	latency      *prometheus.HistogramVec // connection, route, status
	tokens       *prometheus.CounterVec   // connection, model, kind
	runsByStatus *prometheus.CounterVec   // status
	rejections   *prometheus.CounterVec   // connection, reason
	// QueueWaitH, EventsTeed and EventLogLag are observed where the
	// pipeline has the value at hand.
	QueueWaitH   *prometheus.HistogramVec // connection
	storeOps     *prometheus.HistogramVec // op
	storeErrs    *prometheus.CounterVec   // op
	ttfb         *prometheus.HistogramVec // connection
	streams      *prometheus.GaugeVec     // connection
	EventsTeed   prometheus.Counter
	EventLogLag  prometheus.Histogram
	retriesC     prometheus.Counter
	unpersistedC prometheus.Counter
	replayedC    prometheus.Counter

	faults    storeFaultMetrics
	genAI     genAIVecs
	retention retentionMetrics // retention.go

	// conns holds each connection's resolved series ("" is chronicle's own
	// API); stores and runCounters each known store operation's and run
	// status's.
	connMu      sync.RWMutex
	conns       map[string]*connMetrics
	stores      map[string]storeSeries
	runCounters map[store.Status]prometheus.Counter

	// Plain counts tests read without a scrape.
	storeErrors atomic.Int64
	unpersisted atomic.Int64
	replayed    atomic.Int64
	retries     atomic.Int64
}

// Known label values, whose series exist from the start.
var (
	rejectionReasons = []string{"rate_limited", "queue_full", "queue_timeout", "tenant_streams", "client_gone"}
	storeOpNames     = []string{"load_thread", "save_transcript", "start_run", "renew", "finish", "append_events",
		"get_run", "list_runs", "sweep", "list_threads"}
	runStatuses = []store.Status{store.Completed, store.Interrupted, store.Failed, store.Aborted}
	tokenKinds  = [4]string{"input", "output", "cached", "reasoning"}
)

// connMetrics are one connection's series, resolved.
type connMetrics struct {
	name       string
	ttfb       prometheus.Observer
	streams    prometheus.Gauge
	rejections map[string]prometheus.Counter // read-only after creation

	reqMu sync.RWMutex
	reqs  map[reqKey]reqSeries

	modelMu sync.Mutex
	models  map[string]*modelSeries
	other   *modelSeries
}

type reqKey struct {
	route  string
	status int
}

type reqSeries struct {
	count prometheus.Counter
	dur   prometheus.Observer
}

// modelSeries are one model's series: its token counters, by tokenKinds,
// and its GenAI series by operation (made at first use, under the
// connection's modelMu).
type modelSeries struct {
	model  string // the label: the model's name, or "other"
	tokens [4]prometheus.Counter
	gen    map[string]*genAISeries
}

type storeSeries struct {
	dur  prometheus.Observer
	errs prometheus.Counter
}

// New makes the metrics on a registry of their own; version is the build's,
// for chronicle_build_info.
func New(version string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), conns: map[string]*connMetrics{}}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chronicle_requests_total",
		Help: "Requests answered, by connection, route (generate, stream, passthrough, api, admin) and status."},
		[]string{"connection", "route", "status"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "chronicle_request_duration_seconds",
		Help:    "Time from request to the end of the answer (the whole stream for streams), by connection, route and status.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}},
		[]string{"connection", "route", "status"})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chronicle_tokens_total",
		Help: "Tokens the upstream reported, by connection, model (the first " + strconv.Itoa(maxModelLabels) +
			" distinct per connection, then \"other\") and kind (input, output, cached, reasoning)."},
		[]string{"connection", "model", "kind"})
	m.runsByStatus = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chronicle_runs_total",
		Help: "Runs that ended, by status."}, []string{"status"})
	m.rejections = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chronicle_rejections_total",
		Help: "Requests the limiters refused, by connection and reason."}, []string{"connection", "reason"})
	m.QueueWaitH = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "chronicle_queue_wait_seconds",
		Help: "Time spent waiting for a slot of a connection's gate.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)},
		[]string{"connection"})
	m.storeOps = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "chronicle_store_operation_seconds",
		Help: "Store operation latency, by operation.", Buckets: prometheus.ExponentialBuckets(0.0001, 3, 12)}, []string{"op"})
	m.storeErrs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chronicle_store_errors_total",
		Help: "Store operations that failed, by operation."}, []string{"op"})
	m.ttfb = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "chronicle_upstream_ttfb_seconds",
		Help:    "Time from sending a request upstream to its response head (each attempt that got one), by connection.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2, 4, 8, 15, 30, 60, 120}},
		[]string{"connection"})
	m.streams = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "chronicle_streams_in_flight",
		Help: "Answers being relayed as they arrive (SSE streams, chunked bodies) on this replica, by connection."},
		[]string{"connection"})
	m.EventsTeed = prometheus.NewCounter(prometheus.CounterOpts{Name: "chronicle_stream_events_total",
		Help: "SSE events relayed to clients and teed to run event logs."})
	m.EventLogLag = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "chronicle_event_log_lag_seconds",
		Help: "Time from an event batch's first event being relayed to the batch being stored.", Buckets: prometheus.ExponentialBuckets(0.0001, 3, 12)})
	m.retriesC = prometheus.NewCounter(prometheus.CounterOpts{Name: "chronicle_upstream_retries_total", Help: "Upstream attempts retried after a 429 or 5xx."})
	m.unpersistedC = prometheus.NewCounter(prometheus.CounterOpts{Name: "chronicle_unpersisted_requests_total",
		Help: "Requests forwarded without persistence because the store was unreachable (on_store_error: pass)."})
	m.replayedC = prometheus.NewCounter(prometheus.CounterOpts{Name: "chronicle_replayed_requests_total",
		Help: "Retries (same X-Run-Id) answered from the store."})
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{Name: "chronicle_build_info",
		Help:        "Always 1; its labels name the build: chronicle's version and the Go version it was built with.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()}})
	buildInfo.Set(1)
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.tokens, m.runsByStatus, m.rejections, m.QueueWaitH,
		m.storeOps, m.storeErrs, m.ttfb, m.streams, m.EventsTeed, m.EventLogLag, m.retriesC, m.unpersistedC, m.replayedC,
		buildInfo, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		f(c)
	}
	m.registerStoreFaults()
	m.genAI = newGenAIVecs()
	for _, c := range m.genAI.collectors() {
		f(c)
	}
	m.registerRetention()
	m.stores = make(map[string]storeSeries, len(storeOpNames))
	for _, op := range storeOpNames {
		m.stores[op] = storeSeries{dur: m.storeOps.WithLabelValues(op), errs: m.storeErrs.WithLabelValues(op)}
	}
	m.runCounters = make(map[store.Status]prometheus.Counter, len(runStatuses))
	for _, st := range runStatuses {
		m.runCounters[st] = m.runsByStatus.WithLabelValues(string(st))
	}
	m.conn("") // chronicle's own API
	return m
}

// RegisterConnections resolves every configured connection's series, so
// that they exist (at 0) before the first request.
func (m *Metrics) RegisterConnections(names []string) {
	for _, n := range names {
		m.conn(n)
	}
}

// conn returns the connection's resolved series, making them at its first
// use (names come from the config, so there are few).
func (m *Metrics) conn(name string) *connMetrics {
	m.connMu.RLock()
	c := m.conns[name]
	m.connMu.RUnlock()
	if c != nil {
		return c
	}
	m.connMu.Lock()
	defer m.connMu.Unlock()
	if c = m.conns[name]; c != nil {
		return c
	}
	c = &connMetrics{name: name, reqs: map[reqKey]reqSeries{}, models: map[string]*modelSeries{}}
	if name != "" {
		c.ttfb = m.ttfb.WithLabelValues(name)
		c.streams = m.streams.WithLabelValues(name)
		c.rejections = make(map[string]prometheus.Counter, len(rejectionReasons))
		for _, r := range rejectionReasons {
			c.rejections[r] = m.rejections.WithLabelValues(name, r)
		}
		c.other = m.newModelSeries(name, "other")
	}
	m.conns[name] = c
	return c
}

func (m *Metrics) newModelSeries(connection, model string) *modelSeries {
	s := modelSeries{model: model}
	for i, kind := range tokenKinds {
		s.tokens[i] = m.tokens.WithLabelValues(connection, model, kind)
	}
	return &s
}

// ThreadCache is what the thread-cache series read: the cache's hit and
// miss counts and the memory it holds.
type ThreadCache interface {
	Hits() int64
	Misses() int64
	Bytes() int64
}

// RegisterThreadCache exposes the thread cache's counts and size; nil
// (no cache) registers nothing.
func (m *Metrics) RegisterThreadCache(c ThreadCache) {
	if c == nil {
		return
	}
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "chronicle_thread_cache_hits_total",
		Help: "Run starts whose thread transcript this replica already held (not read from the store)."}, func() float64 { return float64(c.Hits()) }))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "chronicle_thread_cache_misses_total",
		Help: "Run starts on a stored thread whose transcript was read from the store."}, func() float64 { return float64(c.Misses()) }))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chronicle_thread_cache_bytes",
		Help: "Approximate memory held by kept thread transcripts."}, func() float64 { return float64(c.Bytes()) }))
}

// Gate is what the gate series read of a connection's gate.
type Gate interface {
	Stats() limiter.GateStats
}

// RegisterGates exposes each connection's gate (slots in use, queue
// depth), by connection name.
func (m *Metrics) RegisterGates(gates map[string]Gate) {
	for name, gate := range gates {
		labels := prometheus.Labels{"connection": name}
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chronicle_gate_slots_in_use",
			Help: "Gate slots held on this replica.", ConstLabels: labels}, func() float64 { return float64(gate.Stats().InUse) }))
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chronicle_gate_queue_depth",
			Help: "Requests waiting for a gate slot on this replica.", ConstLabels: labels}, func() float64 { return float64(gate.Stats().Waiting) }))
	}
}

// CountStoreError counts a failed store call in the plain count (the
// store wrapper's series count it themselves).
func (m *Metrics) CountStoreError() {
	m.storeErrors.Add(1)
}

// CountUnpersisted counts a request forwarded without persistence
// (on_store_error: pass).
func (m *Metrics) CountUnpersisted() {
	m.unpersisted.Add(1)
	m.unpersistedC.Inc()
}

// CountReplayed counts a retry answered from the store.
func (m *Metrics) CountReplayed() {
	m.replayed.Add(1)
	m.replayedC.Inc()
}

// CountRetry counts an upstream attempt retried after a 429 or 5xx.
func (m *Metrics) CountRetry() {
	m.retries.Add(1)
	m.retriesC.Inc()
}

// Runs counts a finished run by status.
func (m *Metrics) Runs(s store.Status) {
	if c := m.runCounters[s]; c != nil {
		c.Inc()
		return
	}
	m.runsByStatus.WithLabelValues(string(s)).Inc()
}

// Rejected counts a request the limiters turned away, by reason.
func (m *Metrics) Rejected(connection, reason string) {
	if c := m.conn(connection).rejections[reason]; c != nil {
		c.Inc()
		return
	}
	m.rejections.WithLabelValues(connection, reason).Inc()
}

// maxModelLabels caps the distinct model labels of one connection; later
// models, and names no model has (too long, odd bytes), count as "other".
const (
	maxModelLabels   = 32
	maxModelLabelLen = 128
)

// modelSeries returns the token counters for model on c: its own while
// fewer than maxModelLabels models have been seen, else "other".
func (m *Metrics) modelSeries(c *connMetrics, model string) *modelSeries {
	c.modelMu.Lock()
	s := c.models[model]
	if s == nil && len(c.models) < maxModelLabels && plausibleModel(model) {
		s = m.newModelSeries(c.name, model)
		c.models[model] = s
	}
	c.modelMu.Unlock()
	if s == nil {
		return c.other
	}
	return s
}

// plausibleModel reports whether s could be a model name: short, and of
// the bytes model names use (gpt-4o, models/gemini-2.5-flash,
// accounts/x/models/y@001, deepseek-ai/DeepSeek-V3:free).
func plausibleModel(s string) bool {
	if s == "" || len(s) > maxModelLabelLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':' || c == '/' || c == '@' || c == '+') {
			return false
		}
	}
	return true
}

// ObserveTokens adds a turn's usage.
func (m *Metrics) ObserveTokens(connection, model string, in, out, cached, reasoning int64) {
	c := m.conn(connection)
	if c.other == nil { // chronicle's own API reports no usage
		return
	}
	s := m.modelSeries(c, model)
	for i, n := range [4]int64{in, out, cached, reasoning} {
		if n > 0 {
			s.tokens[i].Add(float64(n))
		}
	}
}

var statusText sync.Map // int → string, so the hot path does not format

// StatusLabel is an HTTP status code's text, formatted once per code.
func StatusLabel(code int) string { return statusLabel(code) }

func statusLabel(code int) string {
	if v, ok := statusText.Load(code); ok {
		return v.(string)
	}
	s := strconv.Itoa(code)
	statusText.Store(code, s)
	return s
}

// ObserveRequest records one answered request.
func (m *Metrics) ObserveRequest(connection, route string, status int, d time.Duration) {
	c := m.conn(connection)
	k := reqKey{route: route, status: status}
	c.reqMu.RLock()
	s, ok := c.reqs[k]
	c.reqMu.RUnlock()
	if !ok {
		c.reqMu.Lock()
		if s, ok = c.reqs[k]; !ok {
			code := statusLabel(status)
			s = reqSeries{count: m.requests.WithLabelValues(connection, route, code), dur: m.latency.WithLabelValues(connection, route, code)}
			c.reqs[k] = s
		}
		c.reqMu.Unlock()
	}
	s.count.Inc()
	s.dur.Observe(d.Seconds())
}

// ObserveTTFB records the time an upstream took to send its response head.
// It is called with what the forwarding code has at hand: the deadline it
// gave the attempt, sent + first_byte.
func (m *Metrics) ObserveTTFB(connection string, firstByte time.Duration, deadline time.Time) {
	if c := m.conn(connection); c.ttfb != nil {
		c.ttfb.Observe((firstByte - time.Until(deadline)).Seconds())
	}
}

// StreamOpened and StreamClosed keep chronicle_streams_in_flight: a relay
// of an answer as it arrives begins and ends (relayControl).
func (m *Metrics) StreamOpened(connection string) {
	if c := m.conn(connection); c.streams != nil {
		c.streams.Inc()
	}
}

func (m *Metrics) StreamClosed(connection string) {
	if c := m.conn(connection); c.streams != nil {
		c.streams.Dec()
	}
}

// observeStore records one store operation.
func (m *Metrics) observeStore(op string, start time.Time, err error) {
	s, ok := m.stores[op]
	if !ok {
		s = storeSeries{dur: m.storeOps.WithLabelValues(op), errs: m.storeErrs.WithLabelValues(op)}
	}
	s.dur.Observe(time.Since(start).Seconds())
	if err != nil && !isNotFound(err) {
		s.errs.Inc()
		m.storeErrors.Add(1)
	}
}

// Handler serves the registry in Prometheus text format.
func (m *Metrics) Handler() fasthttp.RequestHandler {
	return fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
}
