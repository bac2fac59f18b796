package proxy

import (
	"context"
	"errors"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/limiter"
	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/valyala/fasthttp"
)

// admission is what one request holds from the limiters: rate reservations
// on its connection and tenant, a tenant stream slot, the connection's gate
// slot and an upstream key. release gives back what is left, once.
type admission struct {
	connRes, tenantRes limiter.Reservation
	streamSlot, slot   limiter.Slot
	key                *limiter.KeyLease
	released           bool
	// tenantRefused: the tenant's rate limit refused the request (its
	// policies, not the connection's, go in the 429's headers).
	tenantRefused bool
	// order is the request's place in the connection's dispatch order
	// (with a gate slot; nil without).
	order *orderTicket
}

// admit applies rate limits, then the tenant's stream cap, then the
// connection's FIFO gate (waiting in arrival order), then picks a key. It
// answers the request itself and returns ok=false when refused. Refused
// requests hold nothing and create no run.
func (s *Server) admit(ctx *fasthttp.RequestCtx, ex *exchange) (*admission, bool) {
	a := &admission{}
	cfg := ex.up.cfg
	// The limiters' store calls share one deadline, made only when a limit
	// applies: most connections have none, and a timer per request costs.
	var rctx context.Context
	var cancel context.CancelFunc
	limitCtx := func() context.Context {
		if rctx == nil {
			rctx, cancel = context.WithTimeout(context.Background(), s.storeTimeout)
		}
		return rctx
	}
	defer func() {
		if cancel != nil {
			cancel()
		}
	}()

	if ex.op.Kind == adapters.OpGenerate && (cfg.Rate.RPM > 0 || cfg.Rate.TPM > 0 || s.cfg.Limits.PerTenant.RPM > 0 || s.cfg.Limits.PerTenant.TPM > 0) {
		rctx := limitCtx()
		tokens := int64(limiter.EstimateTokens(len(ctx.PostBody())))
		if mt := adapters.MaxOutputTokens(ctx.PostBody()); mt > 0 {
			tokens += mt
		} else {
			tokens += cfg.Rate.DefaultMaxTokens
		}
		var err error
		if cfg.Rate.RPM > 0 || cfg.Rate.TPM > 0 {
			if a.connRes, err = s.rates.Admit(rctx, "conn:"+cfg.Name, limiter.Limits{RPM: cfg.Rate.RPM, TPM: cfg.Rate.TPM}, tokens); err != nil {
				s.refuse(ctx, ex, a, err)
				return nil, false
			}
		}
		if pt := s.cfg.Limits.PerTenant; pt.RPM > 0 || pt.TPM > 0 {
			if a.tenantRes, err = s.rates.Admit(rctx, "tenant:"+ex.tenant, limiter.Limits{RPM: pt.RPM, TPM: pt.TPM}, tokens); err != nil {
				a.tenantRefused = true
				s.refuse(ctx, ex, a, err)
				return nil, false
			}
		}
		setRateHeaders(ctx, a.connRes, a.tenantRes)
	}
	if n := s.cfg.Limits.PerTenant.MaxStreams; n > 0 && ex.op.Stream {
		slot, err := s.gates.Gate("tenant:"+ex.tenant, limiter.GateConfig{MaxConcurrent: n, MaxWaiting: -1}).Acquire(limitCtx())
		if err != nil {
			if errors.Is(err, limiter.ErrQueueFull) {
				err = errTenantStreams
			}
			s.refuse(ctx, ex, a, err)
			return nil, false
		}
		a.streamSlot = slot
	}
	if cfg.MaxConcurrent > 0 {
		// The wait ends early if the client leaves: its place goes at once.
		wctx, stop := watchClient(ctx.Conn())
		start := time.Now()
		slot, err := ex.up.gate.Acquire(wctx)
		stop()
		waited := time.Since(start)
		ex.queued, ex.queueWait = true, waited
		s.metrics.QueueWaitH.WithLabelValues(cfg.Name).Observe(waited.Seconds())
		if err != nil {
			s.refuse(ctx, ex, a, err)
			return nil, false
		}
		a.slot = slot
		a.order = &orderTicket{d: &ex.up.order, t: ex.up.order.take()}
	}
	if ex.up.keys != nil {
		lease, err := ex.up.keys.Acquire()
		if err != nil {
			s.refuse(ctx, ex, a, err)
			return nil, false
		}
		a.key = lease
	}
	return a, true
}

var errTenantStreams = errors.New("tenant stream cap reached")

// refuse answers a request the limiters turned away, giving back what it
// already held.
func (s *Server) refuse(ctx *fasthttp.RequestCtx, ex *exchange, a *admission, err error) {
	a.refund()
	var rl *limiter.RateLimitError
	switch {
	case errors.As(err, &rl):
		s.metrics.Rejected(ex.up.cfg.Name, "rate_limited")
		retry := int(math.Ceil(rl.RetryAfter.Seconds()))
		if retry < 1 {
			retry = 1
		}
		code, msg := apierr.RateLimited, "This connection's request or token rate limit is reached; retry after the time in Retry-After."
		if rl.Kind == "keys" {
			code, msg = apierr.KeysCoolingDown, "Every upstream key of this connection is cooling down after a 429; retry after the time in Retry-After."
		}
		apierr.Write(ctx, ex.ad, apierr.Retry(code, retry, msg))
		setQuotaHeaders(ctx, rl.Requests, rl.Tokens)
		scope := connPolicies
		if a.tenantRefused {
			scope = tenantPolicies
		}
		var buf [2]ratePolicy
		setPolicyHeaders(&ctx.Response.Header, retry, scope.append(buf[:0], rl.Requests, rl.Tokens))
	case errors.Is(err, limiter.ErrQueueFull):
		s.metrics.Rejected(ex.up.cfg.Name, "queue_full")
		apierr.Write(ctx, ex.ad, apierr.Retry(apierr.QueueFull, 1,
			"Too many requests are waiting for this connection (queue.max_waiting)."))
	case errors.Is(err, limiter.ErrQueueTimeout):
		s.metrics.Rejected(ex.up.cfg.Name, "queue_timeout")
		apierr.Write(ctx, ex.ad, apierr.Retry(apierr.QueueTimeout, 1,
			"The request waited longer than queue.timeout for a slot on this connection."))
	case errors.Is(err, errTenantStreams):
		s.metrics.Rejected(ex.up.cfg.Name, "tenant_streams")
		apierr.Write(ctx, ex.ad, apierr.Retry(apierr.TooManyStreams, 1,
			"This tenant already has limits.per_tenant.max_streams streams open."))
	case errors.Is(err, limiter.ErrNoKeys):
		apierr.Write(ctx, ex.ad, apierr.New(apierr.NoUpstreamKeys,
			"Every upstream key of this connection was rejected by the provider."))
	case errors.Is(err, context.Canceled):
		s.metrics.Rejected(ex.up.cfg.Name, "client_gone")
		ctx.SetConnectionClose() // the client left while queued; nobody reads this
	default:
		s.log.Warn("limiter unavailable", "connection", ex.up.cfg.Name, "err", err)
		apierr.Write(ctx, ex.ad, apierr.Retry(apierr.LimitsUnavailable, 1,
			"The shared limits could not be checked."))
	}
}

// refund gives back everything when the request never went upstream.
func (a *admission) refund() {
	if a == nil || a.released {
		return
	}
	a.released = true
	if a.connRes != nil || a.tenantRes != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if a.connRes != nil {
			_ = a.connRes.Refund(ctx)
		}
		if a.tenantRes != nil {
			_ = a.tenantRes.Refund(ctx)
		}
	}
	a.releaseSlots()
}

func (a *admission) releaseSlots() {
	a.order.give()
	if a.slot != nil {
		a.slot.Release()
	}
	if a.streamSlot != nil {
		a.streamSlot.Release()
	}
	if a.key != nil {
		a.key.Done(0, 0)
	}
}

// settle ends the admission with the turn's real usage (0 when unknown or
// aborted, which refunds the reserved tokens) and frees the slots.
func (a *admission) settle(usage adapters.Usage, status int, retryAfter time.Duration) {
	if a == nil || a.released {
		return
	}
	a.released = true
	actual := int64(0)
	if usage.Present {
		actual = usage.InputTokens + usage.OutputTokens
	}
	if a.connRes != nil || a.tenantRes != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if a.connRes != nil {
			_ = a.connRes.Settle(ctx, actual)
		}
		if a.tenantRes != nil {
			_ = a.tenantRes.Settle(ctx, actual)
		}
	}
	if a.key != nil {
		a.key.Done(status, retryAfter)
		a.key = nil
	}
	a.releaseSlots()
}

// setRateHeaders adds the headers of an admitted request: OpenAI-style
// x-ratelimit-* for the connection's limits (conn, nil without), and the
// IETF RateLimit-Policy / RateLimit for the connection's and the tenant's
// (tenant, nil without).
func setRateHeaders(ctx *fasthttp.RequestCtx, conn, tenant limiter.Reservation) {
	var buf [4]ratePolicy
	pols := buf[:0]
	if conn != nil {
		req, tok := conn.Quota()
		setQuotaHeaders(ctx, req, tok)
		pols = connPolicies.append(pols, req, tok)
	}
	if tenant != nil {
		req, tok := tenant.Quota()
		pols = tenantPolicies.append(pols, req, tok)
	}
	setPolicyHeaders(&ctx.Response.Header, 0, pols)
}

func setQuotaHeaders(ctx *fasthttp.RequestCtx, req, tok limiter.Quota) {
	h := &ctx.Response.Header
	if req.Limit > 0 {
		h.Set("x-ratelimit-limit-requests", strconv.FormatInt(req.Limit, 10))
		h.Set("x-ratelimit-remaining-requests", strconv.FormatInt(req.Remaining, 10))
		h.Set("x-ratelimit-reset-requests", formatReset(req.Reset))
	}
	if tok.Limit > 0 {
		h.Set("x-ratelimit-limit-tokens", strconv.FormatInt(tok.Limit, 10))
		h.Set("x-ratelimit-remaining-tokens", strconv.FormatInt(tok.Remaining, 10))
		h.Set("x-ratelimit-reset-tokens", formatReset(tok.Reset))
	}
}

// ratePolicy is one rate limit as the IETF headers name it: the policy's
// name, its quota unit ("" for the draft's default, requests) and its
// state after the admission decision.
type ratePolicy struct {
	name, unit string
	q          limiter.Quota
}

// policyNames name a limiter key's two limits (requests, tokens).
type policyNames struct{ requests, tokens string }

var (
	connPolicies   = policyNames{"requests", "tokens"}
	tenantPolicies = policyNames{"tenant-requests", "tenant-tokens"}
)

// append adds the policies of a key's quotas to pols, leaving out a limit
// that is not configured (Limit 0).
func (p policyNames) append(pols []ratePolicy, req, tok limiter.Quota) []ratePolicy {
	if req.Limit > 0 {
		pols = append(pols, ratePolicy{name: p.requests, q: req})
	}
	if tok.Limit > 0 {
		pols = append(pols, ratePolicy{name: p.tokens, unit: "tokens", q: tok})
	}
	return pols
}

// setPolicyHeaders writes the rate limits in the form of the IETF draft
// "RateLimit header fields for HTTP", draft-ietf-httpapi-ratelimit-headers-11
// (23 May 2026), beside the x-ratelimit-* ones:
//
//	RateLimit-Policy: "requests";q=60;w=60, "tokens";q=1000;qu="tokens";w=60
//	RateLimit: "requests";r=59;t=1, "tokens";r=784;t=13
//
// Both are Structured Field Lists (RFC 9651) of String items, one per
// limit. q is the limit per window and w the window in seconds (every
// chronicle limit counts over limiter.Window, a minute); qu is the quota
// unit, left out for requests (the draft's default) and "tokens" for
// token limits ("tokens" is not among the units the draft registers,
// but leaving qu out would claim requests). r is what may pass at once
// (Quota.Remaining) and t the whole seconds, rounded up, until the bucket
// is full again (Quota.Reset, as x-ratelimit-reset-* says it): the draft's
// "effective window", which like a fixed window's end says when the quota
// is restored. On a 429 (retry > 0) t is at most Retry-After, as the draft
// asks (section 6: Retry-After should not point earlier than the end of
// the effective window). Nothing is written without policies.
func setPolicyHeaders(h *fasthttp.ResponseHeader, retry int, pols []ratePolicy) {
	if len(pols) == 0 {
		return
	}
	var pb, rb [160]byte
	p, r := pb[:0], rb[:0]
	for i, pol := range pols {
		if i > 0 {
			p, r = append(p, ", "...), append(r, ", "...)
		}
		p = append(p, '"')
		p = append(p, pol.name...)
		p = append(p, `";q=`...)
		p = strconv.AppendInt(p, pol.q.Limit, 10)
		if pol.unit != "" {
			p = append(p, `;qu="`...)
			p = append(p, pol.unit...)
			p = append(p, '"')
		}
		p = append(p, ";w="...)
		p = strconv.AppendInt(p, int64(limiter.Window/time.Second), 10)

		t := int64(math.Ceil(pol.q.Reset.Seconds()))
		if retry > 0 && t > int64(retry) {
			t = int64(retry)
		}
		r = append(r, '"')
		r = append(r, pol.name...)
		r = append(r, `";r=`...)
		r = strconv.AppendInt(r, pol.q.Remaining, 10)
		r = append(r, ";t="...)
		r = strconv.AppendInt(r, t, 10)
	}
	h.SetBytesV("RateLimit-Policy", p)
	h.SetBytesV("RateLimit", r)
}

// formatReset writes a duration the way OpenAI's headers do ("1s", "6m0s").
func formatReset(d time.Duration) string {
	if d < time.Millisecond {
		return "0s"
	}
	return d.Round(time.Millisecond).String()
}

// watchClient returns a context that ends when the client closes its
// connection, for waits in the handler (fasthttp only learns of a client
// that left when a write fails). It reads the raw connection while the
// handler waits, which is safe because an HTTP/1.1 client sends its next
// request only after this response; stop ends the watch and restores the
// connection.
func watchClient(conn net.Conn) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	if conn == nil {
		return ctx, cancel
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		if _, err := conn.Read(b[:]); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return // stop() woke us: the client is still there
			}
		}
		// EOF or a reset: the client left. (A byte read would be a
		// pipelined request, which LLM clients do not send.)
		cancel()
	}()
	return ctx, func() {
		_ = conn.SetReadDeadline(time.Unix(1, 0))
		<-done
		_ = conn.SetReadDeadline(time.Time{})
		cancel()
	}
}

// wantsUsage reports whether settling needs the turn's real usage.
func (a *admission) wantsUsage() bool {
	return a != nil && (a.connRes != nil || a.tenantRes != nil)
}
