package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"strconv"
	"testing"

	"github.com/valyala/fasthttp"
)

// teeUpstream is a bare fasthttp upstream that streams X-Bench-Events
// content chunks, each written and flushed on its own as a provider does,
// then the finish chunk, the usage chunk and [DONE].
func teeUpstream(b *testing.B) string {
	b.Helper()
	chunk := []byte(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"word "},"finish_reason":null}]}` + "\n\n")
	end := []byte(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
		`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":7,"total_tokens":16}}` + "\n\n" +
		"data: [DONE]\n\n")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		n, _ := strconv.Atoi(string(ctx.Request.Header.Peek("X-Bench-Events")))
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for i := 0; i < n; i++ {
				_, _ = w.Write(chunk)
				_ = w.Flush()
			}
			_, _ = w.Write(end)
			_ = w.Flush()
		})
	}}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// BenchmarkTee measures what relaying an SSE stream costs per event: the
// stream straight from the upstream, through chronicle with persist: false
// (forward + assembler), and through chronicle persisting it on the embedded
// store without fsync (plus the event log and the run's writes). Requests
// are sequential, so ns/event is latency, not throughput. The per-event cost
// of the tee is the slope between event counts, which cancels the
// per-request cost (connection, run start and finish):
//
//	(ns/op[events=1024] - ns/op[events=64]) / 960
func BenchmarkTee(b *testing.B) {
	up := teeUpstream(b)
	off := startProxy(b, nil, `
connections:
  - {name: openai, provider: openai, base_url: "`+up+`", persist: false}
`)
	on := startProxyWith(b, nil, `
connections:
  - {name: openai, provider: openai, base_url: "`+up+`"}
`, openEmbedded(b, b.TempDir()))
	targets := []struct{ name, url string }{
		{"direct", up + "/v1/chat/completions"},
		{"persist-off", off.URL + "/openai/v1/chat/completions"},
		{"persisted", on.URL + "/openai/v1/chat/completions"},
	}
	// The client asks for usage itself, so nothing is stripped on the way.
	body := `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	client := &fasthttp.Client{}
	for _, n := range []int{64, 1024} {
		for _, target := range targets {
			b.Run(fmt.Sprintf("events=%d/%s", n, target.name), func(b *testing.B) {
				req := fasthttp.AcquireRequest()
				resp := fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				events := strconv.Itoa(n)
				b.ReportAllocs()
				for b.Loop() {
					req.Reset()
					req.SetRequestURI(target.url)
					req.Header.SetMethod("POST")
					req.Header.Set("Authorization", "Bearer k-bench")
					req.Header.Set("X-Thread-Id", "t-bench")
					req.Header.Set("X-Bench-Events", events)
					req.SetBodyString(body)
					if err := client.Do(req, resp); err != nil {
						b.Fatal(err)
					}
					if resp.StatusCode() != 200 || !bytes.HasSuffix(resp.Body(), []byte("data: [DONE]\n\n")) {
						b.Fatalf("status %d, body %.200q", resp.StatusCode(), resp.Body())
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*(n+3)), "ns/event")
			})
		}
	}
}
