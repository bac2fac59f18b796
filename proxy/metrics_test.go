package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
)

// TestMetrics: /metrics serves Prometheus text with the request, token,
// run and store series, and no thread or tenant ids in any label.
func TestMetrics(t *testing.T) {
	m := startMock(t)
	p := startProxyWith(t, m, persistConfig, openEmbedded(t, t.TempDir()))
	do(t, "POST", p.URL+"/openai/v1/chat/completions", chatBody, "Authorization", "Bearer metrics-key", "X-Thread-Id", "t-metrics-secret")
	do(t, "POST", p.URL+"/openai/v1/chat/completions", streamBody, "Authorization", "Bearer metrics-key", "X-Thread-Id", "t-metrics-secret")
	resp, body := do(t, "GET", p.URL+"/metrics", "")
	if resp.StatusCode != 200 {
		t.Fatalf("metrics: %d", resp.StatusCode)
	}
	text := string(body)
	for _, want := range []string{
		`chronicle_requests_total{connection="openai",route="generate",status="200"} 1`,
		`chronicle_requests_total{connection="openai",route="stream",status="200"} 1`,
		`chronicle_tokens_total{connection="openai",kind="input",model="gpt-4o"}`,
		`chronicle_runs_total{status="completed"} 2`,
		`chronicle_store_operation_seconds_count{op="finish"} 2`,
		`chronicle_gate_queue_depth{connection="openai"} 0`,
		`chronicle_stream_events_total`,
		`chronicle_event_log_lag_seconds_count`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(text, "t-metrics-secret") || strings.Contains(text, "metrics-key") || strings.Contains(text, passThroughTenant([]byte("metrics-key"))) {
		t.Fatal("a thread id, tenant or key appears in the metrics")
	}
}

// scrape returns the proxy's /metrics text.
func scrape(t *testing.T, p *testProxy) string {
	t.Helper()
	resp, body := do(t, "GET", p.URL+"/metrics", "")
	if resp.StatusCode != 200 {
		t.Fatalf("metrics: %d", resp.StatusCode)
	}
	return string(body)
}

// TestMetricsFromTheStart is issue 33's item 12: counters with known label
// values are there, at 0, before their first event; the request duration
// has its status label; the upstream's time to first byte, the streams in
// flight and the build are exposed.
func TestMetricsFromTheStart(t *testing.T) {
	m := startMock(t)
	p := startProxyWith(t, m, persistConfig, openEmbedded(t, t.TempDir()))
	text := scrape(t, p)
	for _, want := range []string{
		`chronicle_rejections_total{connection="openai",reason="queue_full"} 0`,
		`chronicle_rejections_total{connection="gemini",reason="rate_limited"} 0`,
		`chronicle_rejections_total{connection="plain",reason="client_gone"} 0`,
		`chronicle_store_errors_total{op="finish"} 0`,
		`chronicle_store_errors_total{op="start_run"} 0`,
		`chronicle_store_operation_seconds_count{op="append_events"} 0`,
		`chronicle_runs_total{status="failed"} 0`,
		`chronicle_runs_total{status="interrupted"} 0`,
		`chronicle_streams_in_flight{connection="openai"} 0`,
		`chronicle_upstream_ttfb_seconds_count{connection="deepseek"} 0`,
		`chronicle_build_info{goversion="` + runtime.Version() + `",version="` + Version + `"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("before any request, metrics lack %s", want)
		}
	}
	do(t, "POST", p.URL+"/openai/v1/chat/completions", chatBody, "Authorization", "Bearer k")
	do(t, "POST", p.URL+"/openai/v1/chat/completions", streamBody, "Authorization", "Bearer k")
	text = scrape(t, p)
	for _, want := range []string{
		`chronicle_request_duration_seconds_count{connection="openai",route="generate",status="200"} 1`,
		`chronicle_request_duration_seconds_count{connection="openai",route="stream",status="200"} 1`,
		`chronicle_upstream_ttfb_seconds_count{connection="openai"} 2`,
		`chronicle_streams_in_flight{connection="openai"} 0`,
		`chronicle_runs_total{status="completed"} 2`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("after two turns, metrics lack %s", want)
		}
	}
}

// TestStreamsInFlight: the gauge counts a stream while it is relayed, and
// not once it ended.
func TestStreamsInFlight(t *testing.T) {
	up, release := heldStreamUpstream(t)
	p := startProxy(t, nil, "connections:\n  - {name: up, provider: openai, base_url: \""+up+"\"}\n")
	resp := send(t, "POST", p.URL+"/up/v1/chat/completions", streamBody, "Authorization", "Bearer k")
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	readEvent(t, r) // the first event is here: the stream is open
	if text := scrape(t, p); !strings.Contains(text, `chronicle_streams_in_flight{connection="up"} 1`) {
		t.Errorf("during the stream: %s", grepLines(text, "chronicle_streams_in_flight"))
	}
	release()
	if _, err := io.ReadAll(r); err != nil {
		t.Fatal(err)
	}
	if text := scrape(t, p); !strings.Contains(text, `chronicle_streams_in_flight{connection="up"} 0`) {
		t.Errorf("after the stream: %s", grepLines(text, "chronicle_streams_in_flight"))
	}
}

// TestModelLabelsBounded: a client picks the model string, so a
// connection's model labels are its first maxModelLabels well-formed model
// names; every other name counts as "other".
func TestModelLabelsBounded(t *testing.T) {
	m := newServerMetrics()
	m.registerConnections([]string{"a", "b"})
	for i := range 3 * maxModelLabels {
		m.observeTokens("a", fmt.Sprintf("model-%d", i), 10, 1, 0, 0)
	}
	m.observeTokens("a", "model-0", 5, 0, 0, 0) // a model already labelled keeps its label
	for _, odd := range []string{strings.Repeat("x", maxModelLabelLen+1), "gpt 4o", `a"b`, "", "é"} {
		m.observeTokens("b", odd, 1, 0, 0, 0)
	}
	m.observeTokens("b", "models/gemini-2.5-flash", 1, 0, 0, 0)
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	models := map[string]map[string]float64{} // connection → model → input tokens
	for _, f := range families {
		if f.GetName() != "chronicle_tokens_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			l := map[string]string{}
			for _, lp := range s.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["kind"] != "input" {
				continue
			}
			if models[l["connection"]] == nil {
				models[l["connection"]] = map[string]float64{}
			}
			models[l["connection"]][l["model"]] = s.GetCounter().GetValue()
		}
	}
	if n := len(models["a"]); n != maxModelLabels+1 {
		t.Errorf("connection a has %d model labels, want %d and other", n, maxModelLabels)
	}
	if models["a"]["model-0"] != 15 || models["a"]["other"] != float64(10*2*maxModelLabels) {
		t.Errorf("connection a: model-0 %v, other %v", models["a"]["model-0"], models["a"]["other"])
	}
	if len(models["b"]) != 2 || models["b"]["other"] != 5 || models["b"]["models/gemini-2.5-flash"] != 1 {
		t.Errorf("connection b: %v", models["b"])
	}
}

// TestMetricsHotPathAllocs: recording a request, its tokens, a store call,
// a rejection, a stream and an upstream head allocates nothing once the
// series exist (they are resolved, not looked up by label values).
func TestMetricsHotPathAllocs(t *testing.T) {
	m := newServerMetrics()
	m.registerConnections([]string{"openai"})
	start := time.Now()
	deadline := start.Add(time.Minute)
	down := errors.New("down")
	record := func() {
		m.observeRequest("openai", "stream", 200, time.Millisecond)
		m.observeRequest("", "api", 404, time.Millisecond)
		m.observeTokens("openai", "gpt-4o", 10, 5, 2, 1)
		m.observeStore("finish", start, nil)
		m.observeStore("start_run", start, down)
		m.rejected("openai", "queue_full")
		m.streamOpened("openai")
		m.streamClosed("openai")
		m.observeTTFB("openai", time.Minute, deadline)
		m.runs(store.Completed)
	}
	record() // first use of the request and model series
	if n := testing.AllocsPerRun(200, record); n != 0 {
		t.Fatalf("the metrics hot path allocates %.1f times per request", n)
	}
}
