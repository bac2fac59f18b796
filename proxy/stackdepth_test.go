//go:build !race

// The race detector's instrumentation makes every frame larger, so these
// depths hold only without it; scripts/test runs this file on its own.

package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/chronicle-proxy/chronicle/proxy/config"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/spool"
	"github.com/valyala/fasthttp"
)

// connectionStackBudget is how deep a request may go on its connection's
// goroutine: an 8 KiB stack less the runtime's 928-byte guard, less a
// margin. An open stream keeps the stack its request grew, so a path that
// goes deeper doubles the stack of every stream (docs/design.md, "Runtime
// mechanics").
const connectionStackBudget = 7000

var stackPadSink uintptr

// stackPad calls fn below levels frames of its own, each a 240-byte array
// and the frame's words; it records the depth of each frame's array in
// stackPadSink, so that stackPadLevel can measure a frame.
//
//go:noinline
func stackPad(levels int, fn func()) {
	var b [240]byte
	b[levels%len(b)] = byte(levels)
	stackPadSink = uintptr(unsafe.Pointer(&b[0])) + uintptr(b[(levels+1)%len(b)])
	if levels == 0 {
		fn()
		return
	}
	stackPad(levels-1, fn)
}

// stackPadLevel is the stack one level of stackPad takes, as this build
// lays its frame out.
func stackPadLevel() int {
	var outer uintptr
	stackPad(1, func() { outer = stackPadSink })
	var inner uintptr
	stackPad(0, func() { inner = stackPadSink })
	return int(inner - outer)
}

// TestConnectionStackStaysSmall runs persisted turns (a stream on a new
// thread, one continuing it, a non-stream one) on each store with the
// proxy's handler and stream writer called below a padding, under a
// 16 KiB stack limit: a path that goes deeper than connectionStackBudget
// on the connection's goroutine passes the limit, and the runtime stops
// the test binary with that goroutine's traceback (fatal error: stack
// overflow), which names the path. The work a turn does on goroutines of
// its own (starting it, dialing the upstream) has the whole 16 KiB.
func TestConnectionStackStaysSmall(t *testing.T) {
	m := startMock(t)
	redisStore := sharedRedis(t)
	stream := func(body []byte) string { return strings.Replace(string(body), "{", `{"stream":true,`, 1) }
	noStream := func(body []byte) string { return strings.Replace(string(body), `"stream":true`, `"stream":false`, 1) }
	// Each format's tool-call fixtures (restore, repair and parked runs
	// are on the path), streamed and not; OpenAI chat with a plain
	// history too.
	type turn struct{ path, body string }
	openai := "/openai/v1/chat/completions"
	turns := []turn{
		{openai, `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{openai, `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"again"}]}`},
		{openai, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"once more"}]}`},
		{"/deepseek/chat/completions", stream(fixture(t, "deepseek/request.parallel-tools.json"))},
		{"/deepseek/chat/completions", noStream(fixture(t, "deepseek/request.tool-results.json"))},
		{"/gemini/v1beta/models/gemini-3-flash-preview:streamGenerateContent?alt=sse", string(fixture(t, "gemini/request.parallel-tools.json"))},
		{"/gemini/v1beta/models/gemini-3-flash-preview:streamGenerateContent", string(fixture(t, "gemini/request.tool-results.json"))},
		{"/gemini/v1beta/models/gemini-3-flash-preview:generateContent", string(fixture(t, "gemini/request.tool-results.json"))},
		{"/openai/v1/responses", stream(fixture(t, "openai-responses/request.parallel-tools.json"))},
		{"/openai/v1/responses", noStream(fixture(t, "openai-responses/request.tool-results.json"))},
	}
	for _, tc := range []struct {
		name    string
		persist bool
		open    func(testing.TB) store.Store
	}{
		{"pass-through", false, func(t testing.TB) store.Store { return openEmbedded(t, t.TempDir()) }},
		{"embedded", true, func(t testing.TB) store.Store { return openEmbedded(t, t.TempDir()) }},
		{"redis", true, func(testing.TB) store.Store { return redisStore() }},
		// As chronicle serve runs Redis: behind the spool, whose frames
		// are on the finish's path too.
		{"redis with the spool", true, func(t testing.TB) store.Store {
			sp, err := spool.Open(redisStore(), spool.Options{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			return sp
		}},
		// With encryption at rest (store/sealed), the wrapper's frame
		// above the store's. (Over the spool as well, as chronicle serve
		// runs Redis, the wrapper's 152-byte frame takes the finish past
		// connectionStackBudget by under 50 bytes, into its margin: it
		// passes with 7050, still within the 8 KiB stack's 7264. That
		// case is not here until a frame on the path is trimmed.)
		{"embedded sealed", true, func(t testing.TB) store.Store { return sealedOver(t, openEmbedded(t, t.TempDir())) }},
		{"redis sealed", true, func(t testing.TB) store.Store { return sealedOver(t, redisStore()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conns := "connections:\n"
			for _, c := range []string{"openai", "deepseek", "gemini"} {
				conns += fmt.Sprintf("  - {name: %s, provider: %s, base_url: \"${MOCK}\", persist: %v}\n", c, c, tc.persist)
			}
			cfg, err := config.Parse([]byte(conns), func(k string) (string, bool) { return m.URL(), k == "MOCK" })
			if err != nil {
				t.Fatal(err)
			}
			st := tc.open(t)
			srv, err := New(cfg, Options{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			level := stackPadLevel()
			if level < 240 || level > 512 {
				t.Fatalf("a padding frame measured %d bytes", level)
			}
			// 16 KiB less the guard, less the padding, is the budget; one
			// level less for the wrappers' own frames (about 300 bytes).
			levels := (16<<10-928-connectionStackBudget)/level - 1
			handler := srv.srv.Handler
			srv.srv.Handler = func(ctx *fasthttp.RequestCtx) {
				stackPad(levels, func() { handler(ctx) })
				if bw, ok := ctx.Response.BodyStream().(*bodyWriter); ok {
					sw := bw.sw
					bw.sw = func(w *bufio.Writer) { stackPad(levels, func() { sw(w) }) }
				}
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { defer close(done); _ = srv.Serve(ln) }()
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = srv.Shutdown(ctx)
				<-done
			}()

			defer debug.SetMaxStack(debug.SetMaxStack(16 << 10))
			client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
			defer client.CloseIdleConnections()
			for i, tr := range turns {
				req, err := http.NewRequest("POST", "http://"+ln.Addr().String()+tr.path, strings.NewReader(tr.body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer k")
				req.Header.Set("X-Goog-Api-Key", "k")
				req.Header.Set("X-Thread-Id", fmt.Sprintf("stack-%d", i))
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("turn %d (%s): %d %v %.300s", i, tr.path, resp.StatusCode, err, got)
				}
				if tc.persist && resp.Header.Get("X-Persisted") == "false" {
					t.Fatalf("turn %d (%s) was not persisted", i, tr.path)
				}
			}
			if tc.persist {
				for i := range turns {
					k := store.Key{Tenant: passThroughTenant([]byte("k")), Thread: fmt.Sprintf("stack-%d", i)}
					if th, err := st.LoadThread(context.Background(), k); err != nil || len(th.Messages) < 2 {
						t.Fatalf("thread of turn %d: %d messages, %v", i, len(th.Messages), err)
					}
				}
			}
		})
	}
}
