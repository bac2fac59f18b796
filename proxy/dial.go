package proxy

import (
	"crypto/tls"
	"net"
	"net/url"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/config"
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
	if r.err != nil {
		return nil, r.err
	}
	return wrapUpstreamConn(r.conn), nil
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

// upstreamConn is an upstream connection that can be found again from the
// response read through it: its LocalAddr, which fasthttp keeps on the
// Response (ParseNetConn), points back to it. The round trip uses this to
// lift the read deadline timeouts.first_byte set once the response head is
// in: fasthttp leaves a request's deadline on the connection while a
// streamed body is read, so without this every stream was cut at
// first_byte, counted from the request's start.
type upstreamConn struct {
	net.Conn
	addr upstreamAddr
}

// upstreamAddr is an upstreamConn's local address.
type upstreamAddr struct {
	net.Addr
	conn *upstreamConn
}

func wrapUpstreamConn(c net.Conn) *upstreamConn {
	uc := &upstreamConn{Conn: c}
	uc.addr = upstreamAddr{Addr: c.LocalAddr(), conn: uc}
	return uc
}

func (c *upstreamConn) LocalAddr() net.Addr { return &c.addr }

// Handshake keeps a TLS connection recognisable as one to fasthttp, which
// leaves a conn with a Handshake method alone.
func (c *upstreamConn) Handshake() error {
	if h, ok := c.Conn.(interface{ Handshake() error }); ok {
		return h.Handshake()
	}
	return nil
}

// setUpstreamReadDeadline sets the read deadline of the connection resp is
// read through; it reports false when resp did not come through an
// upstreamConn (it then keeps the deadline of its request).
func setUpstreamReadDeadline(resp *fasthttp.Response, t time.Time) bool {
	a, ok := resp.LocalAddr().(*upstreamAddr)
	if !ok {
		return false
	}
	return a.conn.SetReadDeadline(t) == nil
}

// newHostClient makes the HTTP client for one upstream. It streams response
// bodies (nothing buffers a stream) and sets no read timeout: streams have
// their own first-byte, idle and total clocks.
func newHostClient(u *url.URL, cfg *config.Config, maxConns int) *fasthttp.HostClient {
	if maxConns <= 0 {
		maxConns = 1 << 16
	}
	host := u.Host
	isTLS := u.Scheme == "https"
	if u.Port() == "" {
		if isTLS {
			host += ":443"
		} else {
			host += ":80"
		}
	}
	var dialer upstreamDialer
	if isTLS {
		dialer.tls = &tls.Config{ServerName: u.Hostname()}
	}
	return &fasthttp.HostClient{
		Addr:                     host,
		IsTLS:                    isTLS,
		DialTimeout:              dialer.dial,
		StreamResponseBody:       true,
		NoDefaultUserAgentHeader: true,
		MaxIdleConnDuration:      60 * time.Second,
		// Every open stream holds one upstream connection; fasthttp's
		// default cap (512) would refuse the 513th stream outright.
		MaxConns:           maxConns,
		MaxConnWaitTimeout: 10 * time.Second,
		// The read buffer holds the response head, and stays with the
		// connection while a stream is read through it: one per open
		// stream. Provider heads are 1–3 KB.
		ReadBufferSize: cfg.Limits.MaxUpstreamHeaderBytes,
		// Head and body of a request up to 64 KiB go out in one write
		// (with the default 4 KiB, a 7 KB body took two). The writer is
		// pooled and held only while a request is written.
		WriteBufferSize:     64 << 10,
		WriteTimeout:        cfg.Limits.WriteTimeout.D(),
		MaxResponseBodySize: 0,
		// Keep header case and path bytes exactly as the client sent them.
		DisablePathNormalizing:        true,
		DisableHeaderNamesNormalizing: true,
		// An upstream request is retried only by chronicle's own policy,
		// never silently (a POST may have spent tokens).
		RetryIfErr: func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
	}
}
