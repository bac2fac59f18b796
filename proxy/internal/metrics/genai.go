package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The OpenTelemetry GenAI semantic conventions' metrics, in the form an
// OpenTelemetry Prometheus exporter gives them (dots become underscores,
// seconds get their _seconds suffix, the {token} annotation is dropped):
//
//	gen_ai.client.token.usage           → gen_ai_client_token_usage
//	gen_ai.server.request.duration      → gen_ai_server_request_duration_seconds
//	gen_ai.server.time_to_first_token   → gen_ai_server_time_to_first_token_seconds
//	gen_ai.server.time_per_output_token → gen_ai_server_time_per_output_token_seconds
//
// labelled by connection (chronicle's), gen_ai_operation_name,
// gen_ai_provider_name, gen_ai_request_model (bounded as chronicle_tokens_total's
// model label is) and, for the token usage, gen_ai_token_type (input,
// output); the request duration also by error_type ("" for a success).
// The buckets are the conventions' recommended boundaries.
var (
	genAITokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	genAIDurationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	genAITTFTBuckets     = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	genAITPOTBuckets     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
)

const (
	labelOperation = "gen_ai_operation_name"
	labelProvider  = "gen_ai_provider_name"
	labelModel     = "gen_ai_request_model"
	labelTokenType = "gen_ai_token_type"
	labelErrorType = "error_type"
)

// genAIVecs are the GenAI series' vectors.
type genAIVecs struct {
	tokens   *prometheus.HistogramVec // connection, operation, provider, model, token type
	duration *prometheus.HistogramVec // connection, operation, provider, model, error type
	ttft     *prometheus.HistogramVec // connection, operation, provider, model
	tpot     *prometheus.HistogramVec // connection, operation, provider, model
}

func newGenAIVecs() genAIVecs {
	base := []string{"connection", labelOperation, labelProvider, labelModel}
	return genAIVecs{
		tokens: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gen_ai_client_token_usage",
			Help:    "Tokens one generation used as the upstream reported them (gen_ai.client.token.usage), by gen_ai_token_type (input, output).",
			Buckets: genAITokenBuckets}, append(base[:4:4], labelTokenType)),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gen_ai_server_request_duration_seconds",
			Help:    "Time from a generation request's arrival to the end of its answer (gen_ai.server.request.duration); error_type names a failure (chronicle's reason or the upstream's status), empty for a success.",
			Buckets: genAIDurationBuckets}, append(base[:4:4], labelErrorType)),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gen_ai_server_time_to_first_token_seconds",
			Help:    "Time from a streamed generation's arrival to its answer's first event relayed (gen_ai.server.time_to_first_token); successful streams only.",
			Buckets: genAITTFTBuckets}, base),
		tpot: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gen_ai_server_time_per_output_token_seconds",
			Help:    "Time per output token after the first of a successful streamed generation (gen_ai.server.time_per_output_token): the time from the first event to the end over output tokens less one.",
			Buckets: genAITPOTBuckets}, base),
	}
}

func (v genAIVecs) collectors() []prometheus.Collector {
	return []prometheus.Collector{v.tokens, v.duration, v.ttft, v.tpot}
}

// genAISeries are one (connection, operation, model)'s GenAI series.
type genAISeries struct {
	labels     [4]string
	input      prometheus.Observer
	output     prometheus.Observer
	ok         prometheus.Observer // request duration, no error
	mu         sync.Mutex
	failed     map[string]prometheus.Observer // request duration by error type; under mu
	ttft, tpot prometheus.Observer
}

// GenAI is what one generation exchange came to, for the GenAI series.
type GenAI struct {
	Connection string
	Operation  string // gen_ai.operation.name: chat, generate_content
	Provider   string // gen_ai.provider.name
	Model      string // the request's model; bounded here
	// Duration is from the request's arrival to the answer's end.
	Duration time.Duration
	// ErrorType names a failure; "" for a success.
	ErrorType string
	// Usage: the upstream reported InputTokens and OutputTokens.
	Usage                     bool
	InputTokens, OutputTokens int64
	// FirstToken is the time from the request's arrival to the answer's
	// first event relayed; 0 when the answer was not streamed.
	FirstToken time.Duration
}

// ObserveGenAI records one generation exchange in the GenAI series. Like
// the others it allocates nothing once its series exist.
func (m *Metrics) ObserveGenAI(g GenAI) {
	c := m.conn(g.Connection)
	if c.other == nil || g.Operation == "" {
		return
	}
	s := m.genAISeries(c, g)
	if g.Usage {
		s.input.Observe(float64(g.InputTokens))
		s.output.Observe(float64(g.OutputTokens))
	}
	secs := g.Duration.Seconds()
	if g.ErrorType != "" {
		s.failedDuration(m, g.ErrorType).Observe(secs)
		return
	}
	s.ok.Observe(secs)
	if g.FirstToken <= 0 {
		return
	}
	s.ttft.Observe(g.FirstToken.Seconds())
	if g.Usage && g.OutputTokens > 1 && g.Duration > g.FirstToken {
		s.tpot.Observe((g.Duration - g.FirstToken).Seconds() / float64(g.OutputTokens-1))
	}
}

// genAISeries returns g's series on c: its model's (or "other", as
// modelSeries decides) for its operation, made at first use.
func (m *Metrics) genAISeries(c *connMetrics, g GenAI) *genAISeries {
	ms := m.modelSeries(c, g.Model)
	c.modelMu.Lock()
	defer c.modelMu.Unlock()
	s := ms.gen[g.Operation]
	if s != nil {
		return s
	}
	s = &genAISeries{labels: [4]string{c.name, g.Operation, g.Provider, ms.model}, failed: map[string]prometheus.Observer{}}
	l := s.labels
	s.input = m.genAI.tokens.WithLabelValues(l[0], l[1], l[2], l[3], "input")
	s.output = m.genAI.tokens.WithLabelValues(l[0], l[1], l[2], l[3], "output")
	s.ok = m.genAI.duration.WithLabelValues(l[0], l[1], l[2], l[3], "")
	s.ttft = m.genAI.ttft.WithLabelValues(l[:]...)
	s.tpot = m.genAI.tpot.WithLabelValues(l[:]...)
	if ms.gen == nil {
		ms.gen = map[string]*genAISeries{}
	}
	ms.gen[g.Operation] = s
	return s
}

// failedDuration is the request-duration series for an error type.
func (s *genAISeries) failedDuration(m *Metrics, errType string) prometheus.Observer {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.failed[errType]
	if o == nil {
		o = m.genAI.duration.WithLabelValues(s.labels[0], s.labels[1], s.labels[2], s.labels[3], errType)
		s.failed[errType] = o
	}
	return o
}
