package proxy

import (
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

const forkConfig = `
leases: {ttl: 3s}
connections:
  - {name: deepseek, provider: deepseek, base_url: "${MOCK}"}
  - {name: gemini, provider: gemini, base_url: "${MOCK}"}
  - {name: claude, provider: anthropic, base_url: "${MOCK}"}
`

// TestForkKeepsSignatures: a thread whose first turn ended in tool calls
// carrying reasoning fields (DeepSeek's reasoning_content, Gemini's
// thoughtSignature, Anthropic's thinking signature) is forked at that run
// through the tenant API; the fork holds the parent's messages byte for
// byte and records its parent and fork point, and its next turn, sent in
// append mode with only the tool results, is accepted by the strict mock
// (which refuses a history whose reasoning fields were lost or altered).
// The parent is left as it was.
func TestForkKeepsSignatures(t *testing.T) {
	cases := []struct {
		name, path, member, fixtureDir string
		auth                           []string
		end                            int // messages the parent holds after its first run
	}{
		{"deepseek", "/deepseek/chat/completions", "messages", "deepseek", []string{"Authorization", "Bearer k-fork"}, 3},
		{"gemini", "/gemini/v1beta/models/gemini-3-flash-preview:generateContent", "contents", "gemini", []string{"X-Goog-Api-Key", "k-fork"}, 2},
		{"anthropic", "/claude/v1/messages", "messages", "anthropic", []string{"x-api-key", "k-fork", "anthropic-version", "2023-06-01"}, 2},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			p := startProxyWith(t, m, forkConfig, b.open(t))
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					parent, child := "t-fork-"+c.name, "t-fork-"+c.name+"-child"
					first := fixture(t, c.fixtureDir+"/request.parallel-tools.json")
					resp, body := do(t, "POST", p.URL+c.path, string(first), hdrs(c.auth, "X-Thread-Id", parent, "X-Mock-Scenario", "parallel-tools")...)
					if resp.StatusCode != 200 {
						t.Fatalf("turn 1: %d %s", resp.StatusCode, body)
					}
					run := resp.Header.Get("X-Run-Id")
					pt := apiThreadAuth(t, p, c.auth, parent)
					if n := len(pt.Get("messages").Array()); n != c.end {
						t.Fatalf("parent holds %d messages, want %d", n, c.end)
					}

					resp, body = do(t, "POST", p.URL+"/api/threads/"+parent+"/fork", `{"at_run":"`+run+`","thread":"`+child+`"}`, c.auth...)
					if resp.StatusCode != 201 {
						t.Fatalf("fork: %d %s", resp.StatusCode, body)
					}
					doc := gjson.ParseBytes(body)
					if doc.Get("id").String() != child || doc.Get("parent").String() != parent ||
						doc.Get("fork_point.at_message").Int() != int64(c.end) || doc.Get("fork_point.at_run").String() != run ||
						doc.Get("messages").Raw != pt.Get("messages").Raw || doc.Get("format").String() != pt.Get("format").String() {
						t.Fatalf("fork document:\n%s\nparent:\n%s", body, pt.Raw)
					}

					// The fork's next turn: only the tool results, appended.
					results := fixture(t, c.fixtureDir+"/request.tool-results.json")
					all := gjson.GetBytes(results, c.member).Array()
					tail := "["
					for i, msg := range all[c.end:] {
						if i > 0 {
							tail += ","
						}
						tail += msg.Raw
					}
					next, _ := sjson.SetRawBytes(results, c.member, []byte(tail+"]"))
					resp, body = do(t, "POST", p.URL+c.path, string(next), hdrs(c.auth, "X-Thread-Id", child, "X-Thread-Mode", "append")...)
					if resp.StatusCode != 200 {
						t.Fatalf("the fork's next turn: %d %s", resp.StatusCode, body)
					}
					reqs := m.Requests()
					sent := gjson.GetBytes(reqs[len(reqs)-1].Body, c.member).Array()
					stored := pt.Get("messages").Array()
					if len(sent) != len(all) {
						t.Fatalf("upstream got %d messages, want %d", len(sent), len(all))
					}
					for i := 0; i < c.end; i++ {
						if sent[i].Raw != stored[i].Raw {
							t.Fatalf("upstream message %d differs from the parent's:\n%s\n%s", i, sent[i].Raw, stored[i].Raw)
						}
					}

					ft := apiThreadAuth(t, p, c.auth, child)
					runs := ft.Get("runs").Array()
					if ft.Get("parent").String() != parent || ft.Get("fork_point.at_run").String() != run ||
						len(runs) != 1 || runs[0].Get("status").String() != "completed" || len(ft.Get("messages").Array()) != len(all)+1 {
						t.Fatalf("the fork after its turn: %s", ft.Raw)
					}
					if after := apiThreadAuth(t, p, c.auth, parent); after.Get("messages").Raw != pt.Get("messages").Raw || len(after.Get("runs").Array()) != 1 || after.Get("parent").Type != gjson.Null {
						t.Fatalf("the parent changed: %s", after.Raw)
					}
				})
			}
		})
	}
}

// TestForkRequests: what the fork route answers to a body it cannot use,
// and a fork at a message count with a generated id.
func TestForkRequests(t *testing.T) {
	forEachBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		url := p.URL + "/openai/v1/chat/completions"
		auth := []string{"Authorization", "Bearer k-forkreq"}
		resp, body := do(t, "POST", url, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, hdrs(auth, "X-Thread-Id", "t-fr")...)
		if resp.StatusCode != 200 {
			t.Fatalf("turn: %d %s", resp.StatusCode, body)
		}
		for _, c := range []struct{ body, code string }{
			{`{"at_message":3}`, "invalid_fork_point"},
			{`{"at_message":0}`, "invalid_fork_point"},
			{`{"at_message":1.5}`, "invalid_fork_point"},
			{`{"at_message":"1"}`, "invalid_fork_point"},
			{`{}`, "invalid_fork_point"},
			{`{"at_message":1,"at_run":"r"}`, "invalid_fork_point"},
			{`{"at_run":"no-such-run"}`, "invalid_fork_point"},
			{`{"at_run":"bad id"}`, "invalid_run_id"},
			{`{"at_message":1,"thread":"bad id"}`, "invalid_thread_id"},
			{`{"at_message":1,"thread":"t-fr"}`, "thread_exists"},
			{`[1]`, "invalid_json"},
			{``, "invalid_json"},
		} {
			resp, body := do(t, "POST", p.URL+"/api/threads/t-fr/fork", c.body, auth...)
			if got := gjson.GetBytes(body, "error.code").String(); got != c.code || resp.StatusCode/100 != 4 {
				t.Errorf("%s: %d %s, want %s", c.body, resp.StatusCode, body, c.code)
			}
		}
		resp, body = do(t, "POST", p.URL+"/api/threads/t-fr/fork", `{"at_message":1}`, auth...)
		doc := gjson.ParseBytes(body)
		id := doc.Get("id").String()
		if resp.StatusCode != 201 || len(id) < 4 || id[:3] != "th-" || len(doc.Get("messages").Array()) != 1 ||
			doc.Get("fork_point.at_message").Int() != 1 || doc.Get("fork_point.at_run").Type != gjson.Null {
			t.Fatalf("fork at_message 1: %d %s", resp.StatusCode, body)
		}
		// Another tenant's thread is not found, as for a read.
		if resp, body := do(t, "POST", p.URL+"/api/threads/t-fr/fork", `{"at_message":1}`, "Authorization", "Bearer k-other"); resp.StatusCode != 404 {
			t.Fatalf("another tenant's fork: %d %s", resp.StatusCode, body)
		}
	})
}

// apiThreadAuth is apiThread with any credential headers.
func apiThreadAuth(t *testing.T, p *testProxy, auth []string, thread string) gjson.Result {
	t.Helper()
	resp, body := do(t, "GET", p.URL+"/api/threads/"+thread, "", auth...)
	if resp.StatusCode != 200 {
		t.Fatalf("GET thread %s: %d %s", thread, resp.StatusCode, body)
	}
	return gjson.ParseBytes(body)
}
