package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// TestThreadCacheChangesNothing runs one conversation through a proxy that
// keeps transcripts and one that does not, and expects the same upstream
// bodies, the same response headers and the same stored thread: restore
// of a dropped field, a regenerated answer, repair of a dangling call,
// append and continue turns, on both stores.
func TestThreadCacheChangesNothing(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			var runs [2][]string
			for i, cacheBytes := range []int{1 << 20, 0} {
				m := startMock(t)
				cfg := persistConfig + fmt.Sprintf("store: {thread_cache_bytes: %d}\n", cacheBytes)
				p := startProxyWith(t, m, cfg, b.open(t))
				runs[i] = conversation(t, p, &testMock{m})
				if cacheBytes > 0 {
					// Every turn after the first found its transcript kept.
					if hits, misses := p.threads.hits.Load(), p.threads.misses.Load(); hits != 9 || misses != 0 {
						t.Fatalf("thread cache: %d hits, %d misses; want 9, 0", hits, misses)
					}
				}
			}
			if len(runs[0]) != len(runs[1]) {
				t.Fatalf("%d steps with the cache, %d without", len(runs[0]), len(runs[1]))
			}
			for i := range runs[0] {
				if runs[0][i] != runs[1][i] {
					t.Errorf("step %d differs\nwith the cache:    %s\nwithout the cache: %s", i, runs[0][i], runs[1][i])
				}
			}
		})
	}
}

// conversation plays the turns and returns, per step, what the client and
// the upstream saw.
func conversation(t *testing.T, p *testProxy, m *testMock) []string {
	var steps []string
	url := p.URL + "/deepseek/chat/completions"
	hdr := []string{"Authorization", "Bearer k9", "X-Thread-Id", "t-cache"}
	turn := func(name, body, scenario string, extra ...string) gjson.Result {
		t.Helper()
		before := len(m.Requests())
		resp, out := do(t, "POST", url, body, append(append(hdr, "X-Mock-Scenario", scenario), extra...)...)
		upstream := "(not sent)"
		if reqs := m.Requests(); len(reqs) > before {
			upstream = string(reqs[len(reqs)-1].Body)
		}
		steps = append(steps, fmt.Sprintf("%s: %d repaired=%q restored=%q interrupted=%q upstream=%s",
			name, resp.StatusCode, resp.Header.Get("X-Repaired"), resp.Header.Get("X-Restored"), resp.Header.Get("X-Interrupted-Calls"), upstream))
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", name, resp.StatusCode, out)
		}
		return gjson.ParseBytes(out).Get("choices.0.message")
	}
	with := func(body string, msgs ...string) string {
		for _, msg := range msgs {
			body, _ = sjson.SetRaw(body, "messages.-1", msg)
		}
		return body
	}

	nonStream := func(body string) string {
		body, _ = sjson.Delete(body, "stream")
		body, _ = sjson.Delete(body, "stream_options")
		return body
	}
	first := nonStream(string(fixture(t, "deepseek/request.parallel-tools.json")))
	calls := turn("tool calls", first, "parallel-tools")
	// The client sends the results but drops reasoning_content.
	results := nonStream(string(fixture(t, "deepseek/request.tool-results.json")))
	results, _ = sjson.Delete(results, "messages.2.reasoning_content")
	answer := turn("results, reasoning dropped", results, "text")
	// The next question after the whole history; then the same request
	// twice more (regenerate).
	next := with(results, answer.Raw, `{"role":"user","content":"and tomorrow?"}`)
	for i := range 3 {
		turn(fmt.Sprintf("next question, take %d", i+1), next, "text")
	}
	// A history whose calls never got results: repair answers them.
	dangling := with(first, calls.Raw, `{"role":"user","content":"never mind"}`)
	turn("dangling calls", dangling, "text")
	turn("dangling calls again", dangling, "text")
	// Append mode, then continue.
	turn("append", `{"model":"deepseek-chat","messages":[{"role":"user","content":"one more"}]}`, "text", "X-Thread-Mode", "append")
	turn("continue", `{"model":"deepseek-chat","messages":[]}`, "text")
	// Back to replace with an edited first message.
	edited := strings.Replace(next, `"content":"`, `"content":"(edited) `, 1)
	turn("edited", edited, "text")

	th := apiThread(t, p, "k9", "t-cache")
	steps = append(steps, "stored: "+th.Get("messages").Raw)
	return steps
}
