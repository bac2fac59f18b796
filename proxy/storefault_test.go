package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store/embedded"
	"github.com/chronicle-proxy/chronicle/store/redistest"
	"github.com/chronicle-proxy/chronicle/store/spool"
)

// TestUnstoredTurnIsNotAcknowledged: when Redis dies while the upstream
// answers, and the turn can be kept nowhere (no spool), no client reads a
// clean end. A stream ends with a store_unavailable error event where
// [DONE] would have been; a non-stream answer is a 503 under
// on_store_error: fail, and goes out marked X-Persisted: false under pass.
func TestUnstoredTurnIsNotAcknowledged(t *testing.T) {
	t.Run("redis", unstoredOnRedis)
	t.Run("embedded", unstoredOnEmbedded)
}

// unstoredOnEmbedded: the embedded store failing under a turn (its
// database closed: every write an I/O error) gets the same answer as a
// Redis that died.
func unstoredOnEmbedded(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream %v", stream), func(t *testing.T) {
			st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			m := startMock(t)
			p := startProxyWith(t, m, `
connections:
  - {name: strict, provider: openai, base_url: "${MOCK}", on_store_error: fail}
`, st)
			body := chatBody
			if stream {
				body = streamBody
			}
			sent := make(chan *http.Response, 1)
			go func() {
				sent <- send(t, "POST", p.URL+"/strict/v1/chat/completions", body, "Authorization", "Bearer k", "X-Thread-Id", "t-io", "X-Mock-Gate", "io")
			}()
			var resp *http.Response
			var br *bufio.Reader
			if stream {
				resp = <-sent
				br = bufio.NewReader(resp.Body)
				readEvent(t, br)
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := m.WaitGated(ctx, "io", 1); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			m.Release("io")
			if !stream {
				resp = <-sent
				br = bufio.NewReader(resp.Body)
			}
			defer resp.Body.Close()
			rest, err := io.ReadAll(br)
			if err != nil {
				t.Fatal(err)
			}
			if stream && (strings.Contains(string(rest), "[DONE]") || !strings.Contains(string(rest), `"code":"store_unavailable"`)) ||
				!stream && (resp.StatusCode != 503 || !strings.Contains(string(rest), `"code":"store_unavailable"`)) {
				t.Fatalf("a turn the embedded store could not write: %d\n%s", resp.StatusCode, rest)
			}
		})
	}
}

func unstoredOnRedis(t *testing.T) {
	cases := []struct {
		name, conn string
		stream     bool
	}{
		{"stream fail", "strict", true},
		{"stream pass", "lenient", true},
		{"non-stream fail", "strict", false},
		{"non-stream pass", "lenient", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rd := redistest.Start(t)
			st := openRedis(t, rd.URL())
			m := startMock(t)
			p := startProxyWith(t, m, `
connections:
  - {name: strict, provider: openai, base_url: "${MOCK}", on_store_error: fail}
  - {name: lenient, provider: openai, base_url: "${MOCK}", on_store_error: pass}
`, st)
			body := chatBody
			if tc.stream {
				body = streamBody
			}
			// The request goes out on its own goroutine: a non-stream
			// answer's head comes only once the upstream answered.
			sent := make(chan *http.Response, 1)
			go func() {
				sent <- send(t, "POST", p.URL+"/"+tc.conn+"/v1/chat/completions", body, "Authorization", "Bearer k",
					"X-Thread-Id", "t-fault", "X-Mock-Gate", "g")
			}()
			var resp *http.Response
			var br *bufio.Reader
			if tc.stream {
				// Once the first event is out, the run and its pending
				// turn were written.
				resp = <-sent
				br = bufio.NewReader(resp.Body)
				readEvent(t, br)
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := m.WaitGated(ctx, "g", 1); err != nil {
					t.Fatal(err)
				}
			}
			rd.Kill()
			m.Release("g")
			if !tc.stream {
				resp = <-sent
				br = bufio.NewReader(resp.Body)
			}
			defer resp.Body.Close()
			rest, err := io.ReadAll(br)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.stream:
				if strings.Contains(string(rest), "[DONE]") || !strings.Contains(string(rest), `"code":"store_unavailable"`) {
					t.Fatalf("an unstored stream must end with store_unavailable and no [DONE]:\n%s", rest)
				}
			case tc.conn == "strict":
				if resp.StatusCode != 503 || !strings.Contains(string(rest), `"code":"store_unavailable"`) {
					t.Fatalf("fail: want 503 store_unavailable, got %d %s", resp.StatusCode, rest)
				}
			default:
				if resp.StatusCode != 200 || resp.Header.Get("X-Persisted") != "false" {
					t.Fatalf("pass: want 200 with X-Persisted: false, got %d %q", resp.StatusCode, resp.Header.Get("X-Persisted"))
				}
			}
			_, metrics := do(t, "GET", p.URL+"/metrics", "")
			if !strings.Contains(string(metrics), "chronicle_turns_acknowledged_not_stored_total 0") ||
				!strings.Contains(string(metrics), "chronicle_turns_not_stored_total 1") && tc.conn == "strict" {
				t.Fatalf("store-fault counts:\n%s", grepLines(string(metrics), "chronicle_turns_"))
			}
		})
	}
}

// TestStoreDownAtStart: with the store down when a request arrives and
// on_store_error: pass, a request that carries the whole conversation is
// forwarded and, with the spool, kept (no X-Persisted: false; the turn is
// in the store once it is back); one that needs the stored history
// (append, an empty continue) gets a 503 rather than an answer to a
// conversation the client never had.
func TestStoreDownAtStart(t *testing.T) {
	rd := redistest.Start(t, "--appendonly", "yes")
	backend := openRedis(t, rd.URL())
	sp, err := spool.Open(backend, spool.Options{Dir: t.TempDir(), RetryMin: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	m := startMock(t)
	p := startProxyWith(t, m, `
connections:
  - {name: lenient, provider: openai, base_url: "${MOCK}", on_store_error: pass}
`, sp)
	rd.Kill()
	url := p.URL + "/lenient/v1/chat/completions"
	for _, tc := range []struct {
		name, body string
		headers    []string
	}{
		{"append", chatBody, []string{"X-Thread-Mode", "append"}},
		{"continue", `{"model":"gpt-4o","messages":[]}`, nil},
	} {
		resp, body := do(t, "POST", url, tc.body, append([]string{"Authorization", "Bearer k", "X-Thread-Id", "t-" + tc.name}, tc.headers...)...)
		if resp.StatusCode != 503 || !strings.Contains(string(body), `"code":"store_unavailable"`) {
			t.Fatalf("%s with the store down: %d %s", tc.name, resp.StatusCode, body)
		}
	}
	for _, tc := range []struct{ thread, body string }{{"t-chat", chatBody}, {"t-stream", streamBody}} {
		resp, body := do(t, "POST", url, tc.body, "Authorization", "Bearer k", "X-Thread-Id", tc.thread)
		if resp.StatusCode != 200 || resp.Header.Get("X-Persisted") == "false" || strings.Contains(string(body), `"error"`) {
			t.Fatalf("%s with the store down: %d X-Persisted=%q %s", tc.thread, resp.StatusCode, resp.Header.Get("X-Persisted"), body)
		}
	}
	rd.Restart(t)
	ctx := context.Background()
	waitFor(t, "the spool to drain", func() bool { return sp.Flush(ctx) == 0 })
	for _, thread := range []string{"t-chat", "t-stream"} {
		th := apiThread(t, p, "k", thread)
		if n := len(th.Get("messages").Array()); n != 2 || th.Get("runs.0.status").String() != "completed" {
			t.Fatalf("%s after the store came back: %d messages, runs %s", thread, n, th.Get("runs").Raw)
		}
	}
}

// TestGeminiArrayEndHeldBack: a Gemini stream without alt=sse (one JSON
// array) sends its closing bracket only once the turn is recorded. With
// the store up, the client gets the upstream's bytes exactly; when the
// turn can be kept nowhere, the array never closes, so the client's
// parser finds it cut short rather than whole.
func TestGeminiArrayEndHeldBack(t *testing.T) {
	const path = "/g/v1beta/models/gemini-2.5-flash:streamGenerateContent"
	const body = `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`
	rd := redistest.Start(t)
	st := openRedis(t, rd.URL())
	m := startMock(t)
	p := startProxyWith(t, m, `
connections:
  - {name: g, provider: gemini, base_url: "${MOCK}"}
`, st)
	resp, got := do(t, "POST", p.URL+path, body, "X-Goog-Api-Key", "k", "X-Thread-Id", "t-array")
	direct, want := do(t, "POST", m.URL()+path[2:], body, "X-Goog-Api-Key", "k")
	if resp.StatusCode != 200 || direct.StatusCode != 200 || string(got) != string(want) {
		t.Fatalf("through chronicle %d, %d bytes; direct %d, %d bytes:\n%s", resp.StatusCode, len(got), direct.StatusCode, len(want), got)
	}

	sent := make(chan *http.Response, 1)
	go func() {
		sent <- send(t, "POST", p.URL+path, body, "X-Goog-Api-Key", "k", "X-Thread-Id", "t-array-2", "X-Mock-Gate", "ga")
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.WaitGated(ctx, "ga", 1); err != nil {
		t.Fatal(err)
	}
	resp = <-sent
	rd.Kill()
	m.Release("ga")
	rest, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if trimmed := strings.TrimSpace(string(rest)); strings.HasSuffix(trimmed, "]") {
		t.Fatalf("an array whose turn is stored nowhere closed cleanly:\n%s", rest)
	}
}
