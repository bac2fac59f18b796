package proxy

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/store/spool"
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

// TestGenAIMetrics: the GenAI semantic-convention series beside
// chronicle's own, with the values real turns give them: the token usage
// the upstream reported (the fixture's 16 input and 300 output tokens, in
// the recommended buckets), a request duration per turn with the error
// type of the failed one, and time to first token (at least the upstream's
// 50ms first-byte delay) and per output token for the successful stream
// only.
func TestGenAIMetrics(t *testing.T) {
	m := startMock(t)
	p := startProxyWith(t, m, persistConfig, openEmbedded(t, t.TempDir()))
	do(t, "POST", p.URL+"/openai/v1/chat/completions", chatBody, "Authorization", "Bearer k")
	do(t, "POST", p.URL+"/openai/v1/chat/completions", streamBody, "Authorization", "Bearer k", "X-Mock-First-Byte-Delay", "50ms")
	do(t, "POST", p.URL+"/openai/v1/chat/completions", chatBody, "Authorization", "Bearer k", "X-Mock-Status", "503")
	text := scrape(t, p)
	const l = `connection="openai",gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="gpt-4o"`
	for _, want := range []string{
		`gen_ai_client_token_usage_bucket{` + l + `,gen_ai_token_type="input",le="4"} 0`,
		`gen_ai_client_token_usage_bucket{` + l + `,gen_ai_token_type="input",le="16"} 2`,
		`gen_ai_client_token_usage_sum{` + l + `,gen_ai_token_type="input"} 32`,
		`gen_ai_client_token_usage_bucket{` + l + `,gen_ai_token_type="output",le="256"} 0`,
		`gen_ai_client_token_usage_bucket{` + l + `,gen_ai_token_type="output",le="1024"} 2`,
		`gen_ai_client_token_usage_sum{` + l + `,gen_ai_token_type="output"} 600`,
		`gen_ai_server_request_duration_seconds_count{connection="openai",error_type="",gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="gpt-4o"} 2`,
		`gen_ai_server_request_duration_seconds_count{connection="openai",error_type="503",gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="gpt-4o"} 1`,
		`gen_ai_server_time_to_first_token_seconds_bucket{` + l + `,le="0.04"} 0`,
		`gen_ai_server_time_to_first_token_seconds_count{` + l + `} 1`,
		`gen_ai_server_time_per_output_token_seconds_count{` + l + `} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Log(grepLines(text, "gen_ai_"))
	}
}

// TestMetricsPromtool pipes a real /metrics scrape, after turns of every
// kind the series record (generate, stream, a failure, a rejection-free
// chronicle API call), through `promtool check metrics`: the exposition
// must be clean (HELP and TYPE, names, units, counters ending _total).
// Without promtool (Debian's prometheus package; scripts/setup installs
// it) the test skips, except under CI=true where it fails.
func TestMetricsPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not found on PATH; CI=true requires it (scripts/setup: apt-get install prometheus)")
		}
		t.Skip("promtool not found on PATH (apt-get install prometheus)")
	}
	// A spooled store, so the spool's series are in the scrape too.
	sp, err := spool.Open(openEmbedded(t, t.TempDir()), spool.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	m := startMock(t)
	p := startProxyWith(t, m, persistConfig, sp)
	do(t, "POST", p.URL+"/openai/v1/chat/completions", chatBody, "Authorization", "Bearer k")
	do(t, "POST", p.URL+"/openai/v1/chat/completions", streamBody, "Authorization", "Bearer k")
	do(t, "POST", p.URL+"/openai/v1/chat/completions", chatBody, "Authorization", "Bearer k", "X-Mock-Status", "503")
	do(t, "GET", p.URL+"/api/threads/none", "", "Authorization", "Bearer k")
	text := scrape(t, p)
	for _, want := range []string{"gen_ai_server_time_to_first_token_seconds_count", "chronicle_spool_entries", "chronicle_thread_cache_bytes"} {
		if !strings.Contains(text, want) {
			t.Fatalf("the scrape lacks %s", want)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}
