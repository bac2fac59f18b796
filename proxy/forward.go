package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"context"
	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/sse"
	"github.com/chronicle-proxy/chronicle/limiter"
	"github.com/chronicle-proxy/chronicle/proxy/config"
	"github.com/chronicle-proxy/chronicle/store"
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

// exchange is one request's trip to the upstream and back.
type exchange struct {
	s      *Server
	up     *upstream
	ad     adapters.Adapter
	tenant string
	req    *fasthttp.Request
	resp   *fasthttp.Response
	// final is the outcome upstreamFailed and respondWhole end the
	// exchange with (here, not in a frame of theirs: see respondWhole).
	final outcome
	// clientConn is the client's connection, for per-flush write deadlines.
	clientConn net.Conn
	// op is what the adapter made of the request.
	op adapters.Op
	// asm assembles a generate stream's turn; it also tells whether the
	// provider's terminal marker arrived. nil for pass-through streams.
	asm adapters.Assembler
	// turn persists the exchange; nil when nothing is stored.
	turn *turn
	// adm is what the request holds from the limiters.
	adm *admission
	// turnDone: the run's end is recorded.
	turnDone bool
	// start is when the request arrived, for the latency metric.
	start time.Time
	// extraHeaders are the adapter's header edits (session ids).
	extraHeaders []adapters.Header
	// addedUsage: chronicle asked for stream usage the client did not, and
	// strips it from what the client receives.
	addedUsage bool
	// detach: a client that leaves does not stop the upstream; the run is
	// read to its end and stored.
	detach bool
	// upBuf holds the upstream body when chronicle built it (from
	// upBodyPool), until the round trip is over.
	upBuf *[]byte
	// upInsert, when not nil, goes into the upstream body at offset upAt
	// (adapters.Upstream.Insert): a large body is sent in three pieces
	// rather than copied to add a member.
	upInsert []byte
	upAt     int
	// spliced is the upstream request's body stream when upInsert is set.
	spliced splicedBody
	// awaitRun names the run in flight that a non-stream retry (its
	// X-Run-Id) is answered from once it ends (answerWhenEnded).
	awaitRun *store.RunRef
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

// forward sends the request to the connection's upstream and relays the
// answer: buffered for a sized body, event by event for SSE, chunk by chunk
// for any other body of unknown length.
func (s *Server) forward(ctx *fasthttp.RequestCtx, up *upstream, rest []byte) {
	shape := up.adapter(rest)
	key, cred := clientKey(&ctx.Request)
	if cred == credNone {
		writeError(ctx, shape, apiError{status: fasthttp.StatusUnauthorized, code: codeMissingAPIKey,
			message: "No API key was provided: send it as Authorization: Bearer, x-api-key, x-goog-api-key or ?key=."})
		return
	}
	var tenant string
	if s.clients.enabled() {
		tenant = s.clients.tenant(key)
		if tenant == "" {
			writeError(ctx, shape, apiError{status: fasthttp.StatusUnauthorized, code: codeInvalidAPIKey,
				message: "The API key is not one of this proxy's client keys."})
			return
		}
	} else {
		tenant = passThroughTenant(key)
	}

	ex := &exchange{s: s, up: up, ad: shape, start: time.Now(), tenant: tenant,
		req: fasthttp.AcquireRequest(), resp: fasthttp.AcquireResponse(), clientConn: ctx.Conn()}
	ex.op = shape.Classify(string(ctx.Method()), string(rest), string(ctx.URI().QueryString()), ctx.PostBody())
	body := ctx.PostBody()
	if s.procs != nil && ctx.Request.Header.ContentLength() < 0 && len(body) >= largeRequestBytes {
		// A large chunked body, which headerReceived could not see
		// coming: the hold starts now, and ends with handle as the others.
		s.holdLarge(&ctx.Request.Header)
	}
	adm, ok := s.admit(ctx, ex)
	if !ok {
		ex.release()
		return
	}
	ex.adm = adm
	if ex.op.Kind == adapters.OpGenerate && up.cfg.PersistEnabled() && s.store != nil {
		ex.turn, body, ok = s.starters.begin(s, ctx, ex, body)
		if !ok {
			adm.refund()
			ex.release()
			if ex.awaitRun != nil {
				s.answerWhenEnded(ctx, ex)
			}
			return
		}
	}
	switch string(ctx.Request.Header.Peek("X-On-Disconnect")) {
	case "detach":
		ex.detach = true
	case "abort":
	default:
		ex.detach = up.cfg.OnDisconnect == "detach"
	}
	// Upstream in the order the gate's slots were taken.
	ex.adm.order.await()
	if err := ex.roundTrip(ctx, rest, cred, body); err != nil {
		ex.upstreamFailed(ctx, err)
		return
	}
	// The request body has been sent; the response head is here.
	if ex.req != nil {
		fasthttp.ReleaseRequest(ex.req)
		ex.req = nil
	}
	ex.releaseUpstreamBuf()
	ex.copyResponseHead(ctx)

	ok = ex.resp.StatusCode() < 300
	switch {
	case bytes.HasPrefix(ex.resp.Header.ContentType(), []byte("text/event-stream")):
		ctx.Response.Header.Del("Content-Length")
		if ex.op.Kind == adapters.OpGenerate && ok {
			ex.asm = ex.ad.NewAssembler()
			if ex.turn != nil {
				ex.turn.events = newEventLog(ex.turn)
			}
		}
		setBodyStreamWriter(ctx, ex.relaySSE)
	case ex.resp.Header.ContentLength() < 0:
		if ex.op.Kind == adapters.OpGenerate && ok && ex.op.Framing == adapters.FramingJSONArray {
			ex.asm = ex.ad.NewAssembler()
		}
		setBodyStreamWriter(ctx, ex.relayChunks)
	default:
		ex.respondWhole(ctx, ok)
	}
}

// upstreamFailed ends an exchange whose upstream round trip failed. It and
// respondWhole are functions of their own, with the outcome in the
// exchange: the finish's store round trip runs below them, on the
// connection's goroutine, where every frame counts against the 8 KiB
// stack an open connection keeps (docs/design.md).
//
//go:noinline
func (ex *exchange) upstreamFailed(ctx *fasthttp.RequestCtx, err error) {
	ex.release()
	ex.final = outcome{reason: "upstream_unreachable", status: 502}
	if isTimeout(err) {
		ex.final.reason, ex.final.status = string(limiter.FirstByteTimeout), 504
	}
	ex.end(&ex.final)
	ex.s.writeUpstreamError(ctx, ex.ad, err)
}

// respondWhole answers with an upstream answer of known length, once the
// turn is stored: a 2xx always means the turn is kept.
//
//go:noinline
func (ex *exchange) respondWhole(ctx *fasthttp.RequestCtx, ok bool) {
	body := ex.resp.Body()
	if ex.cutShort(ctx, body) {
		ex.wholeCutShort(ctx)
		return
	}
	o := &ex.final
	*o = outcome{status: ex.resp.StatusCode()}
	if ok && ex.op.Kind == adapters.OpGenerate && (ex.turn != nil || ex.adm.wantsUsage()) {
		o.turn, _ = ex.ad.ParseResponse(body)
		o.response = body
	} else if !ok {
		o.errBody = body
	}
	o.retryAfter = limiter.ParseRetryAfter(string(ex.resp.Header.Peek("Retry-After")), time.Now())
	if err := ex.end(o); err != nil && o.status < 300 {
		// The turn is neither stored nor spooled. Under on_store_error:
		// fail the client learns it from a 503 (the answer is not
		// acknowledged); under pass the answer still goes out (its
		// tokens are spent), marked as not stored.
		if ex.up.cfg.OnStoreError != "pass" {
			ex.s.metrics.countTurnRefused()
			ex.release()
			writeError(ctx, ex.ad, apiError{status: fasthttp.StatusServiceUnavailable, code: codeStoreUnavailable, retryAfter: 1,
				message: "The upstream answered, but the conversation store could not keep the turn; it is not saved. Send the request again."})
			return
		}
		ctx.Response.Header.Set("X-Persisted", "false")
		ex.s.metrics.countUnpersisted()
	}
	ctx.SetBody(body)
	ex.release()
}

// cutShort reports whether a sized upstream body arrived short: the
// connection broke before Content-Length bytes came (fasthttp then gives
// the read error's text as the body).
func (ex *exchange) cutShort(ctx *fasthttp.RequestCtx, body []byte) bool {
	cl := ex.resp.Header.ContentLength()
	switch st := ex.resp.StatusCode(); {
	case cl < 0, ctx.IsHead(), st == fasthttp.StatusNoContent, st == fasthttp.StatusNotModified:
		return false
	}
	return len(body) != cl
}

// wholeCutShort answers an upstream body that broke off: a 502 in the
// provider's shape, never the fragment as a 200; the run ends failed.
//
//go:noinline
func (ex *exchange) wholeCutShort(ctx *fasthttp.RequestCtx) {
	want := ex.resp.Header.ContentLength()
	ex.release()
	ex.final = outcome{status: fasthttp.StatusBadGateway, reason: codeUpstreamTruncated}
	ex.end(&ex.final)
	ex.s.log.Warn("upstream answer broke off before its end", "connection", ex.up.cfg.Name, "content_length", want)
	writeError(ctx, ex.ad, apiError{status: fasthttp.StatusBadGateway, code: codeUpstreamTruncated,
		message: "The upstream's answer broke off before its end; nothing of it is kept. Send the request again."})
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
		ex.s.metrics.observeTTFB(up.cfg.Name, up.cfg.Timeouts.FirstByte.D(), deadline)
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
		ex.s.metrics.countRetry()
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

// endTurn records the run's end, once.
func (ex *exchange) endTurn(o *outcome) error {
	if ex.turn != nil && !ex.turnDone {
		ex.turnDone = true
		return ex.turn.finish(o)
	}
	return nil
}

// end closes the books on an exchange: the run's record (unless the relay
// already wrote it at the provider's last event), the rate-limit settlement
// with real usage, and the gate slot.
func (ex *exchange) end(o *outcome) error {
	err := ex.endTurn(o)
	m := ex.s.metrics
	route := "passthrough"
	if ex.op.Kind == adapters.OpGenerate {
		route = "generate"
		if ex.op.Stream {
			route = "stream"
		}
	}
	m.observeRequest(ex.up.cfg.Name, route, o.status, time.Since(ex.start))
	if u := o.turn.Usage; u.Present {
		m.observeTokens(ex.up.cfg.Name, ex.op.Model, u.InputTokens, u.OutputTokens, u.CachedTokens, u.ReasoningTokens)
	}
	usage := o.turn.Usage
	if o.aborted && !usage.Present {
		usage = adapters.Usage{} // refunds the reservation
	}
	ex.adm.settle(usage, o.status, o.retryAfter)
	return err
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
		if poolKey != "" && (bytes.EqualFold(k, []byte("Authorization")) || bytes.EqualFold(k, []byte("X-Api-Key")) || bytes.EqualFold(k, []byte("X-Goog-Api-Key"))) {
			continue
		}
		req.Header.AddBytesKV(k, v)
	}
	// chronicle reads what passes through it, so it asks for plain bytes.
	req.Header.Set("Accept-Encoding", "identity")
	if poolKey != "" {
		if ex.up.cfg.Provider == config.ProviderGemini && !bytes.Contains(rest, []byte("/openai/")) {
			req.Header.Set("X-Goog-Api-Key", poolKey.Reveal())
		} else {
			req.Header.Set("Authorization", "Bearer "+poolKey.Reveal())
		}
	}
	for _, h := range ex.extraHeaders {
		req.Header.Set(h.Name, h.Value)
	}
	// On a gated connection the next request of the slots' order may go
	// once this one's body is being written: its connection is held by
	// then (a request without a body lets it go now).
	var started func()
	if ex.adm != nil && ex.adm.order.pending() {
		if started = ex.adm.order.give; len(body) == 0 && ex.upInsert == nil {
			started()
			started = nil
		}
	}
	if ex.upInsert != nil {
		ex.spliced = splicedBody{parts: [3][]byte{body[:ex.upAt], ex.upInsert, body[ex.upAt:]}, started: started}
		req.SetBodyStream(&ex.spliced, len(body)+len(ex.upInsert))
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
	if ex.upInsert == nil {
		return append([]byte(nil), body...)
	}
	return adapters.Upstream{Body: body, Insert: ex.upInsert, At: ex.upAt}.Bytes()
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

func (ex *exchange) release() {
	if ex.req != nil {
		fasthttp.ReleaseRequest(ex.req)
		ex.req = nil
	}
	ex.releaseUpstreamBuf()
	if ex.resp != nil {
		_ = ex.resp.CloseBodyStream()
		fasthttp.ReleaseResponse(ex.resp)
		ex.resp = nil
	}
}

// isTimeout reports whether an upstream round trip ran out of time.
func isTimeout(err error) bool {
	var netErr net.Error
	return errors.Is(err, fasthttp.ErrTimeout) || (errors.As(err, &netErr) && netErr.Timeout())
}

// writeUpstreamError maps a failed upstream round trip to a status: a
// timeout before the response head is 504, anything else 502.
func (s *Server) writeUpstreamError(ctx *fasthttp.RequestCtx, shape adapters.Adapter, err error) {
	if isTimeout(err) {
		writeError(ctx, shape, apiError{status: fasthttp.StatusGatewayTimeout, code: codeUpstreamTimeout,
			message: "The upstream did not answer within the connection's timeouts.first_byte."})
		return
	}
	s.log.Warn("upstream request failed", "err", err)
	if small := (*fasthttp.ErrSmallBuffer)(nil); errors.As(err, &small) {
		writeError(ctx, shape, apiError{status: fasthttp.StatusBadGateway, code: codeUpstreamError,
			message: fmt.Sprintf("The upstream's response headers are larger than this proxy accepts (limits.max_upstream_header_bytes = %d).", s.cfg.Limits.MaxUpstreamHeaderBytes)})
		return
	}
	writeError(ctx, shape, apiError{status: fasthttp.StatusBadGateway, code: codeUpstreamError,
		message: "The upstream could not be reached or closed the connection."})
}

// relayChunks copies a body of unknown length (such as Gemini's streamed
// JSON array) to the client as it arrives, flushing after every read. For a
// generate stream it also reads the array's elements for the assembler.
func (ex *exchange) relayChunks(w *bufio.Writer) {
	defer ex.release()
	cfg := ex.up.cfg
	dog := limiter.NewWatchdog(context.Background(), limiter.Timeouts{Idle: cfg.Timeouts.Idle.D(), Total: cfg.Timeouts.Total.D()})
	tee := &chunkTee{w: w, src: ex.resp.BodyStream(), ex: ex, dog: dog, holdEnd: ex.asm != nil && ex.turn != nil}
	// The clocks and a cancel request close the upstream body, which ends
	// the read in flight; no goroutine waits for them.
	rc := new(relayControl)
	rc.init(ex, nil)
	rc.stopOn(dog.Context(), stopTimeout, func() bool { return dog.Fired() != "" })
	if ex.turn != nil {
		rc.stopOn(ex.turn.cancelCtx, stopCancelled, nil)
	}
	// The outcome is the exchange's (on the heap), and the answer is read
	// into it by a function of its own: the finish's store round trip
	// runs below this frame (see respondWhole).
	o := &ex.final
	o.status = ex.resp.StatusCode()
	if ex.asm != nil {
		ar := adapters.NewArrayReader(tee, ex.s.cfg.Limits.MaxSSELineBytes)
		for {
			_, value, err := ar.Next()
			if err != nil {
				break
			}
			_ = ex.asm.Feed(value)
		}
		// Whatever the array reader left unread still goes to the client.
		_, _ = io.Copy(io.Discard, tee)
		ex.takeResult()
	} else {
		_, _ = io.Copy(io.Discard, tee)
		if o.status >= 300 {
			o.errBody = tee.head
		}
	}
	why := rc.finish()
	dog.Stop()
	if r := dog.Fired(); r != "" {
		o.reason = string(r)
	}
	if why == stopCancelled {
		o.aborted, o.reason = true, "cancelled"
	}
	if tee.clientGone && !ex.detach {
		o.aborted, o.reason = true, "client_disconnected"
	}
	if ex.end(o) != nil && o.turn.Terminal && !o.aborted {
		// The turn is neither stored nor spooled: the array's closing
		// bracket, held back, never goes out, so the client's parser
		// finds the answer cut short rather than whole.
		ex.s.metrics.countTurnRefused()
		return
	}
	tee.release()
}

// takeResult sets the final outcome's turn to the assembler's.
//
//go:noinline
func (ex *exchange) takeResult() { ex.final.turn = ex.asm.Result() }

// chunkTee forwards every chunk it reads from the upstream to the client
// before handing it to its reader. A client that leaves stops the upstream
// unless the exchange is detached.
type chunkTee struct {
	w          *bufio.Writer
	src        io.Reader
	ex         *exchange
	clientGone bool
	head       []byte // the first bytes, kept for an error body
	dog        *limiter.Watchdog
	// holdEnd: what could be the array's end (a trailing ']' and the
	// whitespace after it) is held back until the turn is recorded, as a
	// stream's last event is; held is what is held.
	holdEnd bool
	held    []byte
}

func (c *chunkTee) Read(p []byte) (int, error) {
	n, err := c.src.Read(p)
	if n > 0 {
		c.dog.Touch()
		if len(c.head) < 64<<10 {
			c.head = append(c.head, p[:n]...)
		}
		if !c.clientGone {
			out := p[:n]
			var werr error
			if c.holdEnd {
				// More came, so what was held was not the end.
				if len(c.held) > 0 {
					_, werr = c.w.Write(c.held)
					c.held = c.held[:0]
				}
				cut := len(bytes.TrimRight(out, " \t\r\n"))
				if cut > 0 && out[cut-1] == ']' {
					c.held = append(c.held, out[cut-1:]...)
					out = out[:cut-1]
				}
			}
			if werr == nil {
				_, werr = c.w.Write(out)
			}
			if werr != nil || c.ex.flush(c.w) != nil {
				c.clientGone = true
				if !c.ex.detach {
					return n, io.ErrUnexpectedEOF
				}
			}
		}
	}
	return n, err
}

// release sends what was held back, once the turn is recorded.
func (c *chunkTee) release() {
	if len(c.held) > 0 && !c.clientGone {
		if _, err := c.w.Write(c.held); err == nil {
			_ = c.ex.flush(c.w)
		}
		c.held = c.held[:0]
	}
}

// flush sends what is buffered to the client (see flushWithin).
func (ex *exchange) flush(w *bufio.Writer) error {
	return flushWithin(w, ex.clientConn, ex.s.cfg.Limits.WriteTimeout.D())
}

// flushWithin flushes a stream's buffered bytes with a write deadline of
// its own: a client that stops reading is cut off, a stream that keeps
// flowing never is (the server's write timeout would cut it as a whole).
func flushWithin(w *bufio.Writer, conn net.Conn, timeout time.Duration) error {
	if conn != nil {
		_ = conn.SetWriteDeadline(time.Now().Add(timeout))
	}
	return w.Flush()
}

// setBodyStreamWriter is ctx.SetBodyStreamWriter without the goroutine and
// the pipe: fasthttp's own connection goroutine runs sw (WriteTo), each
// flush of w going out as one chunk. An open stream then holds one
// goroutine and two 4 KiB buffers less.
func setBodyStreamWriter(ctx *fasthttp.RequestCtx, sw fasthttp.StreamWriter) {
	ctx.Response.SetBodyStream(&bodyWriter{sw: sw}, -1)
}

// bodyWriter is a body stream written by its StreamWriter when fasthttp
// sends it. Read, for a caller that reads the body instead, and Close, for
// a response whose body is never sent, run sw through fasthttp's pipe as
// SetBodyStreamWriter would, so sw always runs exactly once.
type bodyWriter struct {
	sw   fasthttp.StreamWriter
	ran  bool
	pipe io.ReadCloser
	// done, when set, runs after sw has returned in WriteTo (it gives the
	// request's lent body buffer back). sw run through the pipe runs
	// beside fasthttp's own goroutine, so done is skipped there.
	done func()
	out  countingWriter // WriteTo's writer, counted
}

func (b *bodyWriter) SupportsBodyWriteTo() bool { return true }

// WriteTo runs sw. A stream's relay waits in the frames below it, so it
// keeps few locals (see relaySSE).
func (b *bodyWriter) WriteTo(w io.Writer) (int64, error) {
	if b.ran {
		return 0, errBodyConsumed
	}
	b.ran = true
	b.out.w = w
	// Small: the relay flushes after every event (or burst), and a larger
	// write goes through bufio straight to the chunk writer.
	bw := bufio.NewWriterSize(&b.out, 1024)
	b.sw(bw)
	err := bw.Flush()
	if b.done != nil {
		b.done()
	}
	return b.out.n, err
}

var errBodyConsumed = errors.New("proxy: body stream already consumed")

func (b *bodyWriter) Read(p []byte) (int, error) {
	if b.pipe == nil {
		if b.ran {
			return 0, io.EOF
		}
		b.ran = true
		b.pipe = fasthttp.NewStreamReader(b.sw)
	}
	return b.pipe.Read(p)
}

func (b *bodyWriter) Close() error {
	if !b.ran {
		// The body is never sent: sw still runs, and finds the client
		// gone (the closed pipe), as with SetBodyStreamWriter.
		b.ran = true
		b.pipe = fasthttp.NewStreamReader(b.sw)
	}
	if b.pipe != nil {
		return b.pipe.Close()
	}
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// heartbeat is the SSE comment sent during upstream silence. SSE parsers
// ignore comments; a write that fails tells the proxy the client left.
var heartbeat = []byte(": keep-alive\n\n")

// relaySSE forwards an event stream to the client event by event, on
// fasthttp's connection goroutine: it reads an event, writes (and flushes)
// it, and only then reads the next, so event buffers are reused and nothing
// piles up. The idle and total clocks, a cancel request and the heartbeats
// sent during silence are timer callbacks (relayControl), so an open stream
// holds one goroutine. Each forwarded event is teed to the assembler and
// the run's event log.
//
// The loop's state lives in an sseRelay on the heap and the work per event
// in its methods, so the frames below the read a stream waits in stay small
// (about 3 KiB in all): the garbage collector then shrinks a waiting
// stream's goroutine stack to 8 KiB, where handling the request grew it.
func (ex *exchange) relaySSE(w *bufio.Writer) {
	// No defer: fasthttp does not recover a panicking handler, so one
	// would only make this frame larger.
	r := newSSERelay(ex, w)
	for {
		ev, err := r.reader.Next()
		if ev != nil && !r.forward(ev, err == nil && r.reader.Buffered()) {
			break
		}
		if err != nil {
			r.ended(err)
			break
		}
	}
	r.finish()
	ex.release()
}

// sseRelay is one stream relay's state (see relaySSE).
type sseRelay struct {
	rc     relayControl
	ex     *exchange
	reader *sse.Reader
	dog    *limiter.Watchdog
	o      outcome
	last   outcome // the turn recorded at the provider's last event (setLast)

	errHead      []byte
	firstWritten bool
	detachNoted  bool
	snapshots    bool
	lastSnapshot time.Time
}

//go:noinline
func newSSERelay(ex *exchange, w *bufio.Writer) *sseRelay {
	cfg := ex.up.cfg
	limits := ex.s.cfg.Limits
	r := &sseRelay{
		ex:           ex,
		reader:       sse.NewReader(ex.resp.BodyStream(), limits.MaxSSELineBytes),
		o:            outcome{status: ex.resp.StatusCode()},
		snapshots:    ex.turn != nil && ex.asm != nil && cfg.SnapshotStreaming,
		lastSnapshot: time.Now(),
	}
	r.rc.init(ex, w)
	// The stream's own clocks start now, with the gate slot held and the
	// response head in (timeouts.first_byte bounded the wait for that).
	r.dog = limiter.NewWatchdog(context.Background(), limiter.Timeouts{Idle: cfg.Timeouts.Idle.D(), Total: cfg.Timeouts.Total.D()})
	dog := r.dog
	r.rc.stopOn(dog.Context(), stopTimeout, func() bool { return dog.Fired() != "" })
	if ex.turn != nil {
		r.rc.stopOn(ex.turn.cancelCtx, stopCancelled, nil)
	}
	r.rc.heartbeats(limits.Heartbeat.D(), dog)
	return r
}

// own writes one of chronicle's own error events: to the client, and to
// the event log, so a replay shows what the client saw.
func (r *sseRelay) own(ev []byte) {
	ex := r.ex
	if ex.turn != nil && ex.turn.events != nil && !ex.turnDone {
		ex.turn.events.add(ev)
	}
	r.rc.write(ev, false)
}

// forward handles one upstream event: the assembler, the event log, the
// client. more: the next event is already buffered, so the flush can wait
// for it (a burst goes out in one write). It reports false when the relay
// must stop because the client left.
//
//go:noinline
func (r *sseRelay) forward(ev *sse.Event, more bool) bool {
	ex := r.ex
	r.dog.Touch() // also puts the next heartbeat off
	if ev.Kind == sse.KindEvent {
		ex.s.metrics.eventsTeed.Inc()
	}
	// Assemble first: stripping edits the event's bytes in place, and Data
	// aliases them.
	if ex.asm != nil && ev.Kind == sse.KindEvent && ev.HasData {
		if err := ex.asm.Feed(ev.Data); err != nil {
			ex.s.log.Debug("unreadable stream event", "connection", ex.up.cfg.Name, "err", err)
		}
	}
	raw := ev.Raw
	drop := false
	if ex.addedUsage && ev.Kind == sse.KindEvent {
		raw, drop = ex.ad.StripAddedUsage(raw)
	}
	if r.o.status >= 300 && len(r.errHead) < 64<<10 {
		r.errHead = append(r.errHead, raw...)
	}
	if !drop && ex.turn != nil && ex.turn.events != nil && ev.Kind == sse.KindEvent && !ex.turnDone {
		ex.turn.events.add(raw)
	}
	if ex.turn != nil && !ex.turnDone && ex.asm != nil && ex.asm.Done() {
		// The provider's last event: record the turn before the client
		// sees it, so a client that sends its next turn as soon as it
		// reads the end finds the thread free.
		r.setLast()
		if ex.endTurn(&r.last) != nil {
			// The turn is neither stored nor spooled: the client must
			// not read a clean end, so the provider's last event is
			// replaced by an error event.
			r.notStored()
			return false
		}
	}
	clientGone := false
	if !drop {
		if !r.firstWritten && ex.turn != nil {
			r.firstWritten = true
			ex.turn.awaitPending()
		}
		clientGone = r.rc.write(raw, more)
	}
	if clientGone && !ex.detach {
		r.rc.stop(stopClientLeft) // the client left: stop the upstream request
		r.o.aborted, r.o.reason = true, "client_disconnected"
		return false
	}
	if clientGone && ex.turn != nil && !r.detachNoted {
		r.detachNoted = true
		now := time.Now()
		ex.turn.offerPatch(func(p *store.RunPatch) { p.DetachedSince = now })
	}
	if r.snapshots && time.Since(r.lastSnapshot) >= ex.up.cfg.SnapshotInterval.D() && !ex.turnDone {
		r.lastSnapshot = time.Now()
		text := []byte(ex.ad.MessageText(ex.asm.Result().Message))
		ex.turn.offerPatch(func(p *store.RunPatch) { p.Partial = text })
	}
	return true
}

// notStored ends a stream whose turn could not be recorded at its last
// event: an error event (store_unavailable) goes out where the provider's
// last event would have, and nothing after it.
//
//go:noinline
func (r *sseRelay) notStored() {
	ex := r.ex
	ex.s.metrics.countTurnRefused()
	r.rc.write(ex.ad.StreamErrorEvent(fasthttp.StatusServiceUnavailable, codeStoreUnavailable,
		"The answer arrived whole, but the conversation store could not keep it; it is not saved. Send the turn again."), false)
	r.rc.stop(stopClientLeft) // ends the upstream request
}

// ended handles the error that ended the upstream read: a stop from
// outside (a clock, a cancel, a client gone during a heartbeat), a broken
// stream, or the stream's end.
//
//go:noinline
func (r *sseRelay) ended(err error) {
	ex := r.ex
	if ex.asm != nil && ex.asm.Result().Terminal {
		// The answer was whole (and its end recorded) before the stop or
		// the error landed: nothing follows a terminal event.
		return
	}
	why := r.rc.reason()
	switch why {
	case stopTimeout:
		if r.dog.Fired() == limiter.IdleTimeout {
			r.own(ex.ad.StreamErrorEvent(fasthttp.StatusGatewayTimeout, codeStreamIdleTimeout,
				"The upstream sent nothing for longer than the connection's timeouts.idle."))
			r.o.reason = codeStreamIdleTimeout
		} else {
			r.own(ex.ad.StreamErrorEvent(fasthttp.StatusGatewayTimeout, codeStreamTotalTimeout,
				"The upstream stream ran longer than the connection's timeouts.total."))
			r.o.reason = codeStreamTotalTimeout
		}
	case stopCancelled:
		r.own(ex.ad.StreamErrorEvent(499, "run_cancelled", "The run was cancelled."))
		r.o.aborted, r.o.reason = true, "cancelled"
	case stopClientLeft:
		r.o.aborted, r.o.reason = true, "client_disconnected"
	default:
		if !errors.Is(err, io.EOF) {
			ex.s.log.Warn("upstream stream failed", "connection", ex.up.cfg.Name, "err", err)
			r.own(ex.ad.StreamErrorEvent(fasthttp.StatusBadGateway, codeStreamTruncated,
				"The upstream stream broke off before its end."))
			r.o.reason = codeStreamTruncated
		} else if ex.asm != nil && !ex.asm.Result().Terminal {
			// The upstream closed cleanly but without its end marker:
			// the answer is cut short, and the client must not take it
			// for a whole one.
			ex.s.log.Warn("upstream stream ended without its terminal marker", "connection", ex.up.cfg.Name)
			r.own(ex.ad.StreamErrorEvent(fasthttp.StatusBadGateway, codeStreamTruncated,
				"The upstream stream ended before its end marker; the answer is incomplete."))
			r.o.reason = codeStreamTruncated
		}
	}
}

// setLast sets the outcome the turn is recorded with at the provider's
// last event. It is built in the relay (on the heap) by a function whose
// frame is gone before the finish: the finish's round trip runs below
// forward, on the connection's goroutine, and every frame on that path
// counts against the 8 KiB stack an open stream keeps.
//
//go:noinline
func (r *sseRelay) setLast() {
	r.last = outcome{status: r.o.status, turn: r.ex.asm.Result()}
}

// finish stops the clocks and callbacks and records the exchange's end.
//
//go:noinline
func (r *sseRelay) finish() {
	ex := r.ex
	r.rc.finish()
	r.dog.Stop()
	if ex.asm != nil && (ex.turn != nil || ex.adm.wantsUsage()) {
		r.o.turn = ex.asm.Result()
	}
	r.o.errBody = r.errHead
	ex.end(&r.o)
}
