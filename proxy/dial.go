package proxy

import (
	"crypto/tls"
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// upstreamDialer opens upstream connections on a goroutine of their own.
//
// A TCP dial through the net package takes some 4 KiB of stack below the
// request's frames, and a TLS handshake more; on the goroutine that serves
// the client connection it grew the stack from 8 to 16 KiB, which an open
// stream then kept (the garbage collector shrinks a stack only when a
// quarter of it is enough). The dialing goroutine ends with the dial and
// gives its stack back. A dial happens once per new upstream connection,
// against a round trip of the network; the goroutine costs about a
// microsecond.
type upstreamDialer struct {
	// tls is the client configuration for an https upstream (ServerName
	// set), nil for plain http.
	tls *tls.Config
}

type dialResult struct {
	conn net.Conn
	err  error
}

// dial is a fasthttp.DialFuncWithTimeout. For TLS it also completes the
// handshake, within the same timeout (fasthttp's default dial timeout when
// none is given), so that fasthttp, which leaves a conn that already has a
// Handshake method alone, does not run it on the caller.
func (d upstreamDialer) dial(addr string, timeout time.Duration) (net.Conn, error) {
	done := make(chan dialResult, 1)
	go func() {
		conn, err := d.dialHere(addr, timeout)
		done <- dialResult{conn, err}
	}()
	r := <-done
	return r.conn, r.err
}

func (d upstreamDialer) dialHere(addr string, timeout time.Duration) (net.Conn, error) {
	if timeout <= 0 {
		// fasthttp passes none for a request without a deadline.
		timeout = fasthttp.DefaultDialTimeout
	}
	deadline := time.Now().Add(timeout)
	conn, err := fasthttp.DialTimeout(addr, timeout)
	if err != nil || d.tls == nil {
		return conn, err
	}
	tc := tls.Client(conn, d.tls)
	if err := tc.SetDeadline(deadline); err != nil {
		conn.Close()
		return nil, err
	}
	if err := tc.Handshake(); err != nil {
		conn.Close()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return nil, fasthttp.ErrTLSHandshakeTimeout
		}
		return nil, err
	}
	if err := tc.SetDeadline(time.Time{}); err != nil {
		conn.Close()
		return nil, err
	}
	return tc, nil
}
