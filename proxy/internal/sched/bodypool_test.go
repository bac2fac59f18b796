package sched

import (
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestHeaderReceivedIsRequests: fasthttp's server hands HeaderReceived the
// header inside the Request its handler then gets, which RequestOf (and so
// lending a body buffer) relies on.
func TestHeaderReceivedIsRequests(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan *fasthttp.Request, 1)
	srv := &fasthttp.Server{
		HeaderReceived: func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			seen <- RequestOf(h)
			return fasthttp.RequestConfig{}
		},
		Handler: func(ctx *fasthttp.RequestCtx) {
			if r := <-seen; r != &ctx.Request {
				ctx.SetStatusCode(500)
				return
			}
			ctx.SetBody(ctx.PostBody())
		},
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	var req fasthttp.Request
	var resp fasthttp.Response
	req.SetRequestURI("http://" + ln.Addr().String() + "/")
	req.Header.SetMethod("POST")
	req.SetBodyString(strings.Repeat("x", 100))
	if err := fasthttp.Do(&req, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != 200 || len(resp.Body()) != 100 {
		t.Fatalf("the hook's header is not the handler's request's: %d", resp.StatusCode())
	}
}
