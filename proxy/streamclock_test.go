package proxy

import (
	"strings"
	"testing"
)

// TestStreamOutlivesFirstByte: timeouts.first_byte bounds only the wait
// for the response head. A stream that goes on for several times
// first_byte, with every gap shorter than timeouts.idle, arrives whole,
// with nothing after its end: persisted, not persisted and detached.
func TestStreamOutlivesFirstByte(t *testing.T) {
	m := startMock(t)
	st := openEmbedded(t, t.TempDir())
	p := startProxyWith(t, m, `
connections:
  - {name: kept, provider: openai, base_url: "${MOCK}", timeouts: {first_byte: 150ms, idle: 30s, total: 60s}}
  - {name: plain, provider: openai, base_url: "${MOCK}", persist: false, timeouts: {first_byte: 150ms, idle: 30s, total: 60s}}
  - {name: detached, provider: openai, base_url: "${MOCK}", on_disconnect: detach, timeouts: {first_byte: 150ms, idle: 30s, total: 60s}}
`, st)
	for _, conn := range []string{"kept", "plain", "detached"} {
		t.Run(conn, func(t *testing.T) {
			thread := "t-long-" + conn
			// 8 chunks 100 ms apart: the stream lasts about five times
			// first_byte.
			resp, body := do(t, "POST", p.URL+"/"+conn+"/v1/chat/completions", streamBody, "Authorization", "Bearer k",
				"X-Mock-Scenario", "synthetic", "X-Mock-Chunks", "8", "X-Mock-Chunk-Delay", "100ms", "X-Thread-Id", thread)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if strings.Contains(string(body), `"error"`) || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
				t.Fatalf("the stream did not arrive whole, or something followed its end:\n%s", body)
			}
			if conn == "plain" {
				return
			}
			run := apiThread(t, p, "k", thread).Get("runs.0")
			if run.Get("status").String() != "completed" {
				t.Fatalf("run %s", run.Raw)
			}
		})
	}
}
