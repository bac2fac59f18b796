package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/chronicle-proxy/chronicle/proxy/internal/threaddoc"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/valyala/fasthttp"
)

// serveAPI is the tenant API under /api: a caller reads (and cancels) only
// its own tenant's threads, authenticated with the same credential as its
// provider calls. Another tenant's thread is a 404, never a 403.
func (s *Server) serveAPI(ctx *fasthttp.RequestCtx, rest []byte) {
	ad := openAIAdapter
	if s.store == nil {
		apierr.Write(ctx, ad, apierr.New(apierr.NotFound,
			"This proxy stores nothing (no store configured)."))
		return
	}
	key, cred := clientKey(&ctx.Request)
	if cred == credNone {
		apierr.Write(ctx, ad, apierr.New(apierr.MissingAPIKey,
			"No API key was provided."))
		return
	}
	tenant := passThroughTenant(key)
	if s.clients.enabled() {
		if tenant = s.clients.tenant(key); tenant == "" {
			apierr.Write(ctx, ad, apierr.New(apierr.InvalidAPIKey,
				"The API key is not one of this proxy's client keys."))
			return
		}
	}
	parts := strings.Split(strings.Trim(string(rest), "/"), "/")
	if len(parts) < 2 || parts[0] != "threads" {
		apierr.Write(ctx, ad, apierr.New(apierr.NotFound,
			"No such API route."))
		return
	}
	if !validID([]byte(parts[1])) {
		apierr.Write(ctx, ad, apierr.New(apierr.InvalidThreadID,
			"The thread id must be 1-128 characters of [A-Za-z0-9._:-]."))
		return
	}
	k := store.Key{Tenant: tenant, Thread: parts[1]}
	method := string(ctx.Method())
	switch {
	case len(parts) == 2 && method == "GET":
		s.apiThread(ctx, k)
	case len(parts) == 4 && parts[2] == "runs" && parts[3] == "active" && method == "GET":
		s.apiActiveRun(ctx, k)
	case len(parts) == 5 && parts[2] == "runs" && parts[4] == "events" && method == "GET":
		if !validID([]byte(parts[3])) {
			apierr.Write(ctx, ad, apierr.New(apierr.InvalidRunID,
				"The run id must be 1-128 characters of [A-Za-z0-9._:-]."))
			return
		}
		s.apiEvents(ctx, k, parts[3])
	case len(parts) == 5 && parts[2] == "runs" && parts[4] == "cancel" && method == "POST":
		if !validID([]byte(parts[3])) {
			apierr.Write(ctx, ad, apierr.New(apierr.InvalidRunID,
				"The run id must be 1-128 characters of [A-Za-z0-9._:-]."))
			return
		}
		s.apiCancel(ctx, k, parts[3])
	default:
		apierr.Write(ctx, ad, apierr.New(apierr.NotFound,
			"No such API route."))
	}
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

// writeJSON answers with v as JSON (threaddoc.WriteJSON), in the OpenAI
// shape should it fail.
func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	threaddoc.WriteJSON(ctx, openAIAdapter, status, v)
}

func (s *Server) apiThread(ctx *fasthttp.RequestCtx, k store.Key) {
	rctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
	defer cancel()
	th, err := s.store.LoadThread(rctx, k)
	if err != nil {
		s.storeError(ctx, err, "thread")
		return
	}
	runs, err := s.store.ListRuns(rctx, k)
	if err != nil {
		s.storeError(ctx, err, "thread")
		return
	}
	threaddoc.WriteThread(ctx, th, runs)
}

func (s *Server) apiActiveRun(ctx *fasthttp.RequestCtx, k store.Key) {
	rctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
	defer cancel()
	runs, err := s.store.ListRuns(rctx, k)
	if err != nil {
		s.storeError(ctx, err, "thread")
		return
	}
	for i := len(runs) - 1; i >= 0; i-- {
		if runs[i].Status == store.Running {
			writeJSON(ctx, 200, threaddoc.ToRun(runs[i]))
			return
		}
	}
	apierr.Write(ctx, openAIAdapter, apierr.New(apierr.RunNotFound,
		"The thread has no running run."))
}

func (s *Server) apiCancel(ctx *fasthttp.RequestCtx, k store.Key, runID string) {
	rctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
	defer cancel()
	run, err := s.store.RequestCancel(rctx, k, runID)
	if err != nil {
		s.storeError(ctx, err, "run")
		return
	}
	// A run owned by this replica stops at once; another replica's run
	// stops when its owner next renews the lease.
	s.cancelLocal(k, runID)
	writeJSON(ctx, 202, threaddoc.ToRun(run))
}

// apiEvents replays a run's events from Last-Event-ID (or ?after=N), each
// preceded by "id: <n>", then follows the run live until it ends.
func (s *Server) apiEvents(ctx *fasthttp.RequestCtx, k store.Key, runID string) {
	after := int64(0)
	if v := ctx.Request.Header.Peek("Last-Event-ID"); len(v) > 0 {
		after, _ = strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
	} else if v := ctx.QueryArgs().Peek("after"); len(v) > 0 {
		after, _ = strconv.ParseInt(string(v), 10, 64)
	}
	if after < 0 {
		after = 0
	}
	rctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
	run, err := s.store.GetRun(rctx, k, runID)
	cancel()
	if err != nil {
		s.storeError(ctx, err, "run")
		return
	}
	_ = run
	ctx.SetStatusCode(200)
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	// A follower of a silent run gets the head now, not with the first
	// event or heartbeat.
	ctx.Response.ImmediateHeaderFlush = true
	conn := ctx.Conn()
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		s.streamEvents(w, conn, k, runID, after, true, nil)
	})
}
