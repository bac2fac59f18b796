package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/embedded"
	redisstore "github.com/chronicle-proxy/chronicle/store/redis"
	"github.com/chronicle-proxy/chronicle/store/redistest"
	"github.com/tidwall/gjson"
)

// Tests of the HTTP contract's corners (issue 33): what a client sees when
// its request is malformed, fails upstream on a thread's first turn,
// retries a run in flight or lost, or sends too large a body.

// TestBodyNotAnObject: a body that is JSON but not an object, or whose
// history member is not an array, is refused with 400 bad_request in the
// caller's shape, worded for its format; nothing goes upstream and no
// thread or run is made. A body without the member still continues a
// stored thread (404 thread_not_found when there is none).
func TestBodyNotAnObject(t *testing.T) {
	cases := []struct {
		name, path, body, member string
		auth                     []string
	}{
		{"chat-array", "/openai/v1/chat/completions", `[1,2]`, `"messages"`, []string{"Authorization", "Bearer k-shape"}},
		{"chat-string", "/openai/v1/chat/completions", `"hi"`, `"messages"`, []string{"Authorization", "Bearer k-shape"}},
		{"chat-number", "/openai/v1/chat/completions", `42`, `"messages"`, []string{"Authorization", "Bearer k-shape"}},
		{"chat-messages-string", "/openai/v1/chat/completions", `{"model":"gpt-4o","messages":"hi"}`, `"messages"`, []string{"Authorization", "Bearer k-shape"}},
		{"deepseek-messages-object", "/deepseek/chat/completions", `{"model":"deepseek-chat","messages":{}}`, `"messages"`, []string{"Authorization", "Bearer k-shape"}},
		{"gemini-array", "/gemini/v1beta/models/gemini-2.5-flash:generateContent", `[]`, `"contents"`, []string{"X-Goog-Api-Key", "k-shape"}},
		{"gemini-contents-string", "/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", `{"contents":"hi"}`, `"contents"`, []string{"X-Goog-Api-Key", "k-shape"}},
		{"responses-number", "/openai/v1/responses", `{"model":"gpt-4o","input":42}`, `"input"`, []string{"Authorization", "Bearer k-shape"}},
		{"responses-array", "/openai/v1/responses", `[{"model":"gpt-4o"}]`, `"input"`, []string{"Authorization", "Bearer k-shape"}},
	}
	forEachBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		for _, c := range cases {
			thread := "t-shape-" + c.name
			resp, body := do(t, "POST", p.URL+c.path, c.body, hdrs(c.auth, "X-Thread-Id", thread)...)
			if resp.StatusCode != 400 {
				t.Fatalf("%s: %d %s, want 400 bad_request", c.name, resp.StatusCode, body)
			}
			e := gjson.ParseBytes(body)
			if strings.HasPrefix(c.name, "gemini") {
				if e.Get("error.code").Int() != 400 || e.Get("error.status").String() != "INVALID_ARGUMENT" || e.Get("error.details.0.reason").String() != "BAD_REQUEST" {
					t.Fatalf("%s: not Gemini's shape: %s", c.name, body)
				}
			} else if e.Get("error.code").String() != "bad_request" || e.Get("error.type").String() != "invalid_request_error" {
				t.Fatalf("%s: not OpenAI's shape: %s", c.name, body)
			}
			if msg := e.Get("error.message").String(); !strings.Contains(msg, c.member) || strings.Contains(msg, "X-Thread-Id") {
				t.Fatalf("%s: message %q does not name %s", c.name, msg, c.member)
			}
			if r, b := do(t, "GET", p.URL+"/api/threads/"+thread, "", c.auth...); r.StatusCode != 404 {
				t.Fatalf("%s: a refused request left a thread: %d %s", c.name, r.StatusCode, b)
			}
		}
		if n := len(m.Requests()); n != 0 {
			t.Fatalf("%d refused requests reached the upstream", n)
		}
		// A body without a history continues a stored thread: none here.
		resp, body := do(t, "POST", p.URL+"/openai/v1/chat/completions", `{"model":"gpt-4o"}`, "Authorization", "Bearer k-shape", "X-Thread-Id", "t-shape-none")
		if resp.StatusCode != 404 || gjson.GetBytes(body, "error.code").String() != "thread_not_found" {
			t.Fatalf("a body without messages: %d %s, want 404 thread_not_found", resp.StatusCode, body)
		}
	})
}

// TestMissingModel: OpenAI chat completions and the Responses API want a
// model in the body; a persisted request without one gets the provider's
// own 400, byte for byte, without a run or an upstream call. DeepSeek's
// and Gemini's requests are not judged (Gemini names the model in the
// path).
func TestMissingModel(t *testing.T) {
	forEachBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		cases := []struct{ name, path, body, want string }{
			{"chat", "/openai/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`,
				`{"error":{"message":"you must provide a model parameter","type":"invalid_request_error","param":null,"code":null}}`},
			{"chat-stream", "/openai/v1/chat/completions", `{"model":"","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
				`{"error":{"message":"you must provide a model parameter","type":"invalid_request_error","param":null,"code":null}}`},
			{"responses", "/openai/v1/responses", `{"input":"hi"}`,
				`{"error":{"message":"Missing required parameter: 'model'.","type":"invalid_request_error","param":"model","code":"missing_required_parameter"}}`},
		}
		for _, c := range cases {
			thread := "t-model-" + c.name
			resp, body := do(t, "POST", p.URL+c.path, c.body, "Authorization", "Bearer k-model", "X-Thread-Id", thread)
			if resp.StatusCode != 400 || string(body) != c.want {
				t.Fatalf("%s: %d %s\nwant 400 %s", c.name, resp.StatusCode, body, c.want)
			}
			if r, b := do(t, "GET", p.URL+"/api/threads/"+thread, "", "Authorization", "Bearer k-model"); r.StatusCode != 404 {
				t.Fatalf("%s: a refused request left a thread: %d %s", c.name, r.StatusCode, b)
			}
		}
		if n := len(m.Requests()); n != 0 {
			t.Fatalf("%d refused requests reached the upstream", n)
		}
		resp, body := do(t, "POST", p.URL+"/gemini/v1beta/models/gemini-2.5-flash:generateContent",
			`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`, "X-Goog-Api-Key", "k-model", "X-Thread-Id", "t-model-gemini")
		if resp.StatusCode != 200 {
			t.Fatalf("gemini (model in the path): %d %s", resp.StatusCode, body)
		}
	})
}

// TestReadyzWhileRedisHangs: /readyz answers 503 store_unavailable within
// its own ping timeout while the Redis server hangs (SIGSTOP), whatever
// the Redis client's own read timeout (here an hour: the ping's answer
// never comes while the test runs). Probes that arrive meanwhile share the
// ping in flight.
func TestReadyzWhileRedisHangs(t *testing.T) {
	srv := redistest.Start(t)
	st, err := redisstore.Open(context.Background(), redisstore.Options{URL: srv.URL() + "?read_timeout=1h"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	p := startProxyWith(t, nil, "connections:\n  - {name: openai, provider: openai, base_url: \"http://127.0.0.1:1\"}\n", st)
	// A hang guard far above the ping's 2 s, not a timing assertion.
	client := &http.Client{Timeout: 60 * time.Second}
	get := func() (int, string) {
		resp, err := client.Get(p.URL + "/readyz")
		if err != nil {
			t.Errorf("GET /readyz: %v", err)
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(); code != 200 {
		t.Fatalf("ready with Redis up: %d %s", code, body)
	}
	srv.Pause(t)
	defer srv.Resume(t)
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, body := get(); code != 503 || !strings.Contains(body, "store_unavailable") {
				t.Errorf("ready while Redis hangs: %d %s, want 503 store_unavailable", code, body)
			}
		}()
	}
	wg.Wait()
}

// TestFirstTurnFailsUpstream: a thread whose first turn fails upstream can
// be read: the client got the upstream's answer, and GET /api/threads/{id}
// shows the thread, holding the input the run sent (no reply: half turns
// never land), with the run failed, reason upstream_error and the
// upstream's error object. The same for a stream refused before its first
// event, in every wire format.
func TestFirstTurnFailsUpstream(t *testing.T) {
	cases := []struct {
		name, path, body, input string
		auth                    []string
	}{
		{"chat", "/openai/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
			`[{"role":"user","content":"hi"}]`, []string{"Authorization", "Bearer k-first"}},
		{"chat-stream", "/openai/v1/chat/completions", `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			`[{"role":"user","content":"hi"}]`, []string{"Authorization", "Bearer k-first"}},
		{"gemini", "/gemini/v1beta/models/gemini-2.5-flash:generateContent", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
			`[{"role":"user","parts":[{"text":"hi"}]}]`, []string{"X-Goog-Api-Key", "k-first"}},
		{"gemini-stream", "/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
			`[{"role":"user","parts":[{"text":"hi"}]}]`, []string{"X-Goog-Api-Key", "k-first"}},
		{"responses", "/openai/v1/responses", `{"model":"gpt-4o","input":[{"type":"message","role":"user","content":"hi"}]}`,
			`[{"type":"message","role":"user","content":"hi"}]`, []string{"Authorization", "Bearer k-first"}},
	}
	forEachBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		for _, c := range cases {
			thread := "t-first-" + c.name
			resp, body := do(t, "POST", p.URL+c.path, c.body, hdrs(c.auth, "X-Thread-Id", thread, "X-Mock-Status", "400")...)
			if resp.StatusCode != 400 {
				t.Fatalf("%s: %d %s, want the upstream's 400", c.name, resp.StatusCode, body)
			}
			run := resp.Header.Get("X-Run-Id")
			th := threadDoc(t, p, c.auth, thread)
			if got := th.Get("messages").Raw; got != c.input {
				t.Fatalf("%s: stored messages %s, want the input %s", c.name, got, c.input)
			}
			runs := th.Get("runs").Array()
			if len(runs) != 1 || runs[0].Get("id").String() != run || runs[0].Get("status").String() != "failed" ||
				runs[0].Get("reason").String() != "upstream_error" {
				t.Fatalf("%s: runs %s, want run %s failed upstream_error", c.name, th.Get("runs").Raw, run)
			}
			if e := runs[0].Get("error"); !e.IsObject() && !e.IsArray() || !jsonEqual(t, []byte(e.Raw), body) {
				t.Fatalf("%s: run error %s, want the upstream's %s", c.name, e.Raw, body)
			}
			if th.Get("connection").String() == "" || th.Get("format").String() == "" {
				t.Fatalf("%s: thread meta: %s", c.name, th.Raw)
			}
		}
	})
	// Other first turns that end without a reply: an upstream that cannot
	// be reached (502), and a stream that breaks off before its first
	// event (the client gets a stream_truncated error event).
	others := []struct {
		name, conn, body, mockHeader, reason string
		status                               int
	}{
		{"unreachable", "down", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, "", "upstream_unreachable", 502},
		{"unreachable-stream", "down", `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "", "upstream_unreachable", 502},
		{"cut-stream", "openai", `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "0", "stream_truncated", 200},
	}
	for _, b := range backends {
		t.Run(b.name+"/others", func(t *testing.T) {
			m := startMock(t)
			p := startProxyWith(t, m, persistConfig+"  - {name: down, provider: openai, base_url: \"http://127.0.0.1:1\"}\n", b.open(t))
			for _, c := range others {
				thread := "t-first-" + c.name
				h := []string{"Authorization", "Bearer k-first", "X-Thread-Id", thread}
				if c.mockHeader != "" {
					h = append(h, "X-Mock-Cut-After", c.mockHeader)
				}
				resp, body := do(t, "POST", p.URL+"/"+c.conn+"/v1/chat/completions", c.body, h...)
				if resp.StatusCode != c.status {
					t.Fatalf("%s: %d %s, want %d", c.name, resp.StatusCode, body, c.status)
				}
				th := threadDoc(t, p, h[:2], thread)
				runs := th.Get("runs").Array()
				if th.Get("messages").Raw != `[{"role":"user","content":"hi"}]` || len(runs) != 1 ||
					runs[0].Get("status").String() != "failed" || runs[0].Get("reason").String() != c.reason {
					t.Fatalf("%s: thread %s, want the input and one run failed %s", c.name, th.Raw, c.reason)
				}
			}
		})
	}
}

// heldUpstream is an in-test upstream that answers every request with
// status and body, each only once release is closed; got receives each
// request as it arrives.
type heldUpstream struct {
	url     string
	got     chan struct{}
	release chan struct{}
	calls   atomic.Int64
}

func startHeldUpstream(t *testing.T, status int, body string) *heldUpstream {
	t.Helper()
	u := &heldUpstream{got: make(chan struct{}, 16), release: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		u.calls.Add(1)
		u.got <- struct{}{}
		select {
		case <-u.release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

// TestRetryWaitsForRunInFlight: a non-stream request retried with the
// X-Run-Id of a run still in flight waits for that run's end and gets the
// same status and byte-identical body, with no second upstream call; when
// the run fails, the same error. On both stores.
func TestRetryWaitsForRunInFlight(t *testing.T) {
	waiting := make(chan struct{}, 1)
	awaitHook = func() { waiting <- struct{}{} }
	t.Cleanup(func() { awaitHook = nil })
	answers := []struct {
		name   string
		status int
		body   string
	}{
		{"ok", 200, `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"held"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`},
		{"error", 400, `{"error":{"message":"Invalid 'messages': held.","type":"invalid_request_error","param":"messages","code":null}}`},
	}
	// Each case runs on one replica, and on Redis also across two: the
	// retry reaches another replica than the run's.
	type setup struct {
		name     string
		replicas func(t *testing.T, cfg string) (first, retry *testProxy)
	}
	setups := []setup{}
	for _, b := range backends {
		setups = append(setups, setup{b.name, func(t *testing.T, cfg string) (*testProxy, *testProxy) {
			p := startProxyWith(t, nil, cfg, b.open(t))
			return p, p
		}})
	}
	setups = append(setups, setup{"redis-two-replicas", func(t *testing.T, cfg string) (*testProxy, *testProxy) {
		open := sharedRedis(t)
		return startProxyWith(t, nil, cfg, open()), startProxyWith(t, nil, cfg, open())
	}})
	for _, b := range setups {
		for _, a := range answers {
			t.Run(b.name+"/"+a.name, func(t *testing.T) {
				up := startHeldUpstream(t, a.status, a.body)
				p, p2 := b.replicas(t, "connections:\n  - {name: held, provider: openai, base_url: \""+up.url+"\"}\n")
				url, url2 := p.URL+"/held/v1/chat/completions", p2.URL+"/held/v1/chat/completions"
				req := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
				h := []string{"Authorization", "Bearer k-held", "X-Thread-Id", "t-held", "X-Run-Id", "r-held"}
				type answer struct {
					status int
					body   []byte
				}
				first, retry := make(chan answer, 1), make(chan answer, 1)
				go func() {
					resp, body := do(t, "POST", url, req, h...)
					first <- answer{resp.StatusCode, body}
				}()
				<-up.got // the run is in flight upstream
				go func() {
					resp, body := do(t, "POST", url2, req, h...)
					retry <- answer{resp.StatusCode, body}
				}()
				select {
				case <-waiting: // the retry waits for the run's end
				case r := <-retry:
					t.Fatalf("the retry was answered while its run was in flight: %d %s", r.status, r.body)
				}
				close(up.release)
				f, r := <-first, <-retry
				if f.status != a.status || string(f.body) != a.body {
					t.Fatalf("first: %d %s", f.status, f.body)
				}
				if r.status != f.status || string(r.body) != string(f.body) {
					t.Fatalf("retry: %d %s\nwant the first answer: %d %s", r.status, r.body, f.status, f.body)
				}
				if n := up.calls.Load(); n != 1 {
					t.Fatalf("%d upstream calls, want 1", n)
				}
				// A retry after the end is answered the same from the store.
				resp, body := do(t, "POST", url, req, h...)
				if resp.StatusCode != f.status || string(body) != string(f.body) {
					t.Fatalf("retry after the end: %d %s", resp.StatusCode, body)
				}
				// A stream the upstream refused before its first event: its
				// retry gets the same refusal, not an empty stream.
				if a.status >= 300 {
					sreq := `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`
					sh := []string{"Authorization", "Bearer k-held", "X-Thread-Id", "t-held-stream", "X-Run-Id", "r-held-stream"}
					r1, b1 := do(t, "POST", url, sreq, sh...)
					r2, b2 := do(t, "POST", url, sreq, sh...)
					if r1.StatusCode != a.status || r2.StatusCode != a.status || string(b2) != string(b1) {
						t.Fatalf("stream refused: %d %s, its retry %d %s", r1.StatusCode, b1, r2.StatusCode, b2)
					}
				}
			})
		}
	}
}

// testClock is a store clock a test moves forward, to let a lease lapse
// without waiting for it.
type testClock struct{ ahead atomic.Int64 }

func (c *testClock) now() time.Time { return time.Now().Add(time.Duration(c.ahead.Load())) }

// openClocked opens backend name with clock c.
func openClocked(t *testing.T, name string, c *testClock) store.Store {
	t.Helper()
	switch name {
	case "embedded":
		st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true, Now: c.now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	default:
		srv := redistest.Start(t)
		st, err := redisstore.Open(context.Background(), redisstore.Options{URL: srv.URL(), Now: c.now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
}

// TestLostRunEndsWithError: a stream run lost in a crash (its replica
// stopped renewing its lease; the sweeper marked it failed, proxy_lost)
// ends, for whoever reads it, with a terminal error event in the
// provider's shape (code proxy_lost), never silently: a follower that was
// reading it live, an X-Run-Id retry (the partial stream, then the error)
// and a replay of the events endpoint (the error under the next id).
func TestLostRunEndsWithError(t *testing.T) {
	cases := []struct {
		name, path, body, format, msg string
		events                        []string
		auth                          []string
		errEvent                      func(gjson.Result) bool
	}{
		{"openai", "/openai/v1/chat/completions", `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			"openai-chat", `{"role":"user","content":"hi"}`,
			[]string{"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n",
				"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":null}]}\n\n"},
			[]string{"Authorization", "Bearer k-lost"},
			func(e gjson.Result) bool { return e.Get("error.code").String() == "proxy_lost" }},
		{"gemini", "/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
			"gemini", `{"role":"user","parts":[{"text":"hi"}]}`,
			[]string{"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Hel\"}],\"role\": \"model\"},\"index\": 0}]}\r\n\r\n"},
			[]string{"X-Goog-Api-Key", "k-lost"},
			func(e gjson.Result) bool {
				return e.Get("error.code").Int() == 502 && e.Get("error.details.0.reason").String() == "PROXY_LOST"
			}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			clock := &testClock{}
			st := openClocked(t, b.name, clock)
			p := startProxyWith(t, startMock(t), resumeConfig, st)
			ctx := context.Background()
			for _, c := range cases {
				// The crashed replica: a run started, its input saved, part
				// of its stream logged, and then nothing.
				k := store.Key{Tenant: passThroughTenant([]byte("k-lost")), Thread: "t-lost-" + c.name}
				started, err := st.StartRun(ctx, store.StartRun{Key: k, RunID: "r-lost-" + c.name, Owner: "replica-gone",
					TTL: 3 * time.Second, Fingerprint: fingerprint([]byte(c.body)), Model: "m"})
				if err != nil {
					t.Fatal(err)
				}
				l := started.Lease
				if err := st.SaveTranscript(ctx, l, store.Transcript{Messages: [][]byte{[]byte(c.msg)}, Hashes: []store.Hash{hashOf([]byte(c.msg))},
					Connection: c.name, Format: c.format}); err != nil {
					t.Fatal(err)
				}
				evs := make([][]byte, len(c.events))
				for i, e := range c.events {
					evs[i] = []byte(e)
				}
				if err := st.AppendEvents(ctx, l, 1, evs); err != nil {
					t.Fatal(err)
				}
				// A follower reads the partial stream live ...
				resp := follow(t, p, c.auth, k.Thread, l.RunID, "after", 0)
				r := bufio.NewReader(resp.Body)
				for i, e := range c.events {
					if got := readDataEvent(t, r); got != "id: "+strconv.Itoa(i+1)+eolOf(e)+e {
						t.Fatalf("%s: follower's event %d: %q", c.name, i+1, got)
					}
				}
				// ... when the lease lapses and the run is swept.
				clock.ahead.Add(int64(time.Hour))
				if _, err := st.Sweep(ctx); err != nil {
					t.Fatal(err)
				}
				checkLost := func(what string, blocks []string, ids bool) {
					t.Helper()
					want := len(c.events) + 1
					if len(blocks) != want {
						t.Fatalf("%s %s: %d events %q, want the %d logged and the error", c.name, what, len(blocks), blocks, len(c.events))
					}
					last := blocks[len(blocks)-1]
					if ids {
						id := "id: " + strconv.Itoa(want) + eolOf(last)
						if !strings.HasPrefix(last, id) {
							t.Fatalf("%s %s: the error event %q is not under %q", c.name, what, last, id)
						}
						last = strings.TrimPrefix(last, id)
					}
					data, ok := strings.CutPrefix(strings.TrimRight(last, "\r\n"), "data: ")
					if !ok || !c.errEvent(gjson.Parse(data)) {
						t.Fatalf("%s %s: last event %q, want a proxy_lost error in the provider's shape", c.name, what, last)
					}
				}
				rest := readBody(t, resp)
				var live []string
				for _, e := range c.events {
					live = append(live, "id: x"+e) // placeholders for the events read above
				}
				checkLost("follower", append(live, nonComments(sseBlocks(t, rest))...), true)
				// An X-Run-Id retry replays the partial stream, then the error.
				resp2, body := do(t, "POST", p.URL+c.path, c.body, hdrs(c.auth, "X-Thread-Id", k.Thread, "X-Run-Id", l.RunID)...)
				if resp2.StatusCode != 200 {
					t.Fatalf("%s retry: %d %s", c.name, resp2.StatusCode, body)
				}
				blocks := nonComments(sseBlocks(t, body))
				for i, e := range c.events {
					if i < len(blocks) && blocks[i] != e {
						t.Fatalf("%s retry: event %d %q, want %q", c.name, i+1, blocks[i], e)
					}
				}
				checkLost("retry", blocks, false)
				// A replay of the ended run.
				checkLost("replay", nonComments(sseBlocks(t, readBody(t, follow(t, p, c.auth, k.Thread, l.RunID, "after", 0)))), true)
			}
			// A non-stream run lost the same way: its retry is a 502
			// proxy_lost in the provider's shape, not a 409.
			k := store.Key{Tenant: passThroughTenant([]byte("k-lost")), Thread: "t-lost-nonstream"}
			body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
			if _, err := st.StartRun(ctx, store.StartRun{Key: k, RunID: "r-lost-nonstream", Owner: "replica-gone",
				TTL: 3 * time.Second, Fingerprint: fingerprint([]byte(body)), Model: "gpt-4o"}); err != nil {
				t.Fatal(err)
			}
			clock.ahead.Add(int64(time.Hour))
			if _, err := st.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			resp, got := do(t, "POST", p.URL+"/openai/v1/chat/completions", body, "Authorization", "Bearer k-lost", "X-Thread-Id", k.Thread, "X-Run-Id", "r-lost-nonstream")
			if resp.StatusCode != 502 || gjson.GetBytes(got, "error.code").String() != "proxy_lost" {
				t.Fatalf("non-stream retry of a lost run: %d %s, want 502 proxy_lost", resp.StatusCode, got)
			}
		})
	}
}

// eolOf is the line ending an SSE block uses.
func eolOf(block string) string {
	if strings.Contains(block, "\r\n") {
		return "\r\n"
	}
	return "\n"
}

func nonComments(blocks []string) []string {
	var out []string
	for _, b := range blocks {
		if !isComment(b) {
			out = append(out, b)
		}
	}
	return out
}

// TestBodyTooLargeIsRead: a body over limits.max_body_bytes always gets
// its 413 body_too_large, never a connection reset: chronicle answers,
// shuts its side of the connection (the client reads the answer and then
// EOF) and reads and discards the rest of the body, so the client's
// writes all land. Over a real socket, with a client that writes the whole
// body before it reads anything, and with one that reads the answer after
// the first part and only then writes the rest, in pieces; on the OpenAI
// and Gemini routes.
func TestBodyTooLargeIsRead(t *testing.T) {
	const limit = 1 << 20
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			p := startProxyWith(t, startMock(t), fmt.Sprintf("limits: {max_body_bytes: %d}\n", limit)+resumeConfig, b.open(t))
			bodyTooLargeIsRead(t, strings.TrimPrefix(p.URL, "http://"), limit)
		})
	}
}

func bodyTooLargeIsRead(t *testing.T, addr string, limit int) {
	body := bytes.Repeat([]byte("a"), limit+limit/2)
	routes := []struct{ name, path, auth, code string }{
		{"openai", "/openai/v1/chat/completions", "Authorization: Bearer k-big", `"code":"body_too_large"`},
		{"gemini", "/gemini/v1beta/models/gemini-2.5-flash:generateContent", "X-Goog-Api-Key: k-big", `"reason":"BODY_TOO_LARGE"`},
	}
	for _, rt := range routes {
		head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: chronicle\r\n%s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", rt.path, rt.auth, len(body))
		// readAnswer reads the answer to its end and then the
		// connection's: EOF, not a reset.
		readAnswer := func(t *testing.T, c net.Conn) {
			t.Helper()
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%s: reading the answer: %v", rt.name, err)
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != 413 || !strings.Contains(string(b), rt.code) {
				t.Fatalf("%s: %d %s (%v), want 413 %s", rt.name, resp.StatusCode, b, err, rt.code)
			}
			if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
				t.Fatalf("%s: after the answer: %d bytes, %v; want EOF (the proxy's side shut, not reset)", rt.name, n, err)
			}
		}
		dial := func(t *testing.T) *net.TCPConn {
			t.Helper()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			// A hang guard, not a timing assertion.
			_ = c.SetDeadline(time.Now().Add(60 * time.Second))
			return c.(*net.TCPConn)
		}
		t.Run(rt.name+"/fast", func(t *testing.T) {
			c := dial(t)
			wrote := make(chan error, 1)
			go func() {
				_, err := c.Write(append([]byte(head), body...))
				wrote <- err
			}()
			readAnswer(t, c)
			if err := <-wrote; err != nil {
				t.Fatalf("writing the body: %v", err)
			}
			_ = c.CloseWrite()
		})
		t.Run(rt.name+"/slow", func(t *testing.T) {
			c := dial(t)
			if _, err := c.Write(append([]byte(head), body[:64<<10]...)); err != nil {
				t.Fatal(err)
			}
			readAnswer(t, c)
			// The rest, in pieces, after the answer: each lands.
			for off := 64 << 10; off < len(body); off += 64 << 10 {
				if _, err := c.Write(body[off:min(off+64<<10, len(body))]); err != nil {
					t.Fatalf("writing the rest at %d: %v", off, err)
				}
			}
			// Once the proxy has read it all and the client shuts its
			// side, the proxy closes: a write now finds no reader. Before
			// that, nothing was reset.
			_ = c.CloseWrite()
		})
		// A chunked body (a client that streams it, as Node's fetch does
		// with a stream): refused once it passes the limit. (fasthttp
		// resets the request when a chunked body runs over, path
		// included, so the answer is in the OpenAI shape on every route:
		// checked on the OpenAI route only.)
		if rt.name != "openai" {
			continue
		}
		t.Run(rt.name+"/chunked", func(t *testing.T) {
			c := dial(t)
			chead := strings.Replace(head, fmt.Sprintf("Content-Length: %d", len(body)), "Transfer-Encoding: chunked", 1)
			wrote := make(chan error, 1)
			go func() {
				var w bytes.Buffer
				w.WriteString(chead)
				for off := 0; off < len(body); off += 64 << 10 {
					piece := body[off:min(off+64<<10, len(body))]
					fmt.Fprintf(&w, "%x\r\n%s\r\n", len(piece), piece)
				}
				w.WriteString("0\r\n\r\n")
				_, err := c.Write(w.Bytes())
				wrote <- err
			}()
			readAnswer(t, c)
			if err := <-wrote; err != nil {
				t.Fatalf("writing the chunked body: %v", err)
			}
			_ = c.CloseWrite()
		})
	}
}

// heldStartStore holds the start of one thread's run until released.
type heldStartStore struct {
	store.Store
	thread           string
	entered, release chan struct{}
}

func (s *heldStartStore) StartRun(ctx context.Context, r store.StartRun) (*store.Started, error) {
	if r.Key.Thread == s.thread {
		s.entered <- struct{}{}
		<-s.release
	}
	return s.Store.StartRun(ctx, r)
}

// TestGateOrderSurvivesSlowStart: on a gated connection the upstream sees
// requests in the order they took their slots, whatever the store's
// latency: a request whose run start is slow (held here until the test
// lets it go) is not overtaken by one admitted after it, which waits for
// it before going upstream. On both stores and a 3-master Redis Cluster.
// One upstream connection (max_upstream_conns: 1) carries both requests,
// so the order they are written in is the order the upstream reads them:
// on two connections the upstream's own scheduling could swap two
// requests written microseconds apart.
func TestGateOrderSurvivesSlowStart(t *testing.T) {
	waiting := make(chan struct{}, 16)
	orderHook = func() { waiting <- struct{}{} }
	t.Cleanup(func() { orderHook = nil })
	stores := append(backends[:len(backends):len(backends)], struct {
		name string
		open func(t testing.TB) store.Store
	}{"cluster", func(t testing.TB) store.Store {
		c := redistest.StartCluster(t, 3)
		st, err := redisstore.Open(context.Background(), redisstore.Options{URL: "redis+cluster://" + strings.Join(c.Addrs(), ",")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}})
	for _, b := range stores {
		t.Run(b.name, func(t *testing.T) {
			var mu sync.Mutex
			var seen []string
			got := make(chan string, 4)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				mu.Lock()
				seen = append(seen, r.Header.Get("X-Test-Order"))
				mu.Unlock()
				got <- r.Header.Get("X-Test-Order")
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
			}))
			t.Cleanup(up.Close)
			st := &heldStartStore{Store: b.open(t), thread: "t-order-a", entered: make(chan struct{}, 1), release: make(chan struct{})}
			p := startProxyWith(t, nil, "connections:\n  - {name: gated, provider: openai, base_url: \""+up.URL+"\", max_concurrent: 2, max_upstream_conns: 1}\n", st)
			url := p.URL + "/gated/v1/chat/completions"
			req := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
			done := make(chan int, 2)
			post := func(name string) {
				resp, _ := do(t, "POST", url, req, "Authorization", "Bearer k-order", "X-Thread-Id", "t-order-"+name, "X-Test-Order", name)
				done <- resp.StatusCode
			}
			go post("a")
			<-st.entered // a holds the first slot, its start held
			go post("b")
			select {
			case <-waiting: // b, admitted second, waits for a
			case name := <-got:
				t.Fatalf("%s reached the upstream while the request admitted before it was still starting", name)
			}
			close(st.release)
			for i := 0; i < 2; i++ {
				if code := <-done; code != 200 {
					t.Fatalf("a request got %d", code)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if strings.Join(seen, ",") != "a,b" {
				t.Fatalf("upstream order %v, want the slot order a,b", seen)
			}
		})
	}
}

// TestGateOrderBodiless: on a gated connection a request without a body
// (a pass-through GET) lets the next one go as it is sent: a generate
// request behind a GET the upstream holds goes upstream without waiting
// for it.
func TestGateOrderBodiless(t *testing.T) {
	waiting := make(chan struct{}, 16)
	orderHook = func() { waiting <- struct{}{} }
	t.Cleanup(func() { orderHook = nil })
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			up := startHeldUpstream(t, 200, `{"object":"list","data":[]}`)
			p := startProxyWith(t, nil, "connections:\n  - {name: gated, provider: openai, base_url: \""+up.url+"\", max_concurrent: 2}\n", b.open(t))
			done := make(chan int, 2)
			go func() {
				resp, _ := do(t, "GET", p.URL+"/gated/v1/models", "", "Authorization", "Bearer k-order")
				done <- resp.StatusCode
			}()
			<-up.got // the GET is upstream, held
			go func() {
				resp, _ := do(t, "POST", p.URL+"/gated/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
					"Authorization", "Bearer k-order", "X-Thread-Id", "t-bodiless")
				done <- resp.StatusCode
			}()
			select {
			case <-up.got: // the POST went upstream behind the held GET
			case <-waiting:
				t.Fatal("the POST waits for a GET that was already sent")
			}
			close(up.release)
			<-done
			<-done
		})
	}
}
