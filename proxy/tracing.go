// Traces (telemetry.traces): one server span per request to a
// connection, with the OpenTelemetry GenAI semantic conventions'
// attributes and chronicle's own, the store's start and finish as child
// spans, and W3C trace context taken from the client and sent upstream.
// With traces off (Options.TracerProvider nil) the exchange has no span
// and every step here is skipped by a nil check.

package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/proxy/config"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of chronicle's spans.
const tracerName = "github.com/chronicle-proxy/chronicle/proxy"

// tracing is a server's tracer; nil when traces are off.
type tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	// threadID: spans carry chronicle.thread.id (telemetry.traces.thread_id).
	threadID bool
	// content: generation spans carry the messages the client sent and the
	// answer's text, each up to contentMax bytes of text
	// (telemetry.traces.content, content_max_bytes).
	content    bool
	contentMax int
}

func newTracing(tp trace.TracerProvider, cfg config.Traces) *tracing {
	if tp == nil {
		return nil
	}
	t := &tracing{
		tracer:   tp.Tracer(tracerName, trace.WithInstrumentationVersion(Version)),
		prop:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}),
		threadID: cfg.ThreadID,
		content:  cfg.Content,
	}
	if cfg.ContentMaxBytes != nil {
		t.contentMax = *cfg.ContentMaxBytes
	}
	return t
}

// headerCarrier is a propagation.TextMapCarrier over a fasthttp request's
// headers.
type headerCarrier struct{ h *fasthttp.RequestHeader }

func (c headerCarrier) Get(key string) string { return string(c.h.Peek(key)) }

func (c headerCarrier) Set(key, value string) { c.h.Set(key, value) }

func (c headerCarrier) Keys() []string {
	var keys []string
	for k := range c.h.All() {
		keys = append(keys, string(k))
	}
	return keys
}

// isTraceHeader reports whether name is a W3C trace-context header, which
// the upstream request gets from chronicle's span rather than the client.
func isTraceHeader(name []byte) bool {
	return bytes.EqualFold(name, []byte("traceparent")) || bytes.EqualFold(name, []byte("tracestate"))
}

// GenAI semantic-convention and chronicle attribute keys.
const (
	attrOperation      = attribute.Key("gen_ai.operation.name")
	attrProvider       = attribute.Key("gen_ai.provider.name")
	attrRequestModel   = attribute.Key("gen_ai.request.model")
	attrResponseModel  = attribute.Key("gen_ai.response.model")
	attrInputMessages  = attribute.Key("gen_ai.input.messages")
	attrOutputMessages = attribute.Key("gen_ai.output.messages")
	attrInputTokens    = attribute.Key("gen_ai.usage.input_tokens")
	attrOutputTokens   = attribute.Key("gen_ai.usage.output_tokens")
	attrFinishReasons  = attribute.Key("gen_ai.response.finish_reasons")
	attrStatusCode     = attribute.Key("http.response.status_code")
	attrErrorType      = attribute.Key("error.type")
	attrConnection     = attribute.Key("chronicle.connection")
	attrRunID          = attribute.Key("chronicle.run.id")
	attrThreadID       = attribute.Key("chronicle.thread.id")
	attrRepairs        = attribute.Key("chronicle.repairs")
	attrRestoredFields = attribute.Key("chronicle.restored_fields")
	attrQueueWaitMS    = attribute.Key("chronicle.queue_wait_ms")
	attrStoreOp        = attribute.Key("chronicle.store.operation")
)

// genAIProvider is gen_ai.provider.name for a connection's provider; an
// OpenAI-compatible server keeps chronicle's name for it.
func genAIProvider(p config.Provider) string {
	if p == "gemini" {
		return "gcp.gemini"
	}
	return string(p)
}

// genAIOperation is gen_ai.operation.name for a request; "" for a
// pass-through that is no generation.
func genAIOperation(ad adapters.Adapter, op adapters.Op, path []byte) string {
	if op.Kind != adapters.OpGenerate {
		if bytes.HasSuffix(bytes.TrimRight(path, "/"), []byte("/embeddings")) || bytes.Contains(path, []byte(":embedContent")) || bytes.Contains(path, []byte(":batchEmbedContents")) {
			return "embeddings"
		}
		return ""
	}
	if ad.Format() == adapters.FormatGemini {
		return "generate_content"
	}
	return "chat"
}

// startSpan starts the exchange's server span, the child of the trace
// context the client sent (traceparent, tracestate), if any.
//
//go:noinline
func (s *Server) startSpan(ctx *fasthttp.RequestCtx, ex *exchange, rest []byte) {
	tr := s.tracing
	parent := tr.prop.Extract(context.Background(), headerCarrier{&ctx.Request.Header})
	opName := ex.genOp
	name := opName
	switch {
	case opName == "":
		name = string(ctx.Method()) + " /" + ex.up.cfg.Name
	case ex.op.Model != "":
		name += " " + ex.op.Model
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, attrProvider.String(genAIProvider(ex.up.cfg.Provider)), attrConnection.String(ex.up.cfg.Name))
	if opName != "" {
		attrs = append(attrs, attrOperation.String(opName))
	}
	if ex.op.Model != "" {
		attrs = append(attrs, attrRequestModel.String(ex.op.Model))
	}
	ex.traceCtx, ex.span = tr.tracer.Start(parent, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	// The messages' text only for a span that records: a sampled-out
	// one would build it for nothing.
	if tr.content && ex.op.Kind == adapters.OpGenerate && ex.span.IsRecording() {
		if in := inputMessages(ex.ad, ctx.PostBody(), tr.contentMax); in != "" {
			ex.span.SetAttributes(attrInputMessages.String(in))
		}
	}
}

// spanRecording reports whether the exchange has a span that records
// (not sampled out): only then is the answer read for the span's sake.
func (ex *exchange) spanRecording() bool { return ex.span != nil && ex.span.IsRecording() }

// endSpan ends the exchange's span with what the exchange came to: the
// status, the run, the turn's usage and finish reason. Once; o may be nil
// (a request answered before it went upstream: status is the answer's).
// notStored: the run's end could be neither stored nor spooled
// (error.type store_unavailable, whatever the upstream answered).
//
//go:noinline
func (ex *exchange) endSpan(status int, o *outcome, notStored bool) {
	sp := ex.span
	if sp == nil {
		return
	}
	ex.span = nil
	if !sp.IsRecording() {
		sp.End() // sampled out: nothing to record
		return
	}
	attrs := make([]attribute.KeyValue, 0, 12)
	attrs = append(attrs, attrStatusCode.Int(status))
	if t := ex.turn; t != nil {
		attrs = append(attrs, attrRunID.String(t.runID), attrRepairs.Int(len(t.plan.edits)), attrRestoredFields.Int(len(t.plan.restoredFields)))
		if ex.s.tracing.threadID {
			attrs = append(attrs, attrThreadID.String(t.key.Thread))
		}
	}
	if ex.queued {
		attrs = append(attrs, attrQueueWaitMS.Float64(float64(ex.queueWait.Microseconds())/1000))
	}
	errType := ""
	if o != nil {
		if u := o.turn.Usage; u.Present {
			attrs = append(attrs, attrInputTokens.Int64(u.InputTokens), attrOutputTokens.Int64(u.OutputTokens))
		}
		if o.turn.Model != "" {
			attrs = append(attrs, attrResponseModel.String(o.turn.Model))
		}
		if ex.s.tracing.content && len(o.turn.Message) > 0 {
			attrs = append(attrs, attrOutputMessages.String(outputMessages(ex.ad, o.turn, ex.s.tracing.contentMax)))
		}
		if o.turn.FinishRaw != "" {
			attrs = append(attrs, attrFinishReasons.StringSlice([]string{o.turn.FinishRaw}))
		}
		if o.reason != "" {
			errType = o.reason
		}
	}
	if notStored {
		errType = "store_unavailable"
	}
	if errType == "" && status >= 500 {
		errType = strconv.Itoa(status)
	}
	if errType != "" {
		attrs = append(attrs, attrErrorType.String(errType))
		if o == nil || !o.aborted {
			sp.SetStatus(codes.Error, errType)
		}
	}
	sp.SetAttributes(attrs...)
	sp.End()
}

// storeSpan starts a child span of the exchange's for one store
// operation; nil when the exchange has no span.
func (ex *exchange) storeSpan(op string) trace.Span {
	if ex.span == nil {
		return nil
	}
	_, sp := ex.s.tracing.tracer.Start(ex.traceCtx, "chronicle.store."+op,
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrStoreOp.String(op)))
	return sp
}

// endStoreSpan ends a store operation's span (nil: none), with its error.
func endStoreSpan(sp trace.Span, err error) {
	if sp == nil {
		return
	}
	if err != nil {
		// Not err's text: nothing a store says about itself (an
		// address, a URL) goes into a span.
		sp.SetStatus(codes.Error, "store operation failed")
	}
	sp.End()
}

// tracedStore is a traced turn's store: its run's finish is a child span
// of the exchange's. A wrapper, rather than a check in finish: finish and
// its callers run on the connection's goroutine, where every byte of
// their frames counts (docs/design.md, "Runtime mechanics"), and an
// untraced turn's store is the server's own.
type tracedStore struct {
	store.Store
	ex *exchange
}

func (s tracedStore) Finish(ctx context.Context, l store.Lease, f *store.Finish) error {
	sp := s.ex.storeSpan("finish_run")
	err := s.Store.Finish(ctx, l, f)
	endStoreSpan(sp, err)
	return err
}

// contentMessage is one message of gen_ai.input.messages and
// gen_ai.output.messages, in the GenAI semantic conventions' shape, with
// its visible text as one text part.
type contentMessage struct {
	Role         string        `json:"role"`
	Parts        []contentPart `json:"parts"`
	FinishReason string        `json:"finish_reason,omitempty"`
}

type contentPart struct {
	Type    string `json:"type"`
	Content string `json:"content"`
}

// capText cuts s to at most *budget bytes (at a rune boundary) and takes
// what it keeps from the budget.
func capText(s string, budget *int) string {
	if len(s) > *budget {
		cut := *budget
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	*budget -= len(s)
	return s
}

// inputMessages is gen_ai.input.messages for a generation request: the
// messages the client sent (not the stored history chronicle adds), their
// visible text within max bytes in all, the latest messages first kept
// when the budget runs out. "" when the body has no messages array.
func inputMessages(ad adapters.Adapter, body []byte, max int) string {
	var msgs []contentMessage
	if arr, ok := ad.Messages(body); ok {
		_ = ad.WalkMessages(arr, func(m adapters.Message) bool {
			msgs = append(msgs, contentMessage{Role: m.Role, Parts: []contentPart{{Type: "text", Content: messageText(ad, m.Raw)}}})
			return true
		})
	} else if in := gjson.GetBytes(body, "input"); ad.Format() == adapters.FormatOpenAIResponses && in.Type == gjson.String {
		msgs = []contentMessage{{Role: "user", Parts: []contentPart{{Type: "text", Content: in.Str}}}}
	}
	if len(msgs) == 0 {
		return ""
	}
	budget := max
	first := len(msgs)
	for i := len(msgs) - 1; i >= 0 && budget > 0; i-- {
		msgs[i].Parts[0].Content = capText(msgs[i].Parts[0].Content, &budget)
		first = i
	}
	b, _ := json.Marshal(msgs[first:])
	return string(b)
}

// outputMessages is gen_ai.output.messages for an answer: its visible text
// within max bytes, and its finish reason.
func outputMessages(ad adapters.Adapter, t adapters.Turn, max int) string {
	budget := max
	role := "assistant"
	if ad.Format() == adapters.FormatGemini {
		role = "model"
	}
	b, _ := json.Marshal([]contentMessage{{Role: role, FinishReason: t.FinishRaw,
		Parts: []contentPart{{Type: "text", Content: capText(ad.MessageText(t.Message), &budget)}}}})
	return string(b)
}

// messageText is one request message's visible text. A Responses input
// item is read here (its content a string or input_text parts): the
// adapter's MessageText reads an output array.
func messageText(ad adapters.Adapter, raw []byte) string {
	if ad.Format() != adapters.FormatOpenAIResponses {
		return ad.MessageText(raw)
	}
	c := gjson.GetBytes(raw, "content")
	if c.Type == gjson.String {
		return c.Str
	}
	var sb strings.Builder
	adapters.AppendPartsText(&sb, c, false)
	return sb.String()
}
