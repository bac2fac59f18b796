package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/limiter"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

const chatBody = `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
const streamBody = `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`

// waitFor polls an observable condition of the system under test (a queue
// depth) until it holds, failing after a generous deadline. It orders a
// test's steps; it never stands in for a result.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRateLimitRPM: 120 requests at rpm 60 → the first 60 pass, the rest
// get 429 rate_limited with Retry-After and x-ratelimit headers, and one
// that honours Retry-After passes.
func TestRateLimitRPM(t *testing.T) {
	m := startMock(t)
	p := startProxy(t, m, `
connections:
  - {name: a, provider: openai, base_url: "${MOCK}", rate: {rpm: 60}}
`)
	pass, limited := 0, 0
	start := time.Now()
	var last *struct {
		retry string
		body  string
	}
	for i := 0; i < 120; i++ {
		resp, body := do(t, "POST", p.URL+"/a/v1/chat/completions", chatBody, "Authorization", "Bearer k")
		switch resp.StatusCode {
		case 200:
			if i < 60 && limited > 0 {
				t.Fatalf("request %d refused within the first 60", i)
			}
			pass++
			if resp.Header.Get("X-Ratelimit-Limit-Requests") != "60" {
				t.Fatalf("x-ratelimit-limit-requests = %q", resp.Header.Get("X-Ratelimit-Limit-Requests"))
			}
		case 429:
			limited++
			last = &struct{ retry, body string }{resp.Header.Get("Retry-After"), string(body)}
			if resp.Header.Get("X-Ratelimit-Remaining-Requests") != "0" {
				t.Fatalf("x-ratelimit-remaining-requests = %q", resp.Header.Get("X-Ratelimit-Remaining-Requests"))
			}
		default:
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	// rpm 60 refills one request a second: a slow machine that took s
	// seconds for the loop may pass s more (after the first refusal).
	refill := int(time.Since(start) / time.Second)
	if pass < 60 || pass > 60+refill || pass+limited != 120 {
		t.Fatalf("passed %d, limited %d in %s; want 60 (+%d refilled)", pass, limited, time.Since(start), refill)
	}
	if !strings.Contains(last.body, `"code":"rate_limited"`) || last.retry == "" {
		t.Fatalf("429: Retry-After %q body %s", last.retry, last.body)
	}
	if n := len(m.Requests()); n != pass {
		t.Fatalf("upstream saw %d requests, %d passed", n, pass)
	}
	secs, _ := strconv.Atoi(last.retry)
	time.Sleep(time.Duration(secs) * time.Second) // a client honouring Retry-After
	if resp, body := do(t, "POST", p.URL+"/a/v1/chat/completions", chatBody, "Authorization", "Bearer k"); resp.StatusCode != 200 {
		t.Fatalf("after Retry-After: %d %s", resp.StatusCode, body)
	}
}

// TestTPMReservations: streams reserve tokens at admission and settle with
// the real usage, so admitted work never exceeds the token budget.
func TestTPMReservations(t *testing.T) {
	m := startMock(t)
	p := startProxy(t, m, `
connections:
  - {name: a, provider: openai, base_url: "${MOCK}", rate: {tpm: 1000, default_max_tokens: 200}}
`)
	// Each request reserves ~16 (body/4) + 200 tokens: four fit in 1000
	// while held open, the fifth does not.
	var resps []*bufio.Reader
	for i := 0; i < 4; i++ {
		resp := send(t, "POST", p.URL+"/a/v1/chat/completions", streamBody, "Authorization", "Bearer k", "X-Mock-Gate", "tpm")
		if resp.StatusCode != 200 {
			t.Fatalf("stream %d: %d", i, resp.StatusCode)
		}
		defer resp.Body.Close()
		resps = append(resps, bufio.NewReader(resp.Body))
	}
	resp, body := do(t, "POST", p.URL+"/a/v1/chat/completions", streamBody, "Authorization", "Bearer k")
	if resp.StatusCode != 429 || !strings.Contains(string(body), "rate_limited") || resp.Header.Get("X-Ratelimit-Limit-Tokens") != "1000" {
		t.Fatalf("fifth stream: %d %s", resp.StatusCode, body)
	}
	m.Release("tpm")
	for _, r := range resps {
		io.Copy(io.Discard, r)
	}
	// Settled with real usage (the fixture's few dozen tokens each), the
	// budget has room again without waiting a minute.
	if resp, body := do(t, "POST", p.URL+"/a/v1/chat/completions", streamBody, "Authorization", "Bearer k"); resp.StatusCode != 200 {
		t.Fatalf("after settlement: %d %s", resp.StatusCode, body)
	}
}

// TestGateFIFOAndQueue: max_concurrent caps what reaches the upstream,
// waiters are admitted in arrival order, a full queue gets 429 queue_full, a
// long wait 429 queue_timeout, and a client that leaves gives its place up.
func TestGateFIFOAndQueue(t *testing.T) {
	m := startMock(t)
	p := startProxy(t, m, `
connections:
  - {name: a, provider: openai, base_url: "${MOCK}", max_concurrent: 1, queue: {max_waiting: 3, timeout: 30s}}
  - {name: b, provider: openai, base_url: "${MOCK}", max_concurrent: 1, queue: {max_waiting: 5, timeout: 300ms}}
  - {name: other, provider: openai, base_url: "${MOCK}"}
`)
	gate := p.conns["a"].gate
	url := p.URL + "/a/v1/chat/completions"
	// One holder: with one slot, each waiter reaches the upstream only
	// after the one before it finished, so the upstream's order is the
	// admission order.
	var held []*bufio.Reader
	for i := 0; i < 1; i++ {
		resp := send(t, "POST", url, streamBody, "Authorization", "Bearer k", "X-Mock-Gate", "hold")
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		readEvent(t, r)
		held = append(held, r)
	}
	// Three waiters, queued one after another; record admission order.
	var order []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			resp, _ := do(t, "POST", url, chatBody, "Authorization", "Bearer k", "X-Mock-Scenario", "text", "X-Test-Order", strconv.Itoa(i))
			if resp.StatusCode == 200 {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
			}
		}(i)
		waitFor(t, "waiter "+strconv.Itoa(i)+" queued", func() bool { return gate.Stats().Waiting == i+1 })
	}
	// The queue is full now.
	resp, body := do(t, "POST", url, chatBody, "Authorization", "Bearer k")
	if resp.StatusCode != 429 || !strings.Contains(string(body), "queue_full") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("queue full: %d %s", resp.StatusCode, body)
	}
	if got := m.MaxInFlight(); got > 1 {
		t.Fatalf("upstream saw %d in flight, cap 1", got)
	}
	// A long request on this connection does not hold up another one.
	if resp, _ := do(t, "POST", p.URL+"/other/v1/chat/completions", chatBody, "Authorization", "Bearer k"); resp.StatusCode != 200 {
		t.Fatalf("other connection blocked: %d", resp.StatusCode)
	}
	// Release the holders: the waiters pass one slot at a time, in order.
	m.Release("hold")
	for _, r := range held {
		io.Copy(io.Discard, r)
	}
	wg.Wait()
	if len(order) != 3 {
		t.Fatalf("admitted %v", order)
	}
	reqs := m.Requests()
	var seen []string
	for _, r := range reqs {
		if v := r.Header.Get("X-Test-Order"); v != "" {
			seen = append(seen, v)
		}
	}
	if strings.Join(seen, ",") != "0,1,2" {
		t.Fatalf("upstream order %v, want arrival order 0,1,2", seen)
	}

	// queue.timeout: one holder on b, the next waits 300ms and gives up.
	respB := send(t, "POST", p.URL+"/b/v1/chat/completions", streamBody, "Authorization", "Bearer k", "X-Mock-Gate", "holdb")
	defer respB.Body.Close()
	rb := bufio.NewReader(respB.Body)
	readEvent(t, rb)
	resp, body = do(t, "POST", p.URL+"/b/v1/chat/completions", chatBody, "Authorization", "Bearer k")
	if resp.StatusCode != 429 || !strings.Contains(string(body), "queue_timeout") {
		t.Fatalf("queue timeout: %d %s", resp.StatusCode, body)
	}
	// A waiter whose client leaves gives its place up at once.
	gateB := p.conns["b"].gate
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	req := "POST /b/v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(chatBody)) + "\r\n\r\n" + chatBody
	conn.Write([]byte(req))
	waitFor(t, "the raw client queued", func() bool { return gateB.Stats().Waiting == 1 })
	conn.Close()
	waitFor(t, "the raw client's place given up", func() bool { return gateB.Stats().Waiting == 0 })
	if c := gateB.Stats().Cancelled; c != 1 {
		t.Fatalf("cancelled waiters %d", c)
	}
	m.Release("holdb")
	io.Copy(io.Discard, rb)
}

// TestWatchdogClocks: first byte, idle gap and total stream time each end
// the exchange with a provider-shaped error, and the run ends failed.
func TestWatchdogClocks(t *testing.T) {
	m := startMock(t)
	st := openEmbedded(t, t.TempDir())
	p := startProxyWith(t, m, `
connections:
  - {name: fb, provider: openai, base_url: "${MOCK}", timeouts: {first_byte: 200ms, idle: 60s, total: 60s}}
  - {name: idle, provider: openai, base_url: "${MOCK}", timeouts: {first_byte: 10s, idle: 200ms, total: 60s}}
  - {name: total, provider: openai, base_url: "${MOCK}", timeouts: {first_byte: 10s, idle: 10s, total: 400ms}}
`, st)
	tests := []struct {
		conn, knob, val string
		status          int
		want            string
	}{
		{"fb", "X-Mock-First-Byte-Delay", "5s", 504, `"code":"upstream_timeout"`},
		{"idle", "X-Mock-Chunk-Delay", "2s", 200, `"code":"idle_timeout"`},
		{"total", "X-Mock-Chunk-Delay", "150ms", 200, `"code":"total_timeout"`},
	}
	for _, tt := range tests {
		t.Run(tt.conn, func(t *testing.T) {
			thread := "t-wd-" + tt.conn
			resp, body := do(t, "POST", p.URL+"/"+tt.conn+"/v1/chat/completions", streamBody, "Authorization", "Bearer k", tt.knob, tt.val, "X-Thread-Id", thread)
			if resp.StatusCode != tt.status || !strings.Contains(string(body), tt.want) {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			run := apiThread(t, p, "k", thread).Get("runs.0")
			if run.Get("status").String() != "failed" || !strings.Contains(run.Get("reason").String(), "timeout") {
				t.Fatalf("run %s", run.Raw)
			}
		})
	}
}

// keyedUpstream answers 429 (Retry-After 30) for the key "bad" and 200 for
// any other, counting requests per key.
func keyedUpstream(t *testing.T) (string, *sync.Map) {
	counts := &sync.Map{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		key := string(ctx.Request.Header.Peek("Authorization"))
		v, _ := counts.LoadOrStore(key, new(int64))
		mu.Lock()
		*v.(*int64)++
		mu.Unlock()
		ctx.SetContentType("application/json")
		if key == "Bearer bad" {
			ctx.Response.Header.Set("Retry-After", "30")
			ctx.SetStatusCode(429)
			ctx.SetBodyString(`{"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}`)
			return
		}
		ctx.SetBodyString(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String(), counts
}

var mu sync.Mutex

func count(m *sync.Map, key string) int64 {
	v, ok := m.Load(key)
	if !ok {
		return 0
	}
	mu.Lock()
	defer mu.Unlock()
	return *v.(*int64)
}

// TestKeyPool429: a key answered with 429 cools down for the upstream's
// Retry-After; with retries the request is retried on another key before
// any byte reached the client.
func TestKeyPool429(t *testing.T) {
	up, counts := keyedUpstream(t)
	p := startProxy(t, nil, `
clients: [{key: client, tenant: t1}]
connections:
  - {name: a, provider: openai, base_url: "`+up+`", keys: [bad, good], retry: {max_attempts: 2, base_backoff: 10ms, max_backoff: 60s}}
  - {name: noretry, provider: openai, base_url: "`+up+`", keys: [bad, good]}
`)
	for i := 0; i < 10; i++ {
		resp, body := do(t, "POST", p.URL+"/a/v1/chat/completions", chatBody, "Authorization", "Bearer client")
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if bad := count(counts, "Bearer bad"); bad != 1 {
		t.Fatalf("the cooling key was used %d times, want once", bad)
	}
	// Without retries the one 429 goes to the client, unchanged.
	var statuses []int
	for i := 0; i < 4; i++ {
		resp, _ := do(t, "POST", p.URL+"/noretry/v1/chat/completions", chatBody, "Authorization", "Bearer client")
		statuses = append(statuses, resp.StatusCode)
	}
	n429 := 0
	for _, s := range statuses {
		if s == 429 {
			n429++
		}
	}
	if n429 != 1 {
		t.Fatalf("statuses %v: want exactly one 429 before the key cools", statuses)
	}
	if strings.Contains(p.log.String(), "bad") && !strings.Contains(p.log.String(), "fingerprint") {
		t.Log(p.log.String())
	}
	_ = gjson.Valid
	_ = limiter.ErrQueueFull
	_ = context.Background
}

// TestChunkRelayStops: a stream of unknown length that is not SSE (Gemini's
// JSON array stream) is stopped by the idle clock and by a cancel request
// while the relay waits on a silent upstream: the upstream request ends and
// the run records why.
func TestChunkRelayStops(t *testing.T) {
	m := startMock(t)
	p := startProxyWith(t, m, `
connections:
  - {name: gemini, provider: gemini, base_url: "${MOCK}", timeouts: {first_byte: 10s, idle: 60s, total: 60s}}
  - {name: quiet, provider: gemini, base_url: "${MOCK}", timeouts: {first_byte: 10s, idle: 200ms, total: 60s}}
`, openEmbedded(t, t.TempDir()))
	const path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
	const body = `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`
	auth := []string{"X-Goog-Api-Key", "k"}
	// stopped checks that the upstream request behind gate ended by
	// cancellation (done: upstream requests ended so far) and how the
	// thread's run ended.
	stopped := func(t *testing.T, done int, gate, thread, status, reason string) {
		t.Helper()
		waitUpstreamDone(t, m, done)
		if r := mockRequest(t, m, gate); !r.Canceled {
			t.Fatalf("upstream request not cancelled: %+v", r)
		}
		run := threadDoc(t, p, auth, thread).Get("runs.0")
		if run.Get("status").String() != status || run.Get("reason").String() != reason {
			t.Fatalf("run %s", run.Raw)
		}
	}

	t.Run("idle", func(t *testing.T) {
		resp, got := do(t, "POST", p.URL+"/quiet"+path, body, hdrs(auth, "X-Thread-Id", "t-chunks-idle", "X-Mock-Gate", "chunks-idle")...)
		if resp.StatusCode != 200 || strings.HasSuffix(strings.TrimSpace(string(got)), "]") {
			t.Fatalf("%d, a whole array: %s", resp.StatusCode, got)
		}
		stopped(t, 1, "chunks-idle", "t-chunks-idle", "failed", "idle_timeout")
	})
	t.Run("cancel", func(t *testing.T) {
		resp := send(t, "POST", p.URL+"/gemini"+path, body, hdrs(auth, "X-Thread-Id", "t-chunks-cancel", "X-Mock-Gate", "chunks-cancel")...)
		defer resp.Body.Close()
		runID := resp.Header.Get("X-Run-Id")
		first := make([]byte, 1)
		if _, err := io.ReadFull(resp.Body, first); err != nil {
			t.Fatal(err)
		}
		if cr, cbody := do(t, "POST", p.URL+"/api/threads/t-chunks-cancel/runs/"+runID+"/cancel", "", auth...); cr.StatusCode != 202 {
			t.Fatalf("cancel: %d %s", cr.StatusCode, cbody)
		}
		if _, err := io.ReadAll(resp.Body); err != nil {
			t.Fatal(err)
		}
		stopped(t, 2, "chunks-cancel", "t-chunks-cancel", "aborted", "cancelled")
	})
}
