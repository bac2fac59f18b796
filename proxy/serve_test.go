package proxy

import (
	"net"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/config"
)

// TestShutdownBeforeServe: a Shutdown that comes before Serve (a signal
// during start-up), or while Serve is starting, leaves no Serve
// accepting: each returns, and the listener is closed.
func TestShutdownBeforeServe(t *testing.T) {
	for _, serveFirst := range []bool{false, true} {
		c, err := config.Parse([]byte(`
connections:
  - {name: a, provider: openai, base_url: "http://127.0.0.1:1", persist: false}
`), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		if serveFirst {
			go func() { served <- s.Serve(ln) }()
		}
		if err := s.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
		if !serveFirst {
			go func() { served <- s.Serve(ln) }()
		}
		select {
		case <-served:
		case <-time.After(30 * time.Second):
			t.Fatalf("serve first %v: Serve still running 30 s after Shutdown", serveFirst)
		}
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
			t.Errorf("serve first %v: the listener still accepts", serveFirst)
		}
	}
}
