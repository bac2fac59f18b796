package proxy

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

const tracesConfig = `
connections:
  - {name: openai, provider: openai, base_url: "${MOCK}"}
  - {name: gemini, provider: gemini, base_url: "${MOCK}"}
`

// The client's trace context in the traced tests.
const (
	clientTraceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID   = "00f067aa0ba902b7"
	clientParent   = "00-" + clientTraceID + "-" + clientSpanID + "-01"
	traceClientKey = "sk-trace-secret-0123456789"
)

// startTracedProxy is a proxy with an embedded store whose spans go to an
// in-memory exporter (synchronously: a span is exported when it ends).
func startTracedProxy(t *testing.T, yamlCfg string) (*testProxy, *testMock, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	m := startMock(t)
	p := startProxyOpts(t, m, yamlCfg, Options{Store: openEmbedded(t, t.TempDir()), TracerProvider: tp})
	return p, &testMock{m}, exp
}

// spanNamed is the one exported span of that name.
func spanNamed(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		var names []string
		for _, s := range spans {
			names = append(names, s.Name)
		}
		t.Fatalf("%d spans named %q; all: %v", len(found), name, names)
	}
	return found[0]
}

func attrsOf(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	out := make(map[attribute.Key]attribute.Value, len(s.Attributes))
	for _, kv := range s.Attributes {
		out[kv.Key] = kv.Value
	}
	return out
}

// noSecretIn fails if any attribute of any span carries the client's key.
func noSecretIn(t *testing.T, spans tracetest.SpanStubs) {
	t.Helper()
	for _, s := range spans {
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.Emit(), traceClientKey) || strings.Contains(kv.Value.Emit(), "Bearer") {
				t.Errorf("span %q attribute %s carries a credential: %q", s.Name, kv.Key, kv.Value.Emit())
			}
		}
		if strings.Contains(s.Status.Description, traceClientKey) {
			t.Errorf("span %q status carries a credential", s.Name)
		}
	}
}

// TestTracesChatTurn: a non-stream and a stream chat turn each make one
// server span, the child of the client's traceparent, with the GenAI
// attributes and chronicle's, store start and finish as its children; the
// upstream request carries the span's context; no credential is in any
// attribute, and the thread id only when thread_id is on.
func TestTracesChatTurn(t *testing.T) {
	for _, tt := range []struct {
		name   string
		stream bool
	}{{"non-stream", false}, {"stream", true}} {
		t.Run(tt.name, func(t *testing.T) {
			p, m, exp := startTracedProxy(t, tracesConfig)
			body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
			if tt.stream {
				body = `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`
			}
			resp, got := do(t, "POST", p.URL+"/openai/v1/chat/completions", body,
				"Authorization", "Bearer "+traceClientKey, "X-Thread-Id", "t-traced", "traceparent", clientParent, "tracestate", "vendor=abc")
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, got)
			}
			spans := exp.GetSpans()
			srv := spanNamed(t, spans, "chat gpt-4o")
			if srv.SpanKind != trace.SpanKindServer {
				t.Errorf("span kind %v, want server", srv.SpanKind)
			}
			if srv.SpanContext.TraceID().String() != clientTraceID || srv.Parent.SpanID().String() != clientSpanID || !srv.Parent.IsRemote() {
				t.Errorf("parent %v of trace %v, want the client's %s/%s", srv.Parent.SpanID(), srv.SpanContext.TraceID(), clientTraceID, clientSpanID)
			}
			if ts := srv.SpanContext.TraceState().Get("vendor"); ts != "abc" {
				t.Errorf("tracestate vendor=%q, want the client's abc", ts)
			}
			a := attrsOf(srv)
			wantStr := map[attribute.Key]string{
				"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o",
				"chronicle.connection": "openai", "chronicle.run.id": resp.Header.Get("X-Run-Id"),
			}
			for k, v := range wantStr {
				if a[k].AsString() != v {
					t.Errorf("%s = %q, want %q", k, a[k].AsString(), v)
				}
			}
			for _, k := range []attribute.Key{"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"} {
				if v, ok := a[k]; !ok || v.AsInt64() <= 0 {
					t.Errorf("%s = %v (present %v), want a positive count", k, v.AsInt64(), ok)
				}
			}
			if fr := a["gen_ai.response.finish_reasons"].AsStringSlice(); len(fr) != 1 || fr[0] != "stop" {
				t.Errorf("finish reasons %v, want [stop]", fr)
			}
			if v, ok := a["chronicle.repairs"]; !ok || v.AsInt64() != 0 {
				t.Errorf("chronicle.repairs = %v (present %v), want 0", v.AsInt64(), ok)
			}
			if v, ok := a["chronicle.restored_fields"]; !ok || v.AsInt64() != 0 {
				t.Errorf("chronicle.restored_fields = %v (present %v), want 0", v.AsInt64(), ok)
			}
			if a["http.response.status_code"].AsInt64() != 200 {
				t.Errorf("status code attribute %v", a["http.response.status_code"].AsInt64())
			}
			if _, ok := a["chronicle.thread.id"]; ok {
				t.Errorf("chronicle.thread.id is set without thread_id: true")
			}
			if _, ok := a["chronicle.queue_wait_ms"]; ok {
				t.Errorf("chronicle.queue_wait_ms is set on a connection without a gate")
			}
			for _, name := range []string{"chronicle.store.start_run", "chronicle.store.finish_run"} {
				c := spanNamed(t, spans, name)
				if c.Parent.SpanID() != srv.SpanContext.SpanID() || c.SpanContext.TraceID() != srv.SpanContext.TraceID() {
					t.Errorf("%s is not a child of the server span", name)
				}
			}
			noSecretIn(t, spans)

			reqs := m.Requests()
			up := reqs[len(reqs)-1].Header
			want := "00-" + clientTraceID + "-" + srv.SpanContext.SpanID().String() + "-01"
			if tp := up.Values("Traceparent"); len(tp) != 1 || tp[0] != want {
				t.Errorf("upstream traceparent %q, want %q (the server span's)", tp, want)
			}
			if ts := up.Get("Tracestate"); ts != "vendor=abc" {
				t.Errorf("upstream tracestate %q, want vendor=abc", ts)
			}
		})
	}
}

// TestTracesCounts: the span counts repairs and a gate's queue wait, and
// carries the thread id once thread_id is on.
func TestTracesCounts(t *testing.T) {
	p, _, exp := startTracedProxy(t, `
telemetry: {traces: {thread_id: true}}
connections:
  - {name: openai, provider: openai, base_url: "${MOCK}", max_concurrent: 2}
`)
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"weather?"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},` +
		`{"role":"user","content":"well?"}]}`
	resp, got := do(t, "POST", p.URL+"/openai/v1/chat/completions", body, "Authorization", "Bearer "+traceClientKey, "X-Thread-Id", "t-counted")
	if resp.StatusCode != 200 || resp.Header.Get("X-Repaired") == "" {
		t.Fatalf("status %d, X-Repaired %q: %s", resp.StatusCode, resp.Header.Get("X-Repaired"), got)
	}
	spans := exp.GetSpans()
	a := attrsOf(spanNamed(t, spans, "chat gpt-4o"))
	if n := a["chronicle.repairs"].AsInt64(); n < 1 || resp.Header.Get("X-Repaired") != a["chronicle.repairs"].Emit() {
		t.Errorf("chronicle.repairs = %d, X-Repaired %q", n, resp.Header.Get("X-Repaired"))
	}
	if v, ok := a["chronicle.queue_wait_ms"]; !ok || v.AsFloat64() < 0 {
		t.Errorf("chronicle.queue_wait_ms = %v (present %v)", v.AsFloat64(), ok)
	}
	if a["chronicle.thread.id"].AsString() != "t-counted" {
		t.Errorf("chronicle.thread.id = %q, want t-counted", a["chronicle.thread.id"].AsString())
	}
	noSecretIn(t, spans)
}

// TestTracesGemini: a Gemini stream is generate_content on gcp.gemini,
// and a request without a traceparent starts a trace of its own.
func TestTracesGemini(t *testing.T) {
	p, m, exp := startTracedProxy(t, tracesConfig)
	resp := send(t, "POST", p.URL+"/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
		`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`, "X-Goog-Api-Key", traceClientKey)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	spans := exp.GetSpans()
	srv := spanNamed(t, spans, "generate_content gemini-2.5-flash")
	a := attrsOf(srv)
	if a["gen_ai.operation.name"].AsString() != "generate_content" || a["gen_ai.provider.name"].AsString() != "gcp.gemini" {
		t.Errorf("attributes %v", srv.Attributes)
	}
	if srv.Parent.IsValid() {
		t.Errorf("a request without traceparent has parent %v", srv.Parent.SpanID())
	}
	reqs := m.Requests()
	if tp := reqs[len(reqs)-1].Header.Get("Traceparent"); !strings.Contains(tp, srv.SpanContext.SpanID().String()) {
		t.Errorf("upstream traceparent %q, want the server span's", tp)
	}
	noSecretIn(t, spans)
}

// TestTracesOff: without a tracer provider no span is made (not even on
// the global provider) and no trace context is added upstream; a client's
// own traceparent passes through as any header does.
func TestTracesOff(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev); _ = tp.Shutdown(t.Context()) })
	m := startMock(t)
	p := startProxyWith(t, m, tracesConfig, openEmbedded(t, t.TempDir()))
	if p.tracing != nil {
		t.Fatal("tracing is on without a tracer provider")
	}
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	if resp, got := do(t, "POST", p.URL+"/openai/v1/chat/completions", body, "Authorization", "Bearer "+traceClientKey); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	reqs := m.Requests()
	if h := reqs[len(reqs)-1].Header; h.Get("Traceparent") != "" || h.Get("Tracestate") != "" {
		t.Errorf("trace context added upstream with traces off: %q %q", h.Get("Traceparent"), h.Get("Tracestate"))
	}
	if resp, got := do(t, "POST", p.URL+"/openai/v1/chat/completions", body, "Authorization", "Bearer "+traceClientKey, "traceparent", clientParent); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	reqs = m.Requests()
	if got := reqs[len(reqs)-1].Header.Get("Traceparent"); got != clientParent {
		t.Errorf("the client's traceparent upstream is %q, want it unchanged %q", got, clientParent)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Errorf("%d spans with traces off", n)
	}
}

// finishFails is a store whose run finishes all fail as unreachable.
type finishFails struct{ store.Store }

func (finishFails) Finish(context.Context, store.Lease, *store.Finish) error {
	return store.ErrUnavailable
}

// TestTracesTurnNotStored: a turn whose finish could not be stored is an
// error span (store_unavailable), its finish_run child too, though the
// upstream answered 200.
func TestTracesTurnNotStored(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	m := startMock(t)
	p := startProxyOpts(t, m, tracesConfig, Options{Store: finishFails{openEmbedded(t, t.TempDir())}, TracerProvider: tp})
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	if resp, got := do(t, "POST", p.URL+"/openai/v1/chat/completions", body, "Authorization", "Bearer "+traceClientKey); resp.StatusCode != 503 {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	spans := exp.GetSpans()
	srv := spanNamed(t, spans, "chat gpt-4o")
	if a := attrsOf(srv); a["error.type"].AsString() != "store_unavailable" || srv.Status.Code != codes.Error {
		t.Errorf("error.type %q, status %v", a["error.type"].AsString(), srv.Status)
	}
	if fin := spanNamed(t, spans, "chronicle.store.finish_run"); fin.Status.Code != codes.Error || fin.Status.Description != "store operation failed" {
		t.Errorf("finish_run status %v", fin.Status)
	}
	noSecretIn(t, spans)
}

// TestTracesSampledOut: a caller that sampled its trace out gets no span
// exported, and the upstream still receives the trace context, unsampled.
func TestTracesSampledOut(t *testing.T) {
	p, m, exp := startTracedProxy(t, tracesConfig)
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	unsampled := "00-" + clientTraceID + "-" + clientSpanID + "-00"
	if resp, got := do(t, "POST", p.URL+"/openai/v1/chat/completions", body, "Authorization", "Bearer "+traceClientKey, "traceparent", unsampled); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Errorf("%d spans exported for a trace its caller sampled out", n)
	}
	reqs := m.Requests()
	if tp := reqs[len(reqs)-1].Header.Get("Traceparent"); !strings.HasPrefix(tp, "00-"+clientTraceID+"-") || !strings.HasSuffix(tp, "-00") {
		t.Errorf("upstream traceparent %q, want the client's trace, unsampled", tp)
	}
}

// TestTracesResponseModel: the span carries gen_ai.response.model, the
// model the answer names (the mock serves the fixtures', which differ from
// the request's), in each format, streamed and whole; persistence off, so
// the answer is read for the span alone.
func TestTracesResponseModel(t *testing.T) {
	p, _, exp := startTracedProxy(t, `
connections:
  - {name: openai, provider: openai, base_url: "${MOCK}", persist: false}
  - {name: gemini, provider: gemini, base_url: "${MOCK}", persist: false}
  - {name: claude, provider: anthropic, base_url: "${MOCK}", persist: false}
`)
	oa := []string{"Authorization", "Bearer " + traceClientKey}
	for _, tc := range []struct {
		name, path, body, span, want string
		headers                      []string
	}{
		{"chat", "/openai/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
			"chat gpt-4o", "gpt-4.1-nano-2025-04-14", oa},
		{"chat stream", "/openai/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			"chat gpt-4o-mini", "gpt-4.1-nano-2025-04-14", oa},
		{"responses", "/openai/v1/responses", `{"model":"gpt-5","input":"hi"}`,
			"chat gpt-5", "gpt-5.1-codex-max", oa},
		{"responses stream", "/openai/v1/responses", `{"model":"gpt-5-mini","stream":true,"input":"hi"}`,
			"chat gpt-5-mini", "gpt-5.1-codex-max", oa},
		{"gemini", "/gemini/v1beta/models/gemini-2.5-pro:generateContent", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
			"generate_content gemini-2.5-pro", "gemini-3-pro-preview", []string{"X-Goog-Api-Key", traceClientKey}},
		{"gemini stream", "/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
			"generate_content gemini-2.5-flash", "gemini-3-pro-preview", []string{"X-Goog-Api-Key", traceClientKey}},
		{"gemini array stream", "/gemini/v1beta/models/gemini-2.0-flash:streamGenerateContent", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
			"generate_content gemini-2.0-flash", "gemini-3-pro-preview", []string{"X-Goog-Api-Key", traceClientKey}},
		{"anthropic", "/claude/v1/messages", `{"model":"claude-x","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`,
			"chat claude-x", "claude-sonnet-4-5-20250929", anthropicHeaders("", "X-Mock-Scenario", "text")},
		{"anthropic stream", "/claude/v1/messages", `{"model":"claude-y","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			"chat claude-y", "claude-sonnet-4-5-20250929", anthropicHeaders("", "X-Mock-Scenario", "text")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, got := do(t, "POST", p.URL+tc.path, tc.body, tc.headers...)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, got)
			}
			if a := attrsOf(spanNamed(t, exp.GetSpans(), tc.span)); a["gen_ai.response.model"].AsString() != tc.want {
				t.Errorf("gen_ai.response.model = %q, want %q", a["gen_ai.response.model"].AsString(), tc.want)
			}
		})
	}
}

// TestTracesContent: with telemetry.traces.content the span carries the
// messages the client sent and the answer's text as the GenAI
// conventions' message JSON, cut to content_max_bytes of text (the latest
// messages kept first); without it, neither. No credential either way.
func TestTracesContent(t *testing.T) {
	long := strings.Repeat("é", 40) // 80 bytes
	body := `{"model":"gpt-4o","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"` + long + `"}]}`
	fixture := gjson.GetBytes(fixture(t, "openai-chat/text.json"), "choices.0.message.content").String()
	for _, on := range []bool{false, true} {
		cfg := tracesConfig
		if on {
			cfg = "telemetry: {traces: {content: true, content_max_bytes: 64}}\n" + tracesConfig
		}
		p, _, exp := startTracedProxy(t, cfg)
		resp, got := do(t, "POST", p.URL+"/openai/v1/chat/completions", body, "Authorization", "Bearer "+traceClientKey)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, got)
		}
		spans := exp.GetSpans()
		a := attrsOf(spanNamed(t, spans, "chat gpt-4o"))
		noSecretIn(t, spans)
		in, hasIn := a["gen_ai.input.messages"]
		out, hasOut := a["gen_ai.output.messages"]
		if !on {
			if hasIn || hasOut {
				t.Errorf("content off, yet the span has %q and %q", in.AsString(), out.AsString())
			}
			continue
		}
		// 64 bytes of text: the user's 80 cut to 32 runes; the system
		// message before it does not fit.
		wantIn := `[{"role":"user","parts":[{"type":"text","content":"` + strings.Repeat("é", 32) + `"}]}]`
		if in.AsString() != wantIn {
			t.Errorf("gen_ai.input.messages = %s, want %s", in.AsString(), wantIn)
		}
		cut := fixture[:64]
		for !utf8.ValidString(cut) {
			cut = cut[:len(cut)-1]
		}
		wantOut, _ := json.Marshal([]map[string]any{{"role": "assistant", "finish_reason": "stop",
			"parts": []map[string]string{{"type": "text", "content": cut}}}})
		if !jsonEqual(t, []byte(out.AsString()), wantOut) {
			t.Errorf("gen_ai.output.messages = %s, want %s", out.AsString(), wantOut)
		}
	}
}

// TestTracesContentFormats: gen_ai.input.messages reads each format's
// request messages: Gemini contents, Anthropic content blocks, Responses
// input items and a Responses input string.
func TestTracesContentFormats(t *testing.T) {
	p, _, exp := startTracedProxy(t, "telemetry: {traces: {content: true}}\n"+`
connections:
  - {name: openai, provider: openai, base_url: "${MOCK}", persist: false}
  - {name: gemini, provider: gemini, base_url: "${MOCK}", persist: false}
  - {name: claude, provider: anthropic, base_url: "${MOCK}", persist: false}
`)
	oa := []string{"Authorization", "Bearer " + traceClientKey}
	for _, tc := range []struct {
		name, path, body, span, want string
		headers                      []string
	}{
		{"gemini", "/gemini/v1beta/models/gemini-2.5-pro:generateContent", `{"contents":[{"role":"user","parts":[{"text":"hello g"}]}]}`,
			"generate_content gemini-2.5-pro", `[{"role":"user","parts":[{"type":"text","content":"hello g"}]}]`, []string{"X-Goog-Api-Key", traceClientKey}},
		{"anthropic", "/claude/v1/messages", `{"model":"claude-x","max_tokens":64,"messages":[{"role":"user","content":[{"type":"text","text":"hello a"}]}]}`,
			"chat claude-x", `[{"role":"user","parts":[{"type":"text","content":"hello a"}]}]`, anthropicHeaders("", "X-Mock-Scenario", "text")},
		{"responses items", "/openai/v1/responses", `{"model":"gpt-5","input":[{"role":"user","content":"hello r"},{"type":"message","role":"user","content":[{"type":"input_text","text":"hello s"}]}]}`,
			"chat gpt-5", `[{"role":"user","parts":[{"type":"text","content":"hello r"}]},{"role":"user","parts":[{"type":"text","content":"hello s"}]}]`, oa},
		{"responses string", "/openai/v1/responses", `{"model":"gpt-5-mini","input":"hello t"}`,
			"chat gpt-5-mini", `[{"role":"user","parts":[{"type":"text","content":"hello t"}]}]`, oa},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, got := do(t, "POST", p.URL+tc.path, tc.body, tc.headers...)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, got)
			}
			a := attrsOf(spanNamed(t, exp.GetSpans(), tc.span))
			if in := a["gen_ai.input.messages"].AsString(); in != tc.want {
				t.Errorf("gen_ai.input.messages = %s, want %s", in, tc.want)
			}
			if out := a["gen_ai.output.messages"].AsString(); !strings.Contains(out, `"parts":[{"type":"text","content":"`) || strings.Contains(out, `"content":""`) {
				t.Errorf("gen_ai.output.messages = %s, want the answer's text", out)
			}
		})
	}
}
