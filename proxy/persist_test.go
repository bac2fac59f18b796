package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/sse"
	"github.com/chronicle-proxy/chronicle/cmd/mockllm/mock"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"
)

const persistConfig = `
leases: {ttl: 3s}
connections:
  - {name: openai, provider: openai, base_url: "${MOCK}", read_only_tools: [get_weather]}
  - {name: deepseek, provider: deepseek, base_url: "${MOCK}"}
  - {name: gemini, provider: gemini, base_url: "${MOCK}"}
  - {name: plain, provider: openai, base_url: "${MOCK}", persist: false}
`

// apiThread fetches GET /api/threads/{id} as a gjson document.
func apiThread(t *testing.T, p *testProxy, key, thread string) gjson.Result {
	t.Helper()
	resp, body := do(t, "GET", p.URL+"/api/threads/"+thread, "", "Authorization", "Bearer "+key)
	if resp.StatusCode != 200 {
		t.Fatalf("GET thread: %d %s", resp.StatusCode, body)
	}
	return gjson.ParseBytes(body)
}

// assembledStream is what the adapter assembles from a fixture stream.
func assembledStream(t *testing.T, ad adapters.Adapter, sseBody []byte) []byte {
	t.Helper()
	asm := ad.NewAssembler()
	r := sse.NewReader(strings.NewReader(string(sseBody)), 0)
	for {
		ev, err := r.Next()
		if err != nil {
			break
		}
		if ev.Kind == sse.KindEvent && ev.HasData {
			_ = asm.Feed(ev.Data)
		}
	}
	return asm.Result().Message
}

func forEachBackend(t *testing.T, fn func(t *testing.T, p *testProxy, m *testMock)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			p := startProxyWith(t, m, persistConfig, b.open(t))
			fn(t, p, &testMock{m})
		})
	}
}

type testMock struct{ *mock.Server }

func TestReplaceTwoTurns(t *testing.T) {
	forEachBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		url := p.URL + "/openai/v1/chat/completions"
		turn1 := `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`
		resp, body := do(t, "POST", url, turn1, "Authorization", "Bearer k1", "X-Thread-Id", "t-replace")
		if resp.StatusCode != 200 || resp.Header.Get("X-Thread-Id") != "t-replace" || resp.Header.Get("X-Run-Id") == "" {
			t.Fatalf("turn 1: %d %v", resp.StatusCode, resp.Header)
		}
		reply1 := assembledStream(t, openAIAdapter, body)
		turn2, _ := sjson.SetRaw(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, "messages.-1", string(reply1))
		turn2, _ = sjson.SetRaw(turn2, "messages.-1", `{"role":"user","content":"again"}`)
		resp, body = do(t, "POST", url, turn2, "Authorization", "Bearer k1", "X-Thread-Id", "t-replace")
		if resp.StatusCode != 200 {
			t.Fatalf("turn 2: %d %s", resp.StatusCode, body)
		}
		reply2, err := openAIAdapter.ParseResponse(body)
		if err != nil {
			t.Fatal(err)
		}
		th := apiThread(t, p, "k1", "t-replace")
		msgs := th.Get("messages").Array()
		if len(msgs) != 4 {
			t.Fatalf("stored %d messages: %s", len(msgs), th.Raw)
		}
		if msgs[1].Raw != string(reply1) || msgs[3].Raw != string(reply2.Message) {
			t.Fatalf("assistant turns differ from what was assembled:\n%s\n%s\nstored:\n%s\n%s", reply1, reply2.Message, msgs[1].Raw, msgs[3].Raw)
		}
		if th.Get("format").String() != "openai-chat" || th.Get("connection").String() != "openai" {
			t.Fatalf("thread meta: %s", th.Raw)
		}
		runs := th.Get("runs").Array()
		if len(runs) != 2 || runs[0].Get("status").String() != "completed" || runs[1].Get("status").String() != "completed" {
			t.Fatalf("runs: %s", th.Get("runs").Raw)
		}
		for _, r := range runs {
			if !r.Get("usage").IsObject() || r.Get("usage.input_tokens").Int() == 0 {
				t.Fatalf("run without usage: %s", r.Raw)
			}
		}
		// The client did not ask for usage on the stream: it must not see
		// the usage chunk chronicle asked for.
		if strings.Contains(string(apiThreadStreamBody(t, p, turn1)), `"usage":{`) {
			t.Fatal("usage chunk added by chronicle reached the client")
		}
		// Another tenant does not see the thread.
		resp, _ = do(t, "GET", p.URL+"/api/threads/t-replace", "", "Authorization", "Bearer someone-else")
		if resp.StatusCode != 404 {
			t.Fatalf("another tenant read the thread: %d", resp.StatusCode)
		}
	})
}

func apiThreadStreamBody(t *testing.T, p *testProxy, body string) []byte {
	_, b := do(t, "POST", p.URL+"/openai/v1/chat/completions", body, "Authorization", "Bearer k1", "X-Thread-Id", "t-usage")
	return b
}

func TestAppendAndContinue(t *testing.T) {
	forEachBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		url := p.URL + "/openai/v1/chat/completions"
		auth := []string{"Authorization", "Bearer k2", "X-Thread-Id", "t-append", "X-Thread-Mode", "append"}
		do(t, "POST", url, `{"model":"gpt-4o","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"one"}]}`, auth...)
		m.Reset()
		resp, body := do(t, "POST", url, `{"model":"gpt-4o","messages":[{"role":"user","content":"two"}]}`, auth...)
		if resp.StatusCode != 200 {
			t.Fatalf("append: %d %s", resp.StatusCode, body)
		}
		sent := gjson.GetBytes(m.Requests()[0].Body, "messages").Array()
		if len(sent) != 4 || sent[0].Get("content").String() != "be brief" || sent[2].Get("role").String() != "assistant" || sent[3].Get("content").String() != "two" {
			t.Fatalf("upstream got %d messages: %s", len(sent), gjson.GetBytes(m.Requests()[0].Body, "messages").Raw)
		}
		m.Reset()
		resp, body = do(t, "POST", url, `{"model":"gpt-4o","messages":[]}`, auth...)
		if resp.StatusCode != 200 {
			t.Fatalf("continue: %d %s", resp.StatusCode, body)
		}
		if n := len(gjson.GetBytes(m.Requests()[0].Body, "messages").Array()); n != 5 {
			t.Fatalf("continue sent %d messages, want the 5 stored", n)
		}
		th := apiThread(t, p, "k2", "t-append")
		if n := len(th.Get("messages").Array()); n != 6 {
			t.Fatalf("thread has %d messages, want 6", n)
		}
		// Continuing a thread that does not exist is a 404 and creates nothing.
		resp, body = do(t, "POST", url, `{"model":"gpt-4o","messages":[]}`, "Authorization", "Bearer k2", "X-Thread-Id", "t-none")
		if resp.StatusCode != 404 || !strings.Contains(string(body), "thread_not_found") {
			t.Fatalf("continue unknown thread: %d %s", resp.StatusCode, body)
		}
	})
}

// TestRestorationDeepSeek: a client that drops reasoning_content from a
// tool-call turn gets the provider's 400 directly, and succeeds through
// chronicle, which restores it from the stored thread.
func TestRestorationDeepSeek(t *testing.T) {
	forEachBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		first := fixture(t, "deepseek/request.parallel-tools.json")
		followUp := fixture(t, "deepseek/request.tool-results.json")
		dropped, _ := sjson.DeleteBytes(followUp, "messages.2.reasoning_content")
		hdr := []string{"Authorization", "Bearer k3", "X-Thread-Id", "t-ds"}
		resp, body := do(t, "POST", p.URL+"/deepseek/chat/completions", string(first), append(hdr, "X-Mock-Scenario", "parallel-tools")...)
		if resp.StatusCode != 200 {
			t.Fatalf("turn 1: %d %s", resp.StatusCode, body)
		}
		th := apiThread(t, p, "k3", "t-ds")
		runs := th.Get("runs").Array()
		if runs[0].Get("status").String() != "interrupted" || len(runs[0].Get("interrupts").Array()) != 2 ||
			runs[0].Get("interrupts.0.status").String() != "pending" {
			t.Fatalf("tool-call turn did not park the run: %s", runs[0].Raw)
		}
		direct, dbody := do(t, "POST", m.URL()+"/chat/completions", string(dropped), "Authorization", "Bearer k3")
		if direct.StatusCode != 400 {
			t.Fatalf("the mock accepted a dropped reasoning_content directly: %d %s", direct.StatusCode, dbody)
		}
		resp, body = do(t, "POST", p.URL+"/deepseek/chat/completions", string(dropped), hdr...)
		if resp.StatusCode != 200 {
			t.Fatalf("through chronicle: %d %s", resp.StatusCode, body)
		}
		if resp.Header.Get("X-Restored") != "reasoning_content" {
			t.Fatalf("X-Restored = %q", resp.Header.Get("X-Restored"))
		}
		th = apiThread(t, p, "k3", "t-ds")
		runs = th.Get("runs").Array()
		if len(runs) != 2 || runs[0].Get("resumed_by").String() != runs[1].Get("id").String() ||
			runs[0].Get("interrupts.0.status").String() != "resolved" || runs[0].Get("interrupts.1.status").String() != "resolved" {
			t.Fatalf("parked run not resolved: %s", th.Get("runs").Raw)
		}
		if runs[1].Get("restored.0.field").String() != "reasoning_content" {
			t.Fatalf("run does not record the restoration: %s", runs[1].Raw)
		}
	})
}

// TestRestorationGemini: the same with Gemini's thoughtSignature.
func TestRestorationGemini(t *testing.T) {
	forEachBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		path := "/v1beta/models/gemini-3-flash-preview:generateContent"
		first := fixture(t, "gemini/request.parallel-tools.json")
		followUp := fixture(t, "gemini/request.tool-results.json")
		dropped, _ := sjson.DeleteBytes(followUp, "contents.1.parts.1.thoughtSignature")
		hdr := []string{"X-Goog-Api-Key", "k4", "X-Thread-Id", "t-gem"}
		resp, body := do(t, "POST", p.URL+"/gemini"+path, string(first), append(hdr, "X-Mock-Scenario", "parallel-tools")...)
		if resp.StatusCode != 200 {
			t.Fatalf("turn 1: %d %s", resp.StatusCode, body)
		}
		direct, dbody := do(t, "POST", m.URL()+path, string(dropped), "X-Goog-Api-Key", "k4")
		if direct.StatusCode != 400 {
			t.Fatalf("the mock accepted a dropped signature directly: %d %s", direct.StatusCode, dbody)
		}
		resp, body = do(t, "POST", p.URL+"/gemini"+path, string(dropped), hdr...)
		if resp.StatusCode != 200 {
			t.Fatalf("through chronicle: %d %s", resp.StatusCode, body)
		}
		if !strings.Contains(resp.Header.Get("X-Restored"), "thought_signature") {
			t.Fatalf("X-Restored = %q", resp.Header.Get("X-Restored"))
		}
	})
}

// TestGeminiSystemKept: a Gemini thread's systemInstruction is stored with
// it; an append or a continue that brings none gets the stored one
// upstream, a replace without one clears it, and a large one (which the
// Redis store keeps out of its scripts) round-trips the same way.
func TestGeminiSystemKept(t *testing.T) {
	forEachBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		url := p.URL + "/gemini/v1beta/models/gemini-2.5-flash:generateContent"
		for _, size := range []int{10, 300 << 10} {
			thread := "t-sys-" + strconv.Itoa(size)
			hdr := []string{"X-Goog-Api-Key", "k-sys", "X-Thread-Id", thread}
			sys := `{"parts":[{"text":"` + strings.Repeat("s", size) + `"}]}`
			user := `{"role":"user","parts":[{"text":"hi"}]}`
			sent := func(what string) gjson.Result {
				t.Helper()
				reqs := m.Requests()
				return gjson.GetBytes(reqs[len(reqs)-1].Body, "systemInstruction")
			}
			steps := []struct {
				what, body string
				mode       string
				wantSys    bool
			}{
				{"replace with a system", `{"systemInstruction":` + sys + `,"contents":[` + user + `]}`, "", true},
				{"append without one", `{"contents":[` + user + `]}`, "append", true},
				{"continue", `{"contents":[]}`, "", true},
				{"replace without one", `{"contents":[` + user + `]}`, "", false},
				{"append after the clear", `{"contents":[` + user + `]}`, "append", false},
			}
			for _, st := range steps {
				h := hdr
				if st.mode != "" {
					h = append(slices.Clone(hdr), "X-Thread-Mode", st.mode)
				}
				resp, body := do(t, "POST", url, st.body, h...)
				if resp.StatusCode != 200 {
					t.Fatalf("%d bytes, %s: %d %s", size, st.what, resp.StatusCode, body)
				}
				got := sent(st.what)
				if st.wantSys && got.Raw != sys || !st.wantSys && got.Exists() {
					t.Fatalf("%d bytes, %s: upstream got systemInstruction of %d bytes (want it: %v)", size, st.what, len(got.Raw), st.wantSys)
				}
			}
		}
	})
}

// TestRepairOnTheWayUp: a history with an unanswered call is repaired, so
// the strict upstream accepts it, and the headers say what changed.
func TestRepairOnTheWayUp(t *testing.T) {
	forEachBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		broken := `{"model":"gpt-4o","messages":[{"role":"user","content":"weather?"},
{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{}"}},{"id":"call_2","type":"function","function":{"name":"send_mail","arguments":"{}"}}]},
{"role":"user","content":"and now?"}]}`
		direct, _ := do(t, "POST", m.URL()+"/v1/chat/completions", broken, "Authorization", "Bearer k")
		if direct.StatusCode != 400 {
			t.Fatalf("mock accepted a broken history: %d", direct.StatusCode)
		}
		resp, body := do(t, "POST", p.URL+"/openai/v1/chat/completions", broken, "Authorization", "Bearer k5", "X-Thread-Id", "t-rep")
		if resp.StatusCode != 200 {
			t.Fatalf("repaired request: %d %s", resp.StatusCode, body)
		}
		if resp.Header.Get("X-Repaired") != "2" || resp.Header.Get("X-Interrupted-Calls") != "call_1,call_2" {
			t.Fatalf("headers: X-Repaired=%q X-Interrupted-Calls=%q", resp.Header.Get("X-Repaired"), resp.Header.Get("X-Interrupted-Calls"))
		}
		sent := gjson.GetBytes(m.Requests()[len(m.Requests())-1].Body, "messages")
		if !strings.Contains(sent.Get("2.content").String(), "changed nothing") || !strings.Contains(sent.Get("3.content").String(), "check its effect") {
			t.Fatalf("synthetic results: %s", sent.Raw)
		}
		run := apiThread(t, p, "k5", "t-rep").Get("runs.0")
		if len(run.Get("repairs").Array()) != 2 || run.Get("interrupted_calls.1.call_id").String() != "call_2" {
			t.Fatalf("run record: %s", run.Raw)
		}
	})
}

// TestSessionIDStable: the injected prompt_cache_key is the same on every
// turn of a thread, and a client's own value wins.
func TestSessionIDStable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		url := p.URL + "/openai/v1/chat/completions"
		body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
		do(t, "POST", url, body, "Authorization", "Bearer k6", "X-Thread-Id", "t-sid")
		do(t, "POST", url, body, "Authorization", "Bearer k6", "X-Thread-Id", "t-sid")
		do(t, "POST", url, `{"model":"gpt-4o","prompt_cache_key":"mine","messages":[{"role":"user","content":"hi"}]}`, "Authorization", "Bearer k6", "X-Thread-Id", "t-sid2")
		reqs := m.Requests()
		a, b := gjson.GetBytes(reqs[0].Body, "prompt_cache_key").String(), gjson.GetBytes(reqs[1].Body, "prompt_cache_key").String()
		if a == "" || a != b {
			t.Fatalf("session ids %q, %q", a, b)
		}
		if c := gjson.GetBytes(reqs[2].Body, "prompt_cache_key").String(); c != "mine" {
			t.Fatalf("client's own key replaced: %q", c)
		}
		if sid := apiThread(t, p, "k6", "t-sid").Get("runs.0.session_id").String(); sid != a {
			t.Fatalf("run records session id %q, upstream got %q", sid, a)
		}
	})
}

// TestThreadBusy: while a run streams on a thread, a second request on it
// gets 409 thread_busy with Retry-After, and nothing is lost.
func TestThreadBusy(t *testing.T) {
	forEachBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		url := p.URL + "/openai/v1/chat/completions"
		resp := send(t, "POST", url, `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			"Authorization", "Bearer k7", "X-Thread-Id", "t-busy", "X-Mock-Gate", "busy")
		r := bufio.NewReader(resp.Body)
		readEvent(t, r)
		second, body := do(t, "POST", url, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, "Authorization", "Bearer k7", "X-Thread-Id", "t-busy")
		if second.StatusCode != 409 || !strings.Contains(string(body), "thread_busy") || second.Header.Get("Retry-After") == "" {
			t.Fatalf("second request: %d %s %v", second.StatusCode, body, second.Header)
		}
		m.Release("busy")
		io.Copy(io.Discard, r)
		resp.Body.Close()
		third, body := do(t, "POST", url, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"x"},{"role":"user","content":"more"}]}`, "Authorization", "Bearer k7", "X-Thread-Id", "t-busy")
		if third.StatusCode != 200 {
			t.Fatalf("after the run ended: %d %s", third.StatusCode, body)
		}
		if n := len(apiThread(t, p, "k7", "t-busy").Get("runs").Array()); n != 2 {
			t.Fatalf("%d runs; the refused request must create none", n)
		}
	})
}

// TestConcurrentThreadRequests: many requests race for one thread; exactly
// the ones that got 200 have runs, every one of them completed.
func TestConcurrentThreadRequests(t *testing.T) {
	forEachBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		url := p.URL + "/openai/v1/chat/completions"
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[int]int{}
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, _ := do(t, "POST", url, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, "Authorization", "Bearer k8", "X-Thread-Id", "t-race")
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		if codes[200]+codes[409] != 8 || codes[200] == 0 {
			t.Fatalf("status counts %v", codes)
		}
		runs := apiThread(t, p, "k8", "t-race").Get("runs").Array()
		if len(runs) != codes[200] {
			t.Fatalf("%d runs for %d successes", len(runs), codes[200])
		}
		for _, r := range runs {
			if r.Get("status").String() != "completed" {
				t.Fatalf("run %s", r.Raw)
			}
		}
	})
}

// TestRunIDRetry: a retry with the same X-Run-Id is answered from the store
// (no second upstream call); the same id with another body is a conflict.
func TestRunIDRetry(t *testing.T) {
	forEachBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		url := p.URL + "/openai/v1/chat/completions"
		for _, stream := range []bool{false, true} {
			body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
			run := "r-nonstream"
			if stream {
				body = `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`
				run = "r-stream"
			}
			m.Reset()
			_, first := do(t, "POST", url, body, "Authorization", "Bearer k9", "X-Thread-Id", "t-retry-"+run, "X-Run-Id", run)
			resp, again := do(t, "POST", url, body, "Authorization", "Bearer k9", "X-Thread-Id", "t-retry-"+run, "X-Run-Id", run)
			if resp.StatusCode != 200 || string(first) != string(again) {
				t.Fatalf("retry (stream=%v): %d\nfirst: %s\nagain: %s", stream, resp.StatusCode, first, again)
			}
			if n := len(m.Requests()); n != 1 {
				t.Fatalf("retry reached the upstream: %d requests", n)
			}
			resp, body2 := do(t, "POST", url, `{"model":"gpt-4o","messages":[{"role":"user","content":"other"}]}`, "Authorization", "Bearer k9", "X-Thread-Id", "t-retry-"+run, "X-Run-Id", run)
			if resp.StatusCode != 409 || !strings.Contains(string(body2), "run_id_conflict") {
				t.Fatalf("reuse with another body: %d %s", resp.StatusCode, body2)
			}
		}
	})
}

// TestPersistOff: a persist:false connection stores nothing and adds no
// thread headers.
func TestPersistOff(t *testing.T) {
	forEachBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		resp, _ := do(t, "POST", p.URL+"/plain/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
			"Authorization", "Bearer k10", "X-Thread-Id", "t-plain")
		if resp.StatusCode != 200 || resp.Header.Get("X-Thread-Id") != "" {
			t.Fatalf("persist off: %d %v", resp.StatusCode, resp.Header)
		}
		if r, _ := do(t, "GET", p.URL+"/api/threads/t-plain", "", "Authorization", "Bearer k10"); r.StatusCode != 404 {
			t.Fatalf("persist:false stored a thread (%d)", r.StatusCode)
		}
	})
}

var _ = json.Valid

// TestInvalidJSONStoresNothing: a malformed body gets the provider's 400
// shape, reaches no upstream and leaves no run behind.
//
// The deeply nested body is 7 MB of '[' (under the 8 MiB body limit):
// gjson's validator recursed once per level and overflowed the goroutine
// stack on it, a fatal error that took the whole proxy down.
func TestInvalidJSONStoresNothing(t *testing.T) {
	deep := `{"model":"gpt-4o","messages":[{"role":"user","content":` + strings.Repeat("[", 7<<20) + `}]}`
	forEachBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		for _, tc := range []struct{ name, body string }{
			{"truncated", `{"model":"gpt-4o","messages":[{"role":`},
			{"nested too deep", deep},
			// The messages are fine; the rest is not JSON.
			{"broken outside messages", `{"messages":[{"role":"user","content":"hi"}],"model":}`},
			{"trailing bytes", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]} x`},
		} {
			tid := "t-bad-" + strings.ReplaceAll(tc.name, " ", "-")
			resp, body := do(t, "POST", p.URL+"/openai/v1/chat/completions", tc.body, "Authorization", "Bearer kj", "X-Thread-Id", tid)
			if resp.StatusCode != 400 || !strings.Contains(string(body), `"code":"invalid_json"`) {
				t.Fatalf("%s: %d %.300s", tc.name, resp.StatusCode, body)
			}
			if n := len(m.Requests()); n != 0 {
				t.Fatalf("%s: %d upstream requests", tc.name, n)
			}
			if r, _ := do(t, "GET", p.URL+"/api/threads/"+tid, "", "Authorization", "Bearer kj"); r.StatusCode != 404 {
				t.Fatalf("%s: a thread was stored for a malformed request (%d)", tc.name, r.StatusCode)
			}
		}
		// Passed through unparsed, the provider (the mock) refuses it too,
		// and the proxy is still up.
		resp, body := do(t, "POST", p.URL+"/plain/v1/chat/completions", deep, "Authorization", "Bearer kj")
		if resp.StatusCode != 400 {
			t.Fatalf("deep body passed through: %d %.300s", resp.StatusCode, body)
		}
		if resp, body := do(t, "POST", p.URL+"/openai/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
			"Authorization", "Bearer kj"); resp.StatusCode != 200 {
			t.Fatalf("after the deep bodies: %d %s", resp.StatusCode, body)
		}
	})
}

// TestAuditUpstreamBody: with audit.upstream_body the run keeps the exact
// body the provider received (after repair and session id), readable by
// an auditor; without it, nothing.
func TestAuditUpstreamBody(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			p := startProxyWith(t, m, `
admin: {token: admin-secret}
connections:
  - {name: audited, provider: openai, base_url: "${MOCK}", audit: {upstream_body: true}}
  - {name: plain, provider: openai, base_url: "${MOCK}"}
`, b.open(t))
			broken := `{"model":"gpt-4o","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"user","content":"y"}]}`
			for _, conn := range []string{"audited", "plain"} {
				resp, body := do(t, "POST", p.URL+"/"+conn+"/v1/chat/completions", broken, "Authorization", "Bearer ka", "X-Thread-Id", "t-audit-"+conn)
				if resp.StatusCode != 200 {
					t.Fatalf("%s: %d %s", conn, resp.StatusCode, body)
				}
				runID := resp.Header.Get("X-Run-Id")
				_, doc := do(t, "GET", p.URL+"/admin/threads/"+passThroughTenant([]byte("ka"))+"/t-audit-"+conn+"/runs/"+runID, "", "Authorization", "Bearer admin-secret")
				got := gjson.GetBytes(doc, "upstream_body")
				sent := m.Requests()[len(m.Requests())-1].Body
				if conn == "audited" && (got.Raw != string(sent) || !strings.Contains(got.Raw, "interrupted before it returned")) {
					t.Fatalf("upstream_body %s\nsent %s", got.Raw, sent)
				}
				if conn == "plain" && got.Type != gjson.Null {
					t.Fatalf("upstream body kept without audit.upstream_body: %s", got.Raw)
				}
			}
		})
	}
}

// TestLargeMessageAcrossReplicas: a message large enough for the Redis
// store to keep apart (a blob key) is stored by one replica and read back
// by another, which has nothing cached: appended to, continued, and
// listed by the thread API, byte for byte.
func TestLargeMessageAcrossReplicas(t *testing.T) {
	m := startMock(t)
	open := sharedRedis(t)
	a, b := startProxyWith(t, m, persistConfig, open()), startProxyWith(t, m, persistConfig, open())
	big := strings.Repeat("a long pasted document, ", 20000) // 480 KB
	auth := []string{"Authorization", "Bearer kb", "X-Thread-Id", "t-large", "X-Thread-Mode", "append"}
	if resp, body := do(t, "POST", a.URL+"/openai/v1/chat/completions",
		`{"model":"gpt-4o","messages":[{"role":"user","content":"`+big+`"}]}`, auth...); resp.StatusCode != 200 {
		t.Fatalf("first turn on a: %d %.300s", resp.StatusCode, body)
	}
	m.Reset()
	if resp, body := do(t, "POST", b.URL+"/openai/v1/chat/completions",
		`{"model":"gpt-4o","messages":[{"role":"user","content":"and a summary?"}]}`, auth...); resp.StatusCode != 200 {
		t.Fatalf("append on b: %d %.300s", resp.StatusCode, body)
	}
	sent := gjson.GetBytes(m.Requests()[0].Body, "messages").Array()
	if len(sent) != 3 || sent[0].Get("content").String() != big || sent[2].Get("content").String() != "and a summary?" {
		t.Fatalf("b sent %d messages upstream; the first is %d bytes", len(sent), len(sent[0].Get("content").String()))
	}
	th := apiThread(t, b, "kb", "t-large")
	if msgs := th.Get("messages").Array(); len(msgs) != 4 || msgs[0].Get("content").String() != big {
		t.Fatalf("thread API: %d messages", len(msgs))
	}
}

// TestLargeBodySpliced: a body too large to copy for the session id goes
// upstream in pieces (the request's bytes, the added members, its end).
// The provider receives exactly the body with the members added, on every
// attempt of a retried request, with the right Content-Length; the audit
// record holds the same bytes; a stream gets include_usage too.
func TestLargeBodySpliced(t *testing.T) {
	var mu sync.Mutex
	var got [][]byte
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &fasthttp.Server{MaxRequestBodySize: 64 << 20, Handler: func(ctx *fasthttp.RequestCtx) {
		mu.Lock()
		got = append(got, append([]byte(nil), ctx.PostBody()...))
		first := len(got)%2 == 1
		mu.Unlock()
		ctx.SetContentType("application/json")
		if first { // every request's first attempt fails
			ctx.SetStatusCode(503)
			ctx.SetBodyString(`{"error":{"message":"overloaded","type":"server_error","param":null,"code":null}}`)
			return
		}
		if gjson.GetBytes(ctx.PostBody(), "stream").Bool() {
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyString("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n" +
				"data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1,\"total_tokens\":2}}\n\ndata: [DONE]\n\n")
			return
		}
		ctx.SetBodyString(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}}
	go up.Serve(ln)
	t.Cleanup(func() { up.Shutdown() })

	p := startProxyWith(t, nil, `
admin: {token: admin-secret}
limits: {max_body_bytes: 33554432}
connections:
  - {name: big, provider: openai, base_url: "http://`+ln.Addr().String()+`", audit: {upstream_body: true}, retry: {max_attempts: 2, base_backoff: 1ms, max_backoff: 1ms}}
`, openEmbedded(t, t.TempDir()))
	big := strings.Repeat("a long pasted document, ", 100000) // 2.4 MB: past the pooled buffers
	tenant := passThroughTenant([]byte("kc"))
	for _, tc := range []struct{ name, body, added string }{
		{"chat", `{"model":"gpt-4o","messages":[{"role":"user","content":"` + big + `"}]}` + "\n",
			`,"prompt_cache_key":"%s"`},
		{"stream", `{ "stream": true, "messages":[{"role":"user","content":"` + big + `"}], "model":"gpt-4o" }`,
			`,"prompt_cache_key":"%s","stream_options":{"include_usage":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			got = nil
			mu.Unlock()
			thread := "t-spliced-" + tc.name
			resp, body := do(t, "POST", p.URL+"/big/v1/chat/completions", tc.body, "Authorization", "Bearer kc", "X-Thread-Id", thread)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %.300s", resp.StatusCode, body)
			}
			end := strings.LastIndexByte(tc.body, '}')
			want := tc.body[:end] + fmt.Sprintf(tc.added, threadSessionID(tenant, thread)) + tc.body[end:]
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 2 {
				t.Fatalf("the upstream got %d attempts, want 2", len(got))
			}
			for i, g := range got {
				if string(g) != want {
					t.Fatalf("attempt %d: the upstream got %d bytes ending %q, want %d ending %q", i+1, len(g), tail(g), len(want), tail([]byte(want)))
				}
			}
			// The admin API compacts the JSON it shows.
			var compact bytes.Buffer
			if err := json.Compact(&compact, []byte(want)); err != nil {
				t.Fatal(err)
			}
			_, doc := do(t, "GET", p.URL+"/admin/threads/"+tenant+"/"+thread+"/runs/"+resp.Header.Get("X-Run-Id"), "", "Authorization", "Bearer admin-secret")
			if audited := gjson.GetBytes(doc, "upstream_body").Raw; audited != compact.String() {
				t.Fatalf("audit record: %d bytes ending %q, want %d", len(audited), tail([]byte(audited)), compact.Len())
			}
		})
	}
}

func tail(b []byte) []byte { return b[max(0, len(b)-120):] }

// TestLargeBodyBuffersLent: large request bodies are read into buffers the
// proxy lends and takes back (largeBodyPool), and a buffer goes back only
// when nothing can read the body any more. A streamed turn's body stays
// its own while the stream is open, though other large requests come and
// go and reuse buffers meanwhile: its stored message is intact at the end.
func TestLargeBodyBuffersLent(t *testing.T) {
	m := startMock(t)
	p := startProxyWith(t, m, `
limits: {max_body_bytes: 33554432}
connections:
  - {name: openai, provider: openai, base_url: "${MOCK}"}
`, openEmbedded(t, t.TempDir()))
	url := p.URL + "/openai/v1/chat/completions"
	doc := func(stream bool, fill string) string {
		return fmt.Sprintf(`{"model":"gpt-4o","stream":%t,"messages":[{"role":"user","content":"%s"}]}`,
			stream, strings.Repeat(fill, 2<<20))
	}
	reusedBefore := p.largeBodies.Reused()

	// A stream held open after its first event, its body 2 MiB of "a".
	resp := send(t, "POST", url, doc(true, "a"), "Authorization", "Bearer k", "X-Thread-Id", "lent-stream", "X-Mock-Gate", "lent")
	r := bufio.NewReader(resp.Body)
	readEvent(t, r)
	// Meanwhile three non-stream turns of "b", "c", "d" take buffers and
	// give them back.
	for i, fill := range []string{"b", "c", "d"} {
		thread := fmt.Sprintf("lent-%d", i)
		resp, body := do(t, "POST", url, doc(false, fill), "Authorization", "Bearer k", "X-Thread-Id", thread)
		if resp.StatusCode != 200 {
			t.Fatalf("turn %s: %d %.200s", fill, resp.StatusCode, body)
		}
		if got := apiThread(t, p, "k", thread).Get("messages.0.content").String(); got != strings.Repeat(fill, 2<<20) {
			t.Fatalf("turn %s stored a first message of %d bytes starting %.20q", fill, len(got), got)
		}
	}
	if n := p.largeBodies.Reused() - reusedBefore; n < 2 {
		t.Fatalf("%d large bodies were read into a lent buffer that was used before, want at least 2", n)
	}
	m.Release("lent")
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	th := apiThread(t, p, "k", "lent-stream")
	if got := th.Get("messages.0.content").String(); got != strings.Repeat("a", 2<<20) {
		t.Fatalf("the streamed turn stored a first message of %d bytes starting %.20q", len(got), got)
	}
	if n := len(th.Get("messages").Array()); n != 2 {
		t.Fatalf("the streamed turn stored %d messages, want 2", n)
	}
	// The thread as the proxy keeps it (its cache took the turn at the
	// stream's end) goes upstream whole when the thread is continued.
	if resp, body := do(t, "POST", url, `{"model":"gpt-4o","messages":[]}`, "Authorization", "Bearer k", "X-Thread-Id", "lent-stream"); resp.StatusCode != 200 {
		t.Fatalf("continuing: %d %.200s", resp.StatusCode, body)
	}
	reqs := m.Requests()
	if got := gjson.GetBytes(reqs[len(reqs)-1].Body, "messages.0.content").String(); got != strings.Repeat("a", 2<<20) {
		t.Fatalf("continuing the streamed thread sent a first message of %d bytes starting %.20q", len(got), got)
	}
}
