package proxy

import (
	"bytes"
	"context"
	"net"
	"time"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/limiter"
	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"
)

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
	// start is when the request arrived, for the latency metric;
	// firstEvent when a streamed answer's first event (an SSE event, an
	// element of a JSON-array stream) came, for time to first token.
	start      time.Time
	firstEvent time.Time
	// genOp is gen_ai.operation.name ("" for a request that is no
	// generation or embedding), for the span and the GenAI metrics.
	genOp string
	// prepared is what compose prepared for the upstream request beside
	// its body: header edits (session ids), an insertion into a large
	// body (Insert at At: sent in three pieces rather than copied to add
	// a member), and AddedUsage (chronicle asked for stream usage the
	// client did not, and strips it from what the client receives).
	prepared adapters.Upstream
	// detach: a client that leaves does not stop the upstream; the run is
	// read to its end and stored.
	detach bool
	// upBuf holds the upstream body when chronicle built it (from
	// upBodyPool), until the round trip is over.
	upBuf *[]byte
	// spliced is the upstream request's body stream when prepared.Insert
	// is set.
	spliced splicedBody
	// span is the exchange's server span and traceCtx the context that
	// carries it; nil when traces are off (tracing.go).
	span     trace.Span
	traceCtx context.Context
	// queued: the request waited for a gate slot, for queueWait.
	queued    bool
	queueWait time.Duration
	// awaitRun names the run in flight that a non-stream retry (its
	// X-Run-Id) is answered from once it ends (answerWhenEnded).
	awaitRun *store.RunRef
}

// runPipeline serves one request to a connection, stage by stage, each in
// a file of its own:
//
//   - auth (auth.go): the client's credential and tenant;
//   - admit (admit.go): the connection's FIFO gate, rate limits, key pool;
//   - begin (begin.go): for a turn that is stored, the thread lease, the
//     stored thread and the run record;
//   - compose (compose.go): the history the upstream receives, restored
//     and repaired, as a plan; a pure function;
//   - upstream (upstream.go): the request sent and the response head back;
//   - relay (relay_sse.go, relay.go, here for a sized body): the answer to
//     the client, teed into the assembler and the run's event log;
//   - finish (finish.go): the run's end stored before the answer's end
//     reaches the client; then conclude settles limits and metrics.
//
// A stage that refuses the request answers it (apierr) and the pipeline
// stops there; what earlier stages took is given back.
func (s *Server) runPipeline(ctx *fasthttp.RequestCtx, up *upstream, rest []byte) {
	shape := up.adapter(rest)
	tenant, cred, ok := s.authenticate(ctx, shape)
	if !ok {
		return
	}

	ex := &exchange{s: s, up: up, ad: shape, start: time.Now(), tenant: tenant,
		req: fasthttp.AcquireRequest(), resp: fasthttp.AcquireResponse(), clientConn: ctx.Conn()}
	ex.op = shape.Classify(string(ctx.Method()), string(rest), string(ctx.URI().QueryString()), ctx.PostBody())
	ex.genOp = genAIOperation(shape, ex.op, rest)
	body := ctx.PostBody()
	if s.procs != nil && ctx.Request.Header.ContentLength() < 0 && len(body) >= largeRequestBytes {
		// A large chunked body, which headerReceived could not see
		// coming: the hold starts now, and ends with handle as the others.
		s.holdLarge(&ctx.Request.Header)
	}
	if s.tracing != nil {
		s.startSpan(ctx, ex, rest)
	}
	adm, admitted := s.admit(ctx, ex)
	ok = admitted
	if !ok {
		ex.closeUpstream()
		ex.endSpan(ctx.Response.StatusCode(), nil, false)
		return
	}
	ex.adm = adm
	if ex.op.Kind == adapters.OpGenerate && up.cfg.PersistEnabled() && s.store != nil {
		ex.turn, body, ok = s.beginOffStack(ctx, ex, body)
		if !ok {
			adm.refund()
			ex.closeUpstream()
			if ex.awaitRun != nil {
				s.answerWhenEnded(ctx, ex)
			}
			ex.endSpan(ctx.Response.StatusCode(), nil, false)
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
// stack an open connection keeps (docs/design.md, "Runtime mechanics").
//
//go:noinline
func (ex *exchange) upstreamFailed(ctx *fasthttp.RequestCtx, err error) {
	ex.closeUpstream()
	ex.final = outcome{reason: "upstream_unreachable", status: 502}
	if apierr.IsTimeout(err) {
		ex.final.reason, ex.final.status = string(limiter.FirstByteTimeout), 504
	}
	ex.conclude(&ex.final)
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
	if ok && ex.op.Kind == adapters.OpGenerate && (ex.turn != nil || ex.adm.wantsUsage() || ex.spanRecording()) {
		ex.parseWhole(body)
		o.response = body
	} else if !ok {
		o.errBody = body
	}
	o.retryAfter = limiter.ParseRetryAfter(string(ex.resp.Header.Peek("Retry-After")), time.Now())
	if err := ex.conclude(o); err != nil && o.status < 300 {
		// The turn is neither stored nor spooled. Under on_store_error:
		// fail the client learns it from a 503 (the answer is not
		// acknowledged); under pass the answer still goes out (its
		// tokens are spent), marked as not stored.
		if ex.up.cfg.OnStoreError != "pass" {
			ex.refuseUnstored(ctx)
			return
		}
		ctx.Response.Header.Set("X-Persisted", "false")
		ex.s.metrics.CountUnpersisted()
	}
	ctx.SetBody(body)
	ex.closeUpstream()
}

// parseWhole reads a whole answer into the final outcome's turn, in a
// frame of its own: the Turn it returns is not held in respondWhole's
// frame, which is on the stack during the finish's store round trip.
//
//go:noinline
func (ex *exchange) parseWhole(body []byte) { ex.final.turn, _ = ex.ad.ParseResponse(body) }

// refuseUnstored answers a whole upstream answer whose turn could be
// neither stored nor spooled, under on_store_error: fail: a 503, so the
// client never takes an answer that is not kept for acknowledged.
//
//go:noinline
func (ex *exchange) refuseUnstored(ctx *fasthttp.RequestCtx) {
	ex.s.metrics.CountTurnRefused()
	ex.closeUpstream()
	apierr.Write(ctx, ex.ad, apierr.Retry(apierr.StoreUnavailable, 1,
		"The upstream answered, but the conversation store could not keep the turn; it is not saved. Send the request again."))
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
	ex.closeUpstream()
	ex.final = outcome{status: fasthttp.StatusBadGateway, reason: string(apierr.UpstreamTruncated)}
	ex.conclude(&ex.final)
	ex.s.log.Warn("upstream answer broke off before its end", "connection", ex.up.cfg.Name, "content_length", want)
	apierr.Write(ctx, ex.ad, apierr.New(apierr.UpstreamTruncated,
		"The upstream's answer broke off before its end; nothing of it is kept. Send the request again."))
}

// finishOnce records the run's end (the finish stage), once.
func (ex *exchange) finishOnce(o *outcome) error {
	if ex.turn != nil && !ex.turnDone {
		ex.turnDone = true
		return ex.turn.finish(o)
	}
	return nil
}

// conclude closes the books on an exchange: the run's record (unless the relay
// already wrote it at the provider's last event), the rate-limit settlement
// with real usage, and the gate slot.
func (ex *exchange) conclude(o *outcome) error {
	err := ex.finishOnce(o)
	m := ex.s.metrics
	route := "passthrough"
	if ex.op.Kind == adapters.OpGenerate {
		route = "generate"
		if ex.op.Stream {
			route = "stream"
		}
	}
	took := time.Since(ex.start)
	m.ObserveRequest(ex.up.cfg.Name, route, o.status, took)
	if u := o.turn.Usage; u.Present {
		m.ObserveTokens(ex.up.cfg.Name, ex.op.Model, u.InputTokens, u.OutputTokens, u.CachedTokens, u.ReasoningTokens)
	}
	if ex.op.Kind == adapters.OpGenerate {
		ex.observeGenAI(o, took, err != nil)
	}
	usage := o.turn.Usage
	if o.aborted && !usage.Present {
		usage = adapters.Usage{} // refunds the reservation
	}
	ex.adm.settle(usage, o.status, o.retryAfter)
	if ex.span != nil {
		ex.endSpan(o.status, o, err != nil)
	}
	return err
}

// closeUpstream gives back the upstream request and response (closing a
// response body stream not read to its end) and the upstream body buffer.
// Safe to call more than once.
func (ex *exchange) closeUpstream() {
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
