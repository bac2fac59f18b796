package proxy

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/config"
)

// fasthttpRecords is a slog handler that keeps every record's text and
// tells when one from fasthttp arrives.
type fasthttpRecords struct {
	buf  *syncBuffer
	text slog.Handler
	seen chan struct{}
}

func (h *fasthttpRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *fasthttpRecords) WithAttrs(a []slog.Attr) slog.Handler {
	return &fasthttpRecords{buf: h.buf, text: h.text.WithAttrs(a), seen: h.seen}
}
func (h *fasthttpRecords) WithGroup(g string) slog.Handler {
	return &fasthttpRecords{buf: h.buf, text: h.text.WithGroup(g), seen: h.seen}
}
func (h *fasthttpRecords) Handle(ctx context.Context, r slog.Record) error {
	err := h.text.Handle(ctx, r)
	fromFasthttp := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "component" && a.Value.String() == "fasthttp" {
			fromFasthttp = true
		}
		return true
	})
	if fromFasthttp {
		select {
		case h.seen <- struct{}{}:
		default:
		}
	}
	return err
}

// TestMalformedRequestLogRedactsKeys is issue 33's item 9: a request that
// fasthttp cannot parse was logged, at debug level, with its raw buffer,
// client keys included. Each request goes over a real socket to a real
// server whose log is kept; none of the keys may appear in it.
func TestMalformedRequestLogRedactsKeys(t *testing.T) {
	secrets := []string{"sk-bearer-SECRET1", "sk-xapi-SECRET2", "g-goog-SECRET3", "AIza-query-SECRET4"}
	requests := []string{
		// a header line without a colon
		"POST /openai/v1/chat/completions?key=AIza-query-SECRET4 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-bearer-SECRET1\r\nx-api-key: sk-xapi-SECRET2\r\nX-Goog-Api-Key: g-goog-SECRET3\r\nthis is not a header\r\n\r\n",
		// a request line fasthttp cannot read
		"POST\x01/openai/v1/chat/completions?key=AIza-query-SECRET4 HTTP/1.1\r\nAuthorization: Bearer sk-bearer-SECRET1\r\nx-api-key: sk-xapi-SECRET2\r\nx-goog-api-key: g-goog-SECRET3\r\n\r\n",
		// HTTP/1.1 without a Host header
		"GET /gemini/v1beta/models?key=AIza-query-SECRET4 HTTP/1.1\r\nauthorization: bearer sk-bearer-SECRET1\r\nX-API-KEY: sk-xapi-SECRET2\r\nx-goog-api-key:g-goog-SECRET3\r\n\r\n",
		// a credential header without its colon, which fasthttp quotes
		"POST /openai/v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization Bearer sk-bearer-SECRET1\r\n\r\n",
		"POST /openai/v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-api-key sk-xapi-SECRET2\r\n\r\n",
		// a body that is not the chunked encoding it claims
		"POST /openai/v1/chat/completions?key=AIza-query-SECRET4 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-bearer-SECRET1\r\nx-api-key: sk-xapi-SECRET2\r\nx-goog-api-key: g-goog-SECRET3\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{\"key\":\"x\"}\r\n0\r\n\r\n",
	}
	cfg, err := config.Parse([]byte("connections: [{name: openai, provider: openai, base_url: 'http://127.0.0.1:9'}, {name: gemini, provider: gemini, base_url: 'http://127.0.0.1:9'}]"), noEnvLookup)
	if err != nil {
		t.Fatal(err)
	}
	buf := &syncBuffer{}
	h := &fasthttpRecords{buf: buf, text: slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}), seen: make(chan struct{}, 1)}
	srv, err := New(cfg, Options{Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
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

	for i, req := range requests {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		resp, _ := io.ReadAll(c) // the server answers and closes
		c.Close()
		if !bytes.HasPrefix(resp, []byte("HTTP/1.1 4")) {
			t.Errorf("request %d: answer %q, want a 4xx", i, resp)
		}
		// fasthttp logs the connection's error after it closed it.
		select {
		case <-h.seen:
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d: fasthttp logged nothing; log:\n%s", i, buf.String())
		}
	}
	log := buf.String()
	t.Logf("log:\n%s", log)
	for _, s := range secrets {
		if strings.Contains(log, s) {
			t.Errorf("the log holds the key %q", s)
		}
	}
}

func noEnvLookup(string) (string, bool) { return "", false }

// TestRedactCredentials: what fasthttp logged of unparsable requests before
// SecureErrorLogMessage (raw buffers, quoted), and what it still quotes,
// keeps no credential once redacted.
func TestRedactCredentials(t *testing.T) {
	lines := []string{
		`error when reading request headers: malformed mime header: missing colon: "this is not a header": buffer size=200, contents: "POST /openai/v1/chat/completions?key=AIza-query-SECRET4 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-bearer-SECRET1\r\nx-api-key: sk-xapi-SECRET2\r\nX-Goog-Api-Key: g-goog-SECRET3\r\nthis is not a header\r\n\r\n"`,
		`unsupported http request method "POST\x01/openai/v1/chat/completions?key=AIza-query-SECRET4" in "POST\x01/openai/v1/chat/completions?key=AIza-query-SECRET4 HTTP/1.1\r\nauthorization:bearer sk-bearer-SECRET1\r\nX-API-KEY:sk-xapi-SECRET2\r\nx-goog-api-key:  g-goog-SECRET3\r\n\r\n"`,
		"0.001 #0000000100000001 - 127.0.0.1:8080<->127.0.0.1:5555 - GET http://x/gemini/v1beta/models?alt=sse&key=AIza-query-SECRET4 - oops",
		"raw: Authorization: Bearer sk-bearer-SECRET1\r\nx-goog-api-key: g-goog-SECRET3\r\n",
		`missing colon: "Authorization Bearer sk-bearer-SECRET1"`,
		`contents: "...Bearer sk-bearer-SECRET1\r\nx-api-key sk-xapi-SECRET2"`,
	}
	for _, l := range lines {
		got := redactCredentials(l)
		for _, s := range []string{"SECRET1", "SECRET2", "SECRET3", "SECRET4"} {
			if strings.Contains(got, s) {
				t.Errorf("redactCredentials(%q) = %q: keeps %s", l, got, s)
			}
		}
		if !strings.Contains(got, "[redacted]") {
			t.Errorf("redactCredentials(%q) = %q: nothing marked", l, got)
		}
	}
	if got := redactCredentials("GET /openai/v1/models?limit=5 HTTP/1.1"); got != "GET /openai/v1/models?limit=5 HTTP/1.1" {
		t.Errorf("a line without credentials changed: %q", got)
	}
}
