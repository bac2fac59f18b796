// The upstream stage: the request chronicle sends (hop-by-hop headers out,
// the pool key and session headers in, the composed body, spliced when
// large), the round trip with its retry policy, and the response head
// copied back.

package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/limiter"
	"github.com/chronicle-proxy/chronicle/proxy/config"
	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/valyala/fasthttp"
)

// hopHeaders are meaningful only for one hop and never forwarded (RFC 9110
// §7.6.1), plus the framing headers fasthttp sets itself.
var hopHeaders = [][]byte{
	[]byte("Connection"), []byte("Proxy-Connection"), []byte("Keep-Alive"),
	[]byte("Proxy-Authenticate"), []byte("Proxy-Authorization"), []byte("Te"),
	[]byte("Trailer"), []byte("Transfer-Encoding"), []byte("Upgrade"),
	[]byte("Content-Length"), []byte("Host"),
}

// chronicleHeaders are chronicle's own request headers; the upstream never
// sees them.
var chronicleHeaders = [][]byte{
	[]byte("X-Thread-Id"), []byte("X-Thread-Mode"), []byte("X-Run-Id"), []byte("X-On-Disconnect"),
	[]byte("X-Chronicle-Subject"),
}

func isHeaderIn(name []byte, set [][]byte) bool {
	for _, h := range set {
		if bytes.EqualFold(name, h) {
			return true
		}
	}
	return false
}

// connectionListed reports whether name is listed in a Connection header
// value (those headers are hop-by-hop too).
func connectionListed(connHeader, name []byte) bool {
	for len(connHeader) > 0 {
		i := bytes.IndexByte(connHeader, ',')
		var tok []byte
		if i < 0 {
			tok, connHeader = connHeader, nil
		} else {
			tok, connHeader = connHeader[:i], connHeader[i+1:]
		}
		if bytes.EqualFold(bytes.TrimSpace(tok), name) {
			return true
		}
	}
	return false
}

// upBodyPool recycles the buffers upstream bodies are built in (the
// request body with a session key added): a long thread's body is tens of
// KB, allocated and zeroed per request otherwise.
var upBodyPool sync.Pool

// maxPooledBody bounds what upBodyPool keeps.
const maxPooledBody = 1 << 20

// upstreamBuf returns a buffer with room for a body of n bytes and a few
// added members, for ex to release once its round trip is over.
func (ex *exchange) upstreamBuf(n int) []byte {
	n += 512
	if n > maxPooledBody {
		return nil
	}
	bp, _ := upBodyPool.Get().(*[]byte)
	if bp == nil || cap(*bp) < n {
		b := make([]byte, 0, n+n/4)
		bp = &b
	}
	ex.upBuf = bp
	return (*bp)[:0]
}

// releaseUpstreamBuf recycles upBuf; the upstream request no longer
// reads it.
func (ex *exchange) releaseUpstreamBuf() {
	if ex.upBuf != nil {
		upBodyPool.Put(ex.upBuf)
		ex.upBuf = nil
	}
}

// roundTrip sends the upstream request, retrying 429 and 5xx answers with
// backoff as the connection's retry policy allows. A retry happens only
// here, before any byte of the answer went to the client.
func (ex *exchange) roundTrip(ctx *fasthttp.RequestCtx, rest []byte, cred credential, body []byte) error {
	up := ex.up
	policy := limiter.RetryPolicy{MaxAttempts: up.cfg.Retry.MaxAttempts, BaseBackoff: up.cfg.Retry.BaseBackoff.D(), MaxBackoff: up.cfg.Retry.MaxBackoff.D()}
	for attempt := 1; ; attempt++ {
		if ex.req == nil {
			ex.req = fasthttp.AcquireRequest()
		}
		var poolKey config.Secret
		if ex.adm != nil && ex.adm.key != nil {
			poolKey = config.Secret(ex.adm.key.Secret().Reveal())
		}
		ex.buildRequest(ctx, rest, poolKey, cred, body)
		deadline := time.Now().Add(up.cfg.Timeouts.FirstByte.D())
		if err := up.client.DoDeadline(ex.req, ex.resp, deadline); err != nil {
			return err
		}
		ex.s.metrics.ObserveTTFB(up.cfg.Name, up.cfg.Timeouts.FirstByte.D(), deadline)
		ex.liftFirstByteDeadline()
		status := ex.resp.StatusCode()
		if !limiter.Retryable(status) {
			return nil
		}
		retryAfter := limiter.ParseRetryAfter(string(ex.resp.Header.Peek("Retry-After")), time.Now())
		wait, again := policy.Delay(attempt, retryAfter)
		if !again {
			return nil
		}
		// This answer goes nowhere: drop it, let the key cool down if it
		// was a 429, and try again (with another key when the pool has one).
		_ = ex.resp.CloseBodyStream()
		ex.resp.Reset()
		ex.s.metrics.CountRetry()
		if ex.adm != nil && ex.adm.key != nil {
			// The key cools down for the upstream's Retry-After; the retry
			// goes out on another key at once (after the base backoff).
			ex.adm.key.Done(status, retryAfter)
			ex.adm.key = nil
			lease, err := up.keys.Acquire()
			if err != nil {
				return nil // every key is cooling: hand on this answer
			}
			ex.adm.key = lease
			wait, _ = policy.Delay(attempt, 0)
		}
		if err := limiter.Sleep(context.Background(), wait); err != nil {
			return err
		}
		ex.req.Reset()
	}
}

// liftFirstByteDeadline ends timeouts.first_byte's hold on the upstream
// connection once the response head is in: fasthttp leaves the request's
// deadline on the connection while the body is read. A stream's body is
// then bounded by the relay's own clocks (idle, total); a sized body,
// which follows its head at once, by timeouts.idle.
func (ex *exchange) liftFirstByteDeadline() {
	var until time.Time
	if ex.resp.Header.ContentLength() >= 0 && !bytes.HasPrefix(ex.resp.Header.ContentType(), []byte("text/event-stream")) {
		until = time.Now().Add(ex.up.cfg.Timeouts.Idle.D())
	}
	setUpstreamReadDeadline(ex.resp, until)
}

// buildRequest copies the client's request into the upstream request: method,
// the path after the connection segment appended to base_url, query, body,
// and every header but hop-by-hop ones and chronicle's own. With a pool key,
// the client's credential is removed and the pool key set the provider's way.
func (ex *exchange) buildRequest(ctx *fasthttp.RequestCtx, rest []byte, poolKey config.Secret, cred credential, body []byte) {
	req := ex.req
	src := &ctx.Request
	if poolKey != "" && cred == credQueryKey {
		src.URI().QueryArgs().Del("key")
	}
	buf := bufPool.Get().(*[]byte)
	uri := append((*buf)[:0], ex.up.prefix...)
	uri = append(uri, rest...)
	if q := src.URI().QueryArgs().QueryString(); len(q) > 0 {
		uri = append(uri, '?')
		uri = append(uri, q...)
	}
	req.Header.DisableNormalizing()
	req.URI().DisablePathNormalizing = true
	req.SetRequestURIBytes(uri)
	*buf = uri
	bufPool.Put(buf)
	req.Header.SetMethodBytes(src.Header.Method())

	connHeader := src.Header.Peek("Connection")
	for k, v := range src.Header.All() {
		if isHeaderIn(k, hopHeaders) || isHeaderIn(k, chronicleHeaders) || connectionListed(connHeader, k) {
			continue
		}
		if bytes.EqualFold(k, []byte("Accept-Encoding")) {
			continue
		}
		if ex.span != nil && isTraceHeader(k) {
			continue // the upstream's parent is chronicle's span
		}
		if poolKey != "" && (bytes.EqualFold(k, []byte("Authorization")) || bytes.EqualFold(k, []byte("X-Api-Key")) || bytes.EqualFold(k, []byte("X-Goog-Api-Key"))) {
			continue
		}
		req.Header.AddBytesKV(k, v)
	}
	// chronicle reads what passes through it, so it asks for plain bytes.
	req.Header.Set("Accept-Encoding", "identity")
	if poolKey != "" {
		name, prefix := adapters.KeyHeader(ex.ad, &src.Header)
		req.Header.Set(name, prefix+poolKey.Reveal())
	}
	for _, h := range ex.prepared.Headers {
		req.Header.Set(h.Name, h.Value)
	}
	if ex.span != nil {
		ex.s.tracing.prop.Inject(ex.traceCtx, headerCarrier{&req.Header})
	}
	// On a gated connection the next request of the slots' order may go
	// once this one's body is being written: its connection is held by
	// then (a request without a body lets it go now).
	var started func()
	if ex.adm != nil && ex.adm.order.pending() {
		if started = ex.adm.order.give; len(body) == 0 && ex.prepared.Insert == nil {
			started()
			started = nil
		}
	}
	if ex.prepared.Insert != nil {
		ex.spliced = splicedBody{parts: [3][]byte{body[:ex.prepared.At], ex.prepared.Insert, body[ex.prepared.At:]}, started: started}
		req.SetBodyStream(&ex.spliced, len(body)+len(ex.prepared.Insert))
		return
	}
	if started != nil {
		ex.spliced = splicedBody{parts: [3][]byte{body}, started: started}
		req.SetBodyStream(&ex.spliced, len(body))
		return
	}
	req.SetBodyRaw(body)
}

// upstreamBody returns a copy of the body buildRequest sends, for the
// run's audit record.
func (ex *exchange) upstreamBody(body []byte) []byte {
	if ex.prepared.Insert == nil {
		return append([]byte(nil), body...)
	}
	return adapters.Upstream{Body: body, Insert: ex.prepared.Insert, At: ex.prepared.At}.Bytes()
}

// splicedBody is an upstream body sent in pieces, in order, without
// joining them: fasthttp writes a sized body stream through its WriteTo,
// so each piece goes from its own memory to the connection's buffer, or
// straight to the socket when it is larger.
type splicedBody struct {
	parts [3][]byte
	i     int
	// started, when set, runs as the body is first read.
	started func()
}

func (b *splicedBody) start() {
	if b.started != nil {
		b.started()
		b.started = nil
	}
}

func (b *splicedBody) Read(p []byte) (int, error) {
	b.start()
	for b.i < len(b.parts) && len(b.parts[b.i]) == 0 {
		b.i++
	}
	if b.i == len(b.parts) {
		return 0, io.EOF
	}
	n := copy(p, b.parts[b.i])
	b.parts[b.i] = b.parts[b.i][n:]
	return n, nil
}

func (b *splicedBody) WriteTo(w io.Writer) (int64, error) {
	b.start()
	var total int64
	for ; b.i < len(b.parts); b.i++ {
		n, err := w.Write(b.parts[b.i])
		total += int64(n)
		b.parts[b.i] = b.parts[b.i][n:]
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// copyResponseHead copies the upstream status and end-to-end headers.
func (ex *exchange) copyResponseHead(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(ex.resp.StatusCode())
	connHeader := ex.resp.Header.Peek("Connection")
	for k, v := range ex.resp.Header.All() {
		if isHeaderIn(k, hopHeaders) || connectionListed(connHeader, k) {
			continue
		}
		ctx.Response.Header.AddBytesKV(k, v)
	}
}

// writeUpstreamError answers a failed upstream round trip (apierr.Upstream:
// 504 for a timeout before the response head, 502 for anything else).
func (s *Server) writeUpstreamError(ctx *fasthttp.RequestCtx, shape adapters.Adapter, err error) {
	e := apierr.Upstream(err)
	if e.Code != apierr.UpstreamTimeout {
		s.log.Warn("upstream request failed", "err", err)
		if small := (*fasthttp.ErrSmallBuffer)(nil); errors.As(err, &small) {
			e = apierr.New(apierr.UpstreamUnavailable, fmt.Sprintf("The upstream's response headers are larger than this proxy accepts (limits.max_upstream_header_bytes = %d).", s.cfg.Limits.MaxUpstreamHeaderBytes))
		}
	}
	apierr.Write(ctx, shape, e)
}
