package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/cmd/mockllm/mock"
	"github.com/chronicle-proxy/chronicle/proxy/config"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/embedded"
	redisstore "github.com/chronicle-proxy/chronicle/store/redis"
	"github.com/chronicle-proxy/chronicle/store/redistest"
)

// backends are the stores every persistence test runs against.
var backends = []struct {
	name string
	open func(t testing.TB) store.Store
}{
	{"embedded", func(t testing.TB) store.Store { return openEmbedded(t, t.TempDir()) }},
	{"redis", func(t testing.TB) store.Store { return sharedRedis(t)() }},
}

// sharedRedis starts a Redis server and returns a function that opens a
// store on it: one per replica of a test.
func sharedRedis(t testing.TB) func() store.Store {
	srv := redistest.Start(t)
	return func() store.Store {
		st, err := redisstore.Open(context.Background(), redisstore.Options{URL: srv.URL()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
}

// openRedis opens a Redis store at url, closed when the test ends.
func openRedis(t testing.TB, url string) *redisstore.Store {
	t.Helper()
	st, err := redisstore.Open(context.Background(), redisstore.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// openEmbedded opens an embedded store for one test. Its block cache is
// small: it lives on the Go heap, and the tests that
// bound the heap a request may grow by (an export) measure the proxy, not
// the store's cache filling.
func openEmbedded(t testing.TB, dir string) store.Store {
	st, err := embedded.Open(dir, embedded.Options{NoSync: true, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// startMock starts the strict mock upstream for one test.
func startMock(t testing.TB) *mock.Server {
	t.Helper()
	m, err := mock.Start("127.0.0.1:0", mock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// testProxy is a chronicle Server listening on a real loopback socket.
type testProxy struct {
	*Server
	URL string
	log *syncBuffer
}

// startProxy parses yamlCfg (with ${MOCK} replaced by the mock's URL) and
// serves it on a free port until the test ends.
func startProxy(t testing.TB, m *mock.Server, yamlCfg string) *testProxy {
	t.Helper()
	return startProxyWith(t, m, yamlCfg, nil)
}

// startProxyWith is startProxy with a store.
func startProxyWith(t testing.TB, m *mock.Server, yamlCfg string, st store.Store) *testProxy {
	t.Helper()
	return startProxyOpts(t, m, yamlCfg, Options{Store: st})
}

// startProxyOpts is startProxy with options (the logger is the test's).
func startProxyOpts(t testing.TB, m *mock.Server, yamlCfg string, opts Options) *testProxy {
	t.Helper()
	env := func(k string) (string, bool) {
		if k == "MOCK" && m != nil {
			return m.URL(), true
		}
		return "", false
	}
	cfg, err := config.Parse([]byte(yamlCfg), env)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	logBuf := &syncBuffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	return &testProxy{Server: srv, URL: "http://" + ln.Addr().String(), log: logBuf}
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	bytes.Buffer
	once sync.Once
	mu   chanMutex
}

type chanMutex chan struct{}

// String is the log so far; the server may still be writing to it.
func (b *syncBuffer) String() string {
	b.lock()
	defer func() { <-b.mu }()
	return b.Buffer.String()
}

func (b *syncBuffer) lock() {
	b.once.Do(func() { b.mu = make(chanMutex, 1) })
	b.mu <- struct{}{}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.lock()
	defer func() { <-b.mu }()
	return b.Buffer.Write(p)
}

// do sends one request and returns the response with its whole body.
func do(t testing.TB, method, url string, body string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	resp := send(t, method, url, body, headers...)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, b
}

// send sends one request and returns the response with its body unread.
func send(t testing.TB, method, url string, body string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp
}

// readEvent reads one SSE block (up to and including its blank line).
func readEvent(t testing.TB, r *bufio.Reader) string {
	t.Helper()
	var sb strings.Builder
	for {
		line, err := r.ReadString('\n')
		sb.WriteString(line)
		if err != nil {
			t.Fatalf("read event: %v (so far %q)", err, sb.String())
		}
		if line == "\n" || line == "\r\n" {
			return sb.String()
		}
	}
}
