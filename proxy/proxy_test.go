package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/cmd/mockllm/mock"
	"github.com/valyala/fasthttp"
)

const passThroughConfig = `
connections:
  - {name: openai, provider: openai, base_url: "${MOCK}"}
  - {name: deepseek, provider: deepseek, base_url: "${MOCK}"}
  - {name: gemini, provider: gemini, base_url: "${MOCK}"}
`

func fixture(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile("../cmd/mockllm/fixtures/providers/" + path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPassThroughByteIdentical: through chronicle, a client gets exactly the
// bytes (status, body) it gets from the upstream directly, for non-stream and
// stream answers of each wire format.
func TestPassThroughByteIdentical(t *testing.T) {
	m := startMock(t)
	p := startProxy(t, m, passThroughConfig)
	openaiReq := string(fixture(t, "openai-chat/request.parallel-tools.json"))
	geminiReq := string(fixture(t, "gemini/request.parallel-tools.json"))
	tests := []struct {
		name, conn, path, body string
		headers                []string
		wantType               string
	}{
		{"openai non-stream", "openai", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
			[]string{"Authorization", "Bearer sk-test"}, "application/json"},
		{"openai stream", "openai", "/v1/chat/completions", `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			[]string{"Authorization", "Bearer sk-test"}, "text/event-stream"},
		{"openai stream tools", "openai", "/v1/chat/completions", strings.Replace(openaiReq, `"model"`, `"stream":true,"model"`, 1),
			[]string{"Authorization", "Bearer sk-test"}, "text/event-stream"},
		{"deepseek stream", "deepseek", "/chat/completions", `{"model":"deepseek-chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			[]string{"Authorization", "Bearer sk-test"}, "text/event-stream"},
		{"gemini non-stream", "gemini", "/v1beta/models/gemini-2.5-flash:generateContent", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
			[]string{"X-Goog-Api-Key", "g-test"}, "application/json"},
		{"gemini sse", "gemini", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", geminiReq,
			[]string{"X-Goog-Api-Key", "g-test"}, "text/event-stream"},
		{"gemini json array stream", "gemini", "/v1beta/models/gemini-2.5-flash:streamGenerateContent", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
			[]string{"X-Goog-Api-Key", "g-test"}, "application/json"},
		{"gemini key in query", "gemini", "/v1beta/models/gemini-2.5-flash:generateContent?key=g-test", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
			nil, "application/json"},
		{"pass-through op", "openai", "/v1/models", ``, []string{"Authorization", "Bearer sk-test"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := "POST"
			if tt.body == "" {
				method = "GET"
			}
			direct, directBody := do(t, method, m.URL()+tt.path, tt.body, tt.headers...)
			via, viaBody := do(t, method, p.URL+"/"+tt.conn+tt.path, tt.body, tt.headers...)
			if direct.StatusCode != via.StatusCode {
				t.Fatalf("status: direct %d, via chronicle %d (%s)", direct.StatusCode, via.StatusCode, viaBody)
			}
			if !bytes.Equal(directBody, viaBody) {
				t.Fatalf("body differs:\ndirect: %q\nvia:    %q", directBody, viaBody)
			}
			if tt.wantType != "" && !strings.HasPrefix(via.Header.Get("Content-Type"), tt.wantType) {
				t.Fatalf("content type %q, want %q", via.Header.Get("Content-Type"), tt.wantType)
			}
			reqs := m.Requests()
			last := reqs[len(reqs)-1]
			if last.Path != strings.SplitN(tt.path, "?", 2)[0] {
				t.Fatalf("upstream path %q, want %q", last.Path, tt.path)
			}
			if string(last.Body) != tt.body {
				t.Fatalf("upstream body changed: %q", last.Body)
			}
		})
	}
}

// TestFirstEventBeforeSecond proves streaming without buffering: the mock
// holds its second event until the test has read the first through chronicle.
func TestFirstEventBeforeSecond(t *testing.T) {
	m := startMock(t)
	p := startProxy(t, m, passThroughConfig)
	for _, tt := range []struct{ name, url, body, key, val string }{
		{"openai", p.URL + "/openai/v1/chat/completions", `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "Authorization", "Bearer k"},
		{"gemini", p.URL + "/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`, "X-Goog-Api-Key", "k"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			gate := "first-" + tt.name
			resp := send(t, "POST", tt.url, tt.body, tt.key, tt.val, "X-Mock-Gate", gate)
			defer resp.Body.Close()
			r := bufio.NewReader(resp.Body)
			first := readEvent(t, r)
			if !strings.Contains(first, "data:") {
				t.Fatalf("first event %q", first)
			}
			m.Release(gate) // only now may the mock send the rest
			rest, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			if len(rest) == 0 {
				t.Fatal("nothing after the first event")
			}
		})
	}
}

const clientKeysConfig = `
clients:
  - {key: client-secret-1, tenant: app-one}
connections:
  - {name: openai, provider: openai, base_url: "${MOCK}", keys: [upstream-openai-1]}
  - {name: gemini, provider: gemini, base_url: "${MOCK}", keys: [upstream-gemini-1]}
`

func TestAuthModes(t *testing.T) {
	m := startMock(t)
	keyed := startProxy(t, m, clientKeysConfig)
	open := startProxy(t, m, passThroughConfig)
	chat := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	gem := `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`
	gemPath := "/gemini/v1beta/models/gemini-2.5-flash:generateContent"
	tests := []struct {
		name       string
		url, body  string
		headers    []string
		wantStatus int
		wantCode   string            // chronicle's error code in the body
		upstream   map[string]string // header → value the upstream must see ("" = absent)
		noQueryKey bool
	}{
		{name: "pass-through bearer", url: open.URL + "/openai/v1/chat/completions", body: chat,
			headers: []string{"Authorization", "Bearer sk-own"}, wantStatus: 200,
			upstream: map[string]string{"Authorization": "Bearer sk-own"}},
		{name: "pass-through x-goog-api-key", url: open.URL + gemPath, body: gem,
			headers: []string{"X-Goog-Api-Key", "g-own"}, wantStatus: 200,
			upstream: map[string]string{"X-Goog-Api-Key": "g-own"}},
		{name: "pass-through x-api-key", url: open.URL + "/openai/v1/chat/completions", body: chat,
			headers: []string{"X-Api-Key", "sk-own"}, wantStatus: 200,
			upstream: map[string]string{"X-Api-Key": "sk-own"}},
		{name: "missing key", url: open.URL + "/openai/v1/chat/completions", body: chat,
			wantStatus: 401, wantCode: "missing_api_key"},
		{name: "client key swapped for pool key (openai)", url: keyed.URL + "/openai/v1/chat/completions", body: chat,
			headers: []string{"Authorization", "Bearer client-secret-1"}, wantStatus: 200,
			upstream: map[string]string{"Authorization": "Bearer upstream-openai-1"}},
		{name: "client key swapped for pool key (gemini header)", url: keyed.URL + gemPath, body: gem,
			headers: []string{"X-Goog-Api-Key", "client-secret-1"}, wantStatus: 200,
			upstream: map[string]string{"X-Goog-Api-Key": "upstream-gemini-1", "Authorization": ""}},
		{name: "client key in query swapped", url: keyed.URL + gemPath + "?key=client-secret-1&alt=json", body: gem,
			wantStatus: 200, upstream: map[string]string{"X-Goog-Api-Key": "upstream-gemini-1"}, noQueryKey: true},
		{name: "client key via x-api-key", url: keyed.URL + "/openai/v1/chat/completions", body: chat,
			headers: []string{"X-Api-Key", "client-secret-1"}, wantStatus: 200,
			upstream: map[string]string{"Authorization": "Bearer upstream-openai-1", "X-Api-Key": ""}},
		{name: "unknown client key (openai shape)", url: keyed.URL + "/openai/v1/chat/completions", body: chat,
			headers: []string{"Authorization", "Bearer nope"}, wantStatus: 401, wantCode: `"code":"invalid_api_key"`},
		{name: "unknown client key (gemini shape)", url: keyed.URL + gemPath, body: gem,
			headers: []string{"X-Goog-Api-Key", "nope"}, wantStatus: 401, wantCode: `"status":"UNAUTHENTICATED"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m.Reset()
			resp, body := do(t, "POST", tt.url, tt.body, tt.headers...)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.wantStatus, body)
			}
			if tt.wantCode != "" {
				if !strings.Contains(string(body), tt.wantCode) {
					t.Fatalf("body %s lacks %s", body, tt.wantCode)
				}
				if n := len(m.Requests()); n != 0 {
					t.Fatalf("a refused request reached the upstream (%d requests)", n)
				}
				return
			}
			reqs := m.Requests()
			if len(reqs) != 1 {
				t.Fatalf("upstream saw %d requests", len(reqs))
			}
			for h, want := range tt.upstream {
				if got := reqs[0].Header.Get(h); got != want {
					t.Errorf("upstream %s = %q, want %q", h, got, want)
				}
			}
			if tt.noQueryKey && strings.Contains(reqs[0].RawQuery, "key=") {
				t.Errorf("client key still in upstream query %q", reqs[0].RawQuery)
			}
			if strings.Contains(reqs[0].RawQuery+strings.Join(flatten(reqs[0].Header), " "), "client-secret") {
				t.Errorf("client key reached the upstream")
			}
		})
	}
	for _, p := range []*testProxy{keyed, open} {
		if strings.Contains(p.log.String(), "client-secret") || strings.Contains(p.log.String(), "upstream-openai") {
			t.Fatal("a key appeared in the log")
		}
	}
}

func flatten(h http.Header) []string {
	var out []string
	for k, vs := range h {
		out = append(out, k+": "+strings.Join(vs, ","))
	}
	return out
}

func TestOwnErrors(t *testing.T) {
	m := startMock(t)
	p := startProxy(t, m, passThroughConfig+"\nlimits: {max_body_bytes: 1024}\n")
	big := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("x", 2048) + `"}]}`
	tests := []struct {
		name, method, url, body string
		headers                 []string
		status                  int
		want                    []string
	}{
		{"body too large", "POST", p.URL + "/openai/v1/chat/completions", big, []string{"Authorization", "Bearer k"}, 413,
			[]string{`"code":"body_too_large"`, `"type":"invalid_request_error"`}},
		{"body too large gemini", "POST", p.URL + "/gemini/v1beta/models/g:generateContent", big, []string{"X-Goog-Api-Key", "k"}, 413,
			[]string{`"status":"INVALID_ARGUMENT"`, `"reason":"BODY_TOO_LARGE"`}},
		{"unknown connection", "POST", p.URL + "/nope/v1/chat/completions", `{}`, nil, 404,
			[]string{`"code":"unknown_connection"`}},
		{"unknown connection gemini path", "POST", p.URL + "/nope/v1beta/models/g:generateContent", `{}`, nil, 404,
			[]string{`"status":"NOT_FOUND"`}},
		{"healthz", "GET", p.URL + "/healthz", ``, nil, 200, []string{`"status":"ok"`}},
		{"readyz", "GET", p.URL + "/readyz", ``, nil, 200, []string{`"status":"ok"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, tt.method, tt.url, tt.body, tt.headers...)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(body), w) {
					t.Errorf("body %s lacks %s", body, w)
				}
			}
		})
	}
	if n := len(m.Requests()); n != 0 {
		t.Fatalf("refused requests reached the upstream: %d", n)
	}
}

// TestUpstreamErrorsPassThrough: provider errors reach the client unchanged.
func TestUpstreamErrorsPassThrough(t *testing.T) {
	m := startMock(t)
	p := startProxy(t, m, passThroughConfig)
	tests := []struct {
		name, path, conn, body string
		headers                []string
	}{
		{"openai 429", "/v1/chat/completions", "openai", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
			[]string{"Authorization", "Bearer k", "X-Mock-Status", "429", "X-Mock-Retry-After", "7"}},
		{"openai 503", "/v1/chat/completions", "openai", `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			[]string{"Authorization", "Bearer k", "X-Mock-Status", "503"}},
		{"deepseek invalid history 400", "/chat/completions", "deepseek",
			`{"model":"deepseek-chat","messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"x","content":"r"}]}`,
			[]string{"Authorization", "Bearer k"}},
		{"gemini 429", "/v1beta/models/gemini-2.5-flash:generateContent", "gemini", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
			[]string{"X-Goog-Api-Key", "k", "X-Mock-Status", "429", "X-Mock-Error-Body", "error.rate-limit"}},
		{"gemini bad key 400", "/v1beta/models/gemini-2.5-flash:generateContent", "gemini", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
			[]string{"X-Goog-Api-Key", "invalid"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			direct, directBody := do(t, "POST", m.URL()+tt.path, tt.body, tt.headers...)
			via, viaBody := do(t, "POST", p.URL+"/"+tt.conn+tt.path, tt.body, tt.headers...)
			if direct.StatusCode < 400 {
				t.Fatalf("mock answered %d; the test needs an error", direct.StatusCode)
			}
			if direct.StatusCode != via.StatusCode || !bytes.Equal(directBody, viaBody) {
				t.Fatalf("direct %d %s\nvia    %d %s", direct.StatusCode, directBody, via.StatusCode, viaBody)
			}
			if ra := direct.Header.Get("Retry-After"); ra != via.Header.Get("Retry-After") {
				t.Fatalf("Retry-After %q became %q", ra, via.Header.Get("Retry-After"))
			}
		})
	}
}

// TestClientDisconnectEndsUpstream: a client that leaves mid-stream makes
// chronicle close the upstream request, even while the upstream is silent
// (the heartbeat write finds the client gone).
func TestClientDisconnectEndsUpstream(t *testing.T) {
	m := startMock(t)
	p := startProxy(t, m, passThroughConfig+"\nlimits: {heartbeat: 20ms}\n")
	resp := send(t, "POST", p.URL+"/openai/v1/chat/completions",
		`{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		"Authorization", "Bearer k", "X-Mock-Gate", "never-released")
	r := bufio.NewReader(resp.Body)
	readEvent(t, r)
	resp.Body.Close() // the client leaves; the mock is still holding the stream open
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := m.WaitRequests(ctx, 1); err != nil {
		t.Fatalf("upstream request never ended: %v", err)
	}
	if got := m.Requests()[0]; !got.Canceled {
		t.Fatalf("upstream request ended but not by cancellation: %+v", got)
	}
}

// TestTruncatedStream: a stream cut before its terminal marker ends with a
// provider-shaped error event, not a silent success.
func TestTruncatedStream(t *testing.T) {
	m := startMock(t)
	p := startProxy(t, m, passThroughConfig)
	tests := []struct {
		name, url, body, key, val, want string
	}{
		{"openai", p.URL + "/openai/v1/chat/completions", `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			"Authorization", "Bearer k", `"code":"stream_truncated"`},
		{"gemini", p.URL + "/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
			"X-Goog-Api-Key", "k", `"reason":"STREAM_TRUNCATED"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, body := do(t, "POST", tt.url, tt.body, tt.key, tt.val, "X-Mock-Cut-After", "1")
			if !strings.Contains(string(body), tt.want) {
				t.Fatalf("truncated stream body lacks %s:\n%s", tt.want, body)
			}
			_, whole := do(t, "POST", tt.url, tt.body, tt.key, tt.val)
			if strings.Contains(string(whole), "stream_truncated") || strings.Contains(string(whole), "STREAM_TRUNCATED") {
				t.Fatalf("a whole stream was reported truncated:\n%s", whole)
			}
		})
	}
}

var _ = mock.Options{}

// TestUpstreamHeaderLimit: an upstream answer whose head does not fit in
// limits.max_upstream_header_bytes gets a 502 that names the key; a
// connection with room for it relays it.
func TestUpstreamHeaderLimit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		n, _ := strconv.Atoi(string(ctx.Request.Header.Peek("X-Head-Bytes")))
		ctx.Response.Header.Set("X-Long", strings.Repeat("h", n))
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	}}
	go up.Serve(ln)
	t.Cleanup(func() { up.Shutdown() })
	for _, tc := range []struct {
		limits    string
		headBytes int
		status    int
		want      string
	}{
		{"", 20000, 502, "limits.max_upstream_header_bytes = 8192"},
		// A provider's head is 1-3 KB (rate-limit headers, cookies).
		{"", 6000, 200, `"content":"ok"`},
		{"limits: {max_upstream_header_bytes: 32768}", 20000, 200, `"content":"ok"`},
	} {
		p := startProxy(t, nil, tc.limits+`
connections:
  - {name: a, provider: openai, base_url: "http://`+ln.Addr().String()+`", persist: false}
`)
		resp, body := do(t, "POST", p.URL+"/a/v1/chat/completions", chatBody, "Authorization", "Bearer k",
			"X-Head-Bytes", strconv.Itoa(tc.headBytes))
		if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.want) {
			t.Errorf("%q: %d %s; want %d with %s", tc.limits, resp.StatusCode, body, tc.status, tc.want)
		}
	}
}

// TestOpenStreamHoldsOneGoroutine: a stream waiting on a silent upstream
// holds only fasthttp's connection goroutine, which runs the relay; the
// clocks, a cancel request and the heartbeats are timers. (It held two: a
// reader goroutine fed the relay loop.) Persisted and pass-through streams
// alike, heartbeats on.
func TestOpenStreamHoldsOneGoroutine(t *testing.T) {
	m := startMock(t)
	p := startProxy(t, m, persistConfig+"\nlimits: {heartbeat: 5ms}\n")
	const perConn = 4
	var bodies []io.Closer
	defer func() {
		for _, b := range bodies {
			b.Close()
		}
	}()
	for i := range 2 * perConn {
		url, headers := p.URL+"/plain/v1/chat/completions", []string{"Authorization", "Bearer k", "X-Mock-Gate", "held"}
		if i%2 == 0 {
			url = p.URL + "/openai/v1/chat/completions"
			headers = append(headers, "X-Thread-Id", fmt.Sprintf("goroutines-%d", i))
		}
		resp := send(t, "POST", url, streamBody, headers...)
		bodies = append(bodies, resp.Body)
		r := bufio.NewReader(resp.Body)
		readEvent(t, r)
		// A heartbeat, so the relay has waited through at least one.
		for !strings.HasPrefix(readEvent(t, r), ":") {
		}
	}
	buf := make([]byte, 1<<22)
	stacks := strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n")
	relays := 0
	for _, s := range stacks {
		if strings.Contains(s, "proxy.(*exchange).relaySSE") {
			relays++
		}
	}
	if relays != 2*perConn {
		t.Fatalf("%d goroutines are in relaySSE for %d open streams, want one each", relays, 2*perConn)
	}
	m.Release("held")
}
