package proxy

import (
	"bufio"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/chronicle-proxy/chronicle/proxy/config"
)

// TestLargeRequestProcs: with LargeRequestProcs, GOMAXPROCS is raised
// while a request of 1 MiB or more is in flight, and only then: the
// upstream (in this process) sees 2 Ps for large requests, 1 for small
// ones, and 1 is back once the large ones are answered, also when two
// overlap or the upstream fails. A large request whose answer streams
// gives the second P back once the stream's head is in.
func TestLargeRequestProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var mu sync.Mutex
	seen := map[string]int{}
	hold := make(chan struct{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	arrived := make(chan struct{}, 4)
	streamOn := make(chan struct{})
	up := &fasthttp.Server{MaxRequestBodySize: 8 << 20, Handler: func(ctx *fasthttp.RequestCtx) {
		name := string(ctx.Request.Header.Peek("X-Name"))
		mu.Lock()
		seen[name] = runtime.GOMAXPROCS(0)
		mu.Unlock()
		if strings.HasPrefix(name, "held") {
			arrived <- struct{}{}
			<-hold
		}
		if name == "fails" {
			ctx.SetStatusCode(500)
			return
		}
		if name == "stream" {
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
				w.WriteString("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
				w.Flush()
				<-streamOn
				w.WriteString("data: [DONE]\n\n")
			})
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	}}
	go up.Serve(ln)
	t.Cleanup(func() { up.Shutdown() })
	p := startProxyOpts(t, nil, `
limits: {max_body_bytes: 8388608, read_timeout: 1s}
connections:
  - {name: a, provider: openai, base_url: "http://`+ln.Addr().String()+`", persist: false}
`, Options{LargeRequestProcs: 2})
	large := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("x", 1<<20) + `"}]}`
	post := func(name, body string) int {
		resp, _ := do(t, "POST", p.URL+"/a/v1/chat/completions", body, "Authorization", "Bearer k", "X-Name", name)
		return resp.StatusCode
	}
	post("small", chatBody)
	post("large", large)
	post("fails", large)
	after := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for _, n := range []string{"held-1", "held-2"} {
		wg.Go(func() { post(n, large) })
	}
	<-arrived
	<-arrived
	close(hold)
	wg.Wait()
	mu.Lock()
	want := map[string]int{"small": 1, "large": 2, "fails": 2, "held-1": 2, "held-2": 2}
	for n, w := range want {
		if seen[n] != w {
			t.Errorf("%s: the upstream saw GOMAXPROCS %d, want %d", n, seen[n], w)
		}
	}
	mu.Unlock()
	if after != 1 || runtime.GOMAXPROCS(0) != 1 {
		t.Errorf("GOMAXPROCS after the large requests: %d, then %d; want 1", after, runtime.GOMAXPROCS(0))
	}

	resp := send(t, "POST", p.URL+"/a/v1/chat/completions", large, "Authorization", "Bearer k", "X-Name", "stream")
	defer resp.Body.Close()
	first := readEvent(t, bufio.NewReader(resp.Body))
	during := runtime.GOMAXPROCS(0)
	close(streamOn)
	mu.Lock()
	streamSaw := seen["stream"]
	mu.Unlock()
	if !strings.Contains(first, `"a"`) || streamSaw != 2 || during != 1 {
		t.Errorf("stream: first event %q; the upstream saw %d Ps, the relay ran with %d; want 2 and 1", first, streamSaw, during)
	}

	// A body over max_body_bytes is refused from its headers, before any
	// handler: the hold they took goes with the refusal.
	c, err := net.Dial("tcp", strings.TrimPrefix(p.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /a/v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Length: %d\r\n\r\n", 9<<20)
	status, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if err != nil || !strings.Contains(status, "413") || runtime.GOMAXPROCS(0) != 1 {
		t.Errorf("too large: %q (%v) with GOMAXPROCS %d; want 413 with 1", status, err, runtime.GOMAXPROCS(0))
	}

	// A client that announces a large body and leaves halfway reaches no
	// handler: its hold ends at read_timeout (1s) plus a second.
	c, err = net.Dial("tcp", strings.TrimPrefix(p.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /a/v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Length: %d\r\n\r\n{\"model\":", 2<<20)
	deadline := time.Now().Add(10 * time.Second)
	for runtime.GOMAXPROCS(0) != 2 && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	if runtime.GOMAXPROCS(0) != 2 {
		t.Fatal("a large body's headers did not raise GOMAXPROCS")
	}
	c.Close()
	for runtime.GOMAXPROCS(0) != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if runtime.GOMAXPROCS(0) != 1 {
		t.Error("an abandoned large body kept the second P")
	}
}

// TestHoldProcs: the server's extra Ps are held for work of the process's
// own (the embedded store's compactions) as for a large request, until
// the last hold is released; without LargeRequestProcs a hold changes
// nothing.
func TestHoldProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	cfg := `
connections:
  - {name: a, provider: openai, base_url: "http://127.0.0.1:1", persist: false}
`
	newServer := func(opts Options) *Server {
		c, err := config.Parse([]byte(cfg), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(c, opts)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	p := newServer(Options{LargeRequestProcs: 2})
	first := p.HoldProcs()
	second := p.HoldProcs()
	held := runtime.GOMAXPROCS(0)
	first()
	first() // a second release does nothing
	stillHeld := runtime.GOMAXPROCS(0)
	second()
	if held != 2 || stillHeld != 2 || runtime.GOMAXPROCS(0) != 1 {
		t.Errorf("GOMAXPROCS held %d, after one release %d, after both %d; want 2, 2, 1", held, stillHeld, runtime.GOMAXPROCS(0))
	}
	plain := newServer(Options{})
	release := plain.HoldProcs()
	if runtime.GOMAXPROCS(0) != 1 {
		t.Errorf("a hold without LargeRequestProcs set GOMAXPROCS %d", runtime.GOMAXPROCS(0))
	}
	release()
}
