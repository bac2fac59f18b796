package proxy

import (
	"strings"
	"testing"
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
