package proxy

import (
	"context"
	"errors"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/limiter"
	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/valyala/fasthttp"
)

// proxyLostMessage is what a client of a lost run is told.
const proxyLostMessage = "The run was lost with the proxy replica that ran it (proxy_lost); send the request again with a new X-Run-Id."

// awaitHook, when set (by a test, before the server starts), runs as a
// retry begins to wait for its run's end.
var awaitHook func()

// answerWhenEnded answers a non-stream retry whose X-Run-Id names a run in
// flight: it waits for the run's end, for at most the connection's
// timeouts.total, and answers as the run's own client was answered (the
// same status and body), with no upstream call.
func (s *Server) answerWhenEnded(ctx *fasthttp.RequestCtx, ex *exchange) {
	k, runID := ex.awaitRun.Key, ex.awaitRun.RunID
	if awaitHook != nil {
		awaitHook()
	}
	wctx, cancel := context.WithTimeout(context.Background(), ex.up.cfg.Timeouts.Total.D())
	// The log of a non-stream run holds no events: the follow returns
	// when the run ends.
	err := s.store.FollowEvents(wctx, k, runID, 0, func(store.Event) error { return nil })
	cancel()
	if errors.Is(err, context.DeadlineExceeded) {
		apierr.Write(ctx, ex.ad, apierr.Retry(apierr.RunInProgress, 1,
			"This X-Run-Id names a run that has not finished within the connection's timeouts.total."))
		return
	}
	if err != nil {
		s.storeError(ctx, err, "run")
		return
	}
	rctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
	run, err := s.store.GetRun(rctx, k, runID)
	cancel()
	if err != nil {
		s.storeError(ctx, err, "run")
		return
	}
	answerEnded(ctx, ex.ad, &run)
}

// answerEnded answers a retry of an ended run as the run's own client was
// answered: the stored body with its status, the upstream's error with
// its, or chronicle's own error for a run that failed before any answer
// (an unreachable upstream, a first-byte timeout, a lost replica).
func answerEnded(ctx *fasthttp.RequestCtx, ad adapters.Adapter, run *store.Run) {
	status := run.AnswerStatus
	switch {
	case run.Response != nil:
		if status == 0 {
			status = 200
		}
		ctx.SetStatusCode(status)
		ctx.SetContentType("application/json")
		ctx.SetBody(run.Response)
	case run.Error != nil && run.Reason != store.ReasonProxyLost:
		if status < 300 {
			status = 502 // a run recorded before its answer's status was kept
		}
		ctx.SetStatusCode(status)
		ctx.SetContentType("application/json")
		ctx.SetBody(run.Error)
	case run.Reason == "upstream_unreachable":
		apierr.Write(ctx, ad, apierr.UpstreamDown())
	case run.Reason == string(limiter.FirstByteTimeout):
		apierr.Write(ctx, ad, apierr.UpstreamTimedOut())
	case run.Reason == store.ReasonProxyLost:
		apierr.Write(ctx, ad, apierr.New(apierr.ProxyLost,
			proxyLostMessage))
	default:
		apierr.Write(ctx, ad, apierr.Retry(apierr.RunInProgress, 1,
			"This X-Run-Id names a run that left no answer to replay."))
	}
}

// answeredBeforeEvents answers a stream retry whose run ended before its
// first event (the upstream refused it with an error body, or could not
// be reached) as that run's client was answered, and reports whether it
// did; a run with events is replayed instead.
func (s *Server) answeredBeforeEvents(ctx *fasthttp.RequestCtx, ex *exchange, k store.Key, runID string) bool {
	rctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
	run, err := s.store.GetRun(rctx, k, runID)
	cancel()
	if err != nil || !run.Status.Ended() || run.Events > 0 || run.Status != store.Failed {
		return false
	}
	if run.AnswerStatus < 300 && run.Reason != "upstream_unreachable" && run.Reason != string(limiter.FirstByteTimeout) {
		return false // the stream's head went out: replay it
	}
	answerEnded(ctx, ex.ad, &run)
	return true
}

// storeError answers a failed store read.
func (s *Server) storeError(ctx *fasthttp.RequestCtx, err error, what string) {
	if errors.Is(err, store.ErrNotFound) {
		code := apierr.ThreadNotFound
		if what == "run" {
			code = apierr.RunNotFound
		}
		apierr.Write(ctx, openAIAdapter, apierr.New(code, "No such "+what+"."))
		return
	}
	s.log.Warn("store read failed", "err", err)
	apierr.Write(ctx, openAIAdapter, apierr.Retry(apierr.StoreUnavailable, 1,
		"The conversation store is unreachable."))
}
