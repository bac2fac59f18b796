package proxy

import (
	"bufio"
	"io"
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/store/redistest"
	"github.com/tidwall/gjson"
)

// TestStoreUnavailable: with the store down, on_store_error: fail answers
// 503 store_unavailable and sends nothing upstream; pass forwards and marks
// the answer X-Persisted: false; /readyz reports the store.
func TestStoreUnavailable(t *testing.T) {
	rd := redistest.Start(t)
	st := openRedis(t, rd.URL())
	m := startMock(t)
	p := startProxyWith(t, m, `
connections:
  - {name: strict, provider: openai, base_url: "${MOCK}", on_store_error: fail}
  - {name: lenient, provider: openai, base_url: "${MOCK}", on_store_error: pass}
`, st)
	if resp, body := do(t, "POST", p.URL+"/strict/v1/chat/completions", chatBody, "Authorization", "Bearer k"); resp.StatusCode != 200 {
		t.Fatalf("with the store up: %d %s", resp.StatusCode, body)
	}
	rd.Kill()
	m.Reset()
	resp, body := do(t, "POST", p.URL+"/strict/v1/chat/completions", chatBody, "Authorization", "Bearer k")
	if resp.StatusCode != 503 || !strings.Contains(string(body), `"code":"store_unavailable"`) || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("fail: %d %s", resp.StatusCode, body)
	}
	if n := len(m.Requests()); n != 0 {
		t.Fatalf("on_store_error: fail sent %d requests upstream", n)
	}
	resp, body = do(t, "POST", p.URL+"/lenient/v1/chat/completions", chatBody, "Authorization", "Bearer k")
	if resp.StatusCode != 200 || resp.Header.Get("X-Persisted") != "false" {
		t.Fatalf("pass: %d X-Persisted=%q %s", resp.StatusCode, resp.Header.Get("X-Persisted"), body)
	}
	if resp, _ := do(t, "GET", p.URL+"/readyz", ""); resp.StatusCode != 503 {
		t.Fatalf("readyz with the store down: %d", resp.StatusCode)
	}
	_, metrics := do(t, "GET", p.URL+"/metrics", "")
	if !strings.Contains(string(metrics), "chronicle_unpersisted_requests_total 1") {
		t.Fatal("the pass-through is not counted")
	}
	// Both requests' starts failed, and the metrics say so.
	if !strings.Contains(string(metrics), `chronicle_store_errors_total{op="start_run"} 2`) {
		t.Fatalf("the failed starts are not counted:\n%s", grepLines(string(metrics), "chronicle_store_errors_total"))
	}
}

// TestPartialSnapshots: with snapshot_streaming, a run in flight shows its
// text so far as "partial", and the transcript holds no half turn.
func TestPartialSnapshots(t *testing.T) {
	m := startMock(t)
	p := startProxyWith(t, m, `
connections:
  - {name: snap, provider: openai, base_url: "${MOCK}", snapshot_streaming: true, snapshot_interval: 100ms}
`, openEmbedded(t, t.TempDir()))
	resp := send(t, "POST", p.URL+"/snap/v1/chat/completions", streamBody, "Authorization", "Bearer k",
		"X-Thread-Id", "t-snap", "X-Mock-Scenario", "synthetic", "X-Mock-Chunks", "400", "X-Mock-Chunk-Delay", "10ms")
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	readEvent(t, r)
	var partial string
	waitFor(t, "a partial snapshot", func() bool {
		_, b := do(t, "GET", p.URL+"/api/threads/t-snap/runs/active", "", "Authorization", "Bearer k")
		partial = gjson.GetBytes(b, "partial").String()
		return partial != ""
	})
	th := apiThread(t, p, "k", "t-snap")
	if n := len(th.Get("messages").Array()); n != 1 {
		t.Fatalf("a half turn reached the transcript: %d messages", n)
	}
	io.Copy(io.Discard, r)
	th = apiThread(t, p, "k", "t-snap")
	reply := th.Get("messages.1.content").String()
	if !strings.HasPrefix(reply, partial) || len(reply) <= len(partial) {
		t.Fatalf("partial %q is not a prefix of the reply %q", partial, reply)
	}
}
