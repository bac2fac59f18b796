package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/valyala/fasthttp"
)

// benchUpstream is a minimal fasthttp upstream, so a benchmark measures the
// proxy and not the mock: a fixed chat completion, or a fixed stream.
func benchUpstream(b *testing.B) string {
	b.Helper()
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, how can I help?"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":7,"total_tokens":16}}`)
	var stream strings.Builder
	for i := 0; i < 20; i++ {
		stream.WriteString(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"word "},"finish_reason":null}]}` + "\n\n")
	}
	stream.WriteString(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n")
	streamBody := []byte(stream.String())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &fasthttp.Server{MaxRequestBodySize: 64 << 20, Handler: func(ctx *fasthttp.RequestCtx) {
		if bytes.Contains(ctx.PostBody(), []byte(`"stream":true`)) {
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) { _, _ = w.Write(streamBody); _ = w.Flush() })
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	}}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// BenchmarkPassThrough measures a non-stream and a stream request sent
// straight to a fasthttp upstream and through chronicle (persistence off), so
// the difference is chronicle's added cost per request on loopback.
func BenchmarkPassThrough(b *testing.B) {
	up := benchUpstream(b)
	p := startProxy(b, nil, `
connections:
  - {name: openai, provider: openai, base_url: "`+up+`", persist: false}
`)
	client := &fasthttp.Client{MaxConnsPerHost: 512}
	for _, c := range []struct{ name, body string }{
		{"non-stream", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`},
		{"stream", `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		for _, target := range []struct{ name, url string }{
			{"direct", up + "/v1/chat/completions"},
			{"chronicle", p.URL + "/openai/v1/chat/completions"},
		} {
			b.Run(c.name+"/"+target.name, func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					req := fasthttp.AcquireRequest()
					resp := fasthttp.AcquireResponse()
					defer fasthttp.ReleaseRequest(req)
					defer fasthttp.ReleaseResponse(resp)
					for pb.Next() {
						req.SetRequestURI(target.url)
						req.Header.SetMethod("POST")
						req.Header.Set("Authorization", "Bearer k")
						req.SetBodyString(c.body)
						if err := client.Do(req, resp); err != nil {
							b.Fatal(err)
						}
						if resp.StatusCode() != 200 || len(resp.Body()) == 0 {
							b.Fatalf("status %d", resp.StatusCode())
						}
					}
				})
			})
		}
	}
}

// BenchmarkPersisted measures a persisted non-stream turn in replace mode
// with a 20- and a 200-message history, on each store backend, against the bare
// upstream: the cost of persistence on the request path.
func BenchmarkPersisted(b *testing.B) {
	for _, n := range []int{20, 200} {
		b.Run("msgs="+strconv.Itoa(n), func(b *testing.B) { benchPersisted(b, n) })
	}
}

func benchPersisted(b *testing.B, n int) {
	up := benchUpstream(b)
	var history strings.Builder
	history.WriteString(`{"model":"gpt-4o","messages":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			history.WriteString(",")
		}
		if i%2 == 0 {
			history.WriteString(`{"role":"user","content":"question number ` + strings.Repeat("x", 80) + `"}`)
		} else {
			history.WriteString(`{"role":"assistant","content":"answer number ` + strings.Repeat("y", 200) + `"}`)
		}
	}
	history.WriteString(`]}`)
	body := history.String()
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			p := startProxyWith(b, nil, `
connections:
  - {name: openai, provider: openai, base_url: "`+up+`"}
`, be.open(b))
			client := &fasthttp.Client{MaxConnsPerHost: 512}
			var n atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			defer func() {
				if p.threads != nil {
					b.ReportMetric(float64(p.threads.misses.Load())/float64(b.N), "misses/op")
				}
			}()
			// 32 requests in flight on 2 cores, as chronicle-bench sends.
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				req := fasthttp.AcquireRequest()
				resp := fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				for pb.Next() {
					req.SetRequestURI(p.URL + "/openai/v1/chat/completions")
					req.Header.SetMethod("POST")
					req.Header.Set("Authorization", "Bearer k")
					req.Header.Set("X-Thread-Id", "bench-"+strconv.FormatInt(n.Add(1)%64, 10))
					req.SetBodyString(body)
					if err := client.Do(req, resp); err != nil {
						b.Fatal(err)
					}
					if resp.StatusCode() != 200 && resp.StatusCode() != 409 {
						b.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
					}
				}
			})
		})
	}
}

// BenchmarkPersistedLargeMessage measures a persisted non-stream turn whose
// one message is 1 or 10 MiB of text, each on a new thread, on Redis: the
// per-byte cost of validating, parsing, hashing and storing a long
// context, which a long request also takes from other requests' CPU.
func BenchmarkPersistedLargeMessage(b *testing.B) {
	up := benchUpstream(b)
	for _, be := range backends {
		if be.name != "redis" {
			continue
		}
		p := startProxyWith(b, nil, `
limits: {max_body_bytes: 33554432}
connections:
  - {name: openai, provider: openai, base_url: "`+up+`"}
`, be.open(b))
		client := &fasthttp.Client{MaxConnsPerHost: 512, MaxResponseBodySize: 1 << 30}
		// Every turn starts a thread of its own, across sizes and the
		// probe runs b.Run makes, so none rewrites an earlier one.
		var n atomic.Int64
		// unnamed: no X-Thread-Id, a one-shot request (the bench's
		// head-of-line check sends those); its thread is not cached.
		for _, c := range []struct {
			size  int
			named bool
		}{{1 << 20, true}, {10 << 20, true}, {10 << 20, false}} {
			size := c.size
			name := be.name + "/MiB=" + strconv.Itoa(size>>20)
			if !c.named {
				name = be.name + "/unnamed/MiB=" + strconv.Itoa(size>>20)
			}
			body := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("x", size) + `"}]}`
			b.Run(name, func(b *testing.B) {
				req := fasthttp.AcquireRequest()
				resp := fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					req.SetRequestURI(p.URL + "/openai/v1/chat/completions")
					req.Header.SetMethod("POST")
					req.Header.Set("Authorization", "Bearer k")
					if c.named {
						req.Header.Set("X-Thread-Id", "large-"+strconv.FormatInt(n.Add(1), 10))
					}
					req.SetBodyString(body)
					if err := client.Do(req, resp); err != nil {
						b.Fatal(err)
					}
					if resp.StatusCode() != 200 {
						b.Fatalf("status %d: %.200s", resp.StatusCode(), resp.Body())
					}
				}
			})
		}
	}
}

// BenchmarkOpenStreamMemory reports the heap and stack one open stream
// costs the proxy: streams held open by the upstream after their first
// event, measured after a collection, minus the same streams sent straight
// to the upstream (the client's and the upstream's share); and the stack
// before that collection (grown-stack), which is what a burst of streams
// holds. It is a measurement, not a loop: run it with -benchtime 1x.
// chronicle-bench's streams check measures the process's RSS, which also
// holds the garbage the GC lets grow between collections.
func BenchmarkOpenStreamMemory(b *testing.B) {
	const n = 400
	redisStore := sharedRedis(b)
	for _, tc := range []struct {
		name, conn string
		open       func(testing.TB) store.Store
	}{
		{"pass", "{name: up, provider: openai, base_url: \"%s\", persist: false}", func(t testing.TB) store.Store { return openEmbedded(t, t.TempDir()) }},
		{"embedded", "{name: up, provider: openai, base_url: \"%s\"}", func(t testing.TB) store.Store { return openEmbedded(t, t.TempDir()) }},
		{"redis", "{name: up, provider: openai, base_url: \"%s\"}", func(testing.TB) store.Store { return redisStore() }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				up, release := heldStreamUpstream(b)
				dh, ds, dp := openStreamsBytes(b, up+"/v1/chat/completions", n, "")
				release()
				up, release = heldStreamUpstream(b)
				p := startProxyWith(b, nil, "connections:\n  - "+fmt.Sprintf(tc.conn, up)+"\n", tc.open(b))
				ph, ps, pp := openStreamsBytes(b, p.URL+"/up/v1/chat/completions", n, tc.name)
				release()
				b.ReportMetric(float64(ph-dh)/n, "heap-B/stream")
				b.ReportMetric(float64(ps-ds)/n, "stack-B/stream")
				b.ReportMetric(float64(pp-dp)/n, "grown-stack-B/stream")
			}
		})
	}
}

// heldStreamUpstream answers every request with one SSE event and then
// holds the stream until release.
func heldStreamUpstream(b testing.TB) (string, func()) {
	b.Helper()
	held := make(chan struct{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			_, _ = w.WriteString(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":"word "},"finish_reason":null}]}` + "\n\n")
			_ = w.Flush()
			<-held
			_, _ = w.WriteString(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n")
		})
	}}
	go func() { _ = srv.Serve(ln) }()
	var once sync.Once
	release := func() { once.Do(func() { close(held); _ = srv.Shutdown() }) }
	b.Cleanup(release)
	return "http://" + ln.Addr().String(), release
}

// openStreamsBytes opens n streams to url, each on its own connection,
// waits for every first event, and returns how much more live heap and
// goroutine stack the process holds than before (after a collection each
// time), and how much more stack before that collection: the stacks as the
// streams grew them, before the collection shrinks those mostly unused. The
// streams are closed before it returns.
func openStreamsBytes(b *testing.B, url string, n int, thread string) (heap, stack, grown int64) {
	b.Helper()
	used := func() (int64, int64) {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc), int64(ms.StackInuse)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: -1, DisableCompression: true}}
	defer client.CloseIdleConnections()
	heap0, stack0 := used()
	bodies := make([]io.ReadCloser, 0, n)
	defer func() {
		for _, body := range bodies {
			body.Close()
		}
	}()
	for i := range n {
		req, err := http.NewRequest("POST", url, strings.NewReader(`{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer k")
		if thread != "" {
			req.Header.Set("X-Thread-Id", thread+"-"+strconv.Itoa(i))
		}
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		bodies = append(bodies, resp.Body)
		if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || resp.StatusCode != 200 {
			b.Fatalf("stream %d: %d %v", i, resp.StatusCode, err)
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms) // no collection: stacks as grown
	grown = int64(ms.StackInuse) - stack0
	heap, stack = used()
	return heap - heap0, stack - stack0, grown
}
