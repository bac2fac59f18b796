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

// TestWholeBodyCutShort: an upstream answer of known length that breaks
// off (50 of its bytes, then the connection closes) is a 502
// upstream_truncated in the provider's shape, never the fragment as a
// 200; the run ends failed and the thread gets no reply. Persisted on
// both stores, and not persisted.
func TestWholeBodyCutShort(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			p := startProxyWith(t, m, `
connections:
  - {name: kept, provider: openai, base_url: "${MOCK}"}
  - {name: plain, provider: openai, base_url: "${MOCK}", persist: false}
  - {name: gem, provider: gemini, base_url: "${MOCK}"}
`, b.open(t))
			for _, tc := range []struct{ conn, path, body, want string }{
				{"kept", "/v1/chat/completions", chatBody, `"code":"upstream_truncated"`},
				{"plain", "/v1/chat/completions", chatBody, `"code":"upstream_truncated"`},
				{"gem", "/v1beta/models/gemini-2.5-flash:generateContent", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`, `"reason":"UPSTREAM_TRUNCATED"`},
			} {
				thread := "t-cut-" + tc.conn
				resp, body := do(t, "POST", p.URL+"/"+tc.conn+tc.path, tc.body, "Authorization", "Bearer k", "X-Goog-Api-Key", "k",
					"X-Mock-Cut-After", "50", "X-Thread-Id", thread)
				if resp.StatusCode != 502 || !strings.Contains(string(body), tc.want) {
					t.Fatalf("%s: a body cut short answered %d %s", tc.conn, resp.StatusCode, body)
				}
				if tc.conn == "plain" {
					continue
				}
				th := apiThread(t, p, "k", thread)
				if r := th.Get("runs.0"); r.Get("status").String() != "failed" || r.Get("reason").String() != "upstream_truncated" {
					t.Fatalf("%s: run %s", tc.conn, r.Raw)
				}
				for _, msg := range th.Get("messages").Array() {
					if role := msg.Get("role").String(); role == "assistant" || role == "model" {
						t.Fatalf("%s: a reply landed from a body cut short: %s", tc.conn, th.Get("messages").Raw)
					}
				}
			}
		})
	}
}
