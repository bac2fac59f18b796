// Package api owns the tenant API under /api: a caller reads its own
// tenant's threads and runs, cancels a run, and follows a run's events
// (replayed from the store, then live), authenticated with the credential
// of its provider calls. Another tenant's thread is a 404, never a 403.
//
// It gets what it needs from the proxy at construction (Options): the
// store, how to find a request's tenant, how to stop a run this replica
// relays and how to follow a run's events. A Handler is safe for
// concurrent use.
package api

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/chronicle-proxy/chronicle/proxy/internal/route"
	"github.com/chronicle-proxy/chronicle/proxy/internal/threaddoc"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/valyala/fasthttp"
)

// Options are what a Handler needs from the proxy.
type Options struct {
	// Store is where threads and runs are read; nil means the proxy
	// stores nothing, and every route is a 404.
	Store store.Store
	// StoreTimeout bounds one store call.
	StoreTimeout time.Duration
	Logger       *slog.Logger
	// Shape renders the API's errors (OpenAI's error shape).
	Shape apierr.Shape
	// Tenant is the request's tenant, or the error to answer it with.
	Tenant func(ctx *fasthttp.RequestCtx) (string, *apierr.Error)
	// CancelLocal stops at once a run this replica relays (a no-op for
	// any other run).
	CancelLocal func(k store.Key, runID string)
	// Follow writes a run's events after `after` to w, each under
	// "id: <seq>", then follows the run live until it ends or the client
	// leaves.
	Follow func(w *bufio.Writer, conn net.Conn, k store.Key, runID string, after int64)
}

// Handler serves /api. Build it with New.
type Handler struct {
	o Options
}

// New returns the /api handler.
func New(o Options) *Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Handler{o: o}
}

// Serve answers one /api request; rest is the path after /api.
func (s *Handler) Serve(ctx *fasthttp.RequestCtx, rest []byte) {
	ad := s.o.Shape
	if s.o.Store == nil {
		apierr.Write(ctx, ad, apierr.New(apierr.NotFound,
			"This proxy stores nothing (no store configured)."))
		return
	}
	tenant, aerr := s.o.Tenant(ctx)
	if aerr != nil {
		apierr.Write(ctx, ad, aerr)
		return
	}
	parts := strings.Split(strings.Trim(string(rest), "/"), "/")
	if len(parts) < 2 || parts[0] != "threads" {
		apierr.Write(ctx, ad, apierr.New(apierr.NotFound,
			"No such API route."))
		return
	}
	if store.ValidID(parts[1]) != nil {
		apierr.Write(ctx, ad, apierr.New(apierr.InvalidThreadID,
			"The thread id must be 1-128 characters of [A-Za-z0-9._:-]."))
		return
	}
	k := store.Key{Tenant: tenant, Thread: parts[1]}
	method := string(ctx.Method())
	for _, r := range routes {
		vals, ok := r.Match("/api", method, parts)
		if !ok {
			continue
		}
		run := ""
		if len(vals) > 1 {
			run = vals[1]
			if store.ValidID(run) != nil {
				apierr.Write(ctx, ad, apierr.New(apierr.InvalidRunID,
					"The run id must be 1-128 characters of [A-Za-z0-9._:-]."))
				return
			}
		}
		r.serve(s, ctx, k, run)
		return
	}
	apierr.Write(ctx, ad, apierr.New(apierr.NotFound,
		"No such API route."))
}

// apiRoute is one /api route: its pattern ({thread} first, then {run}
// where it has one) and what serves it, given the thread's key and the
// run id ("" without one), both already checked.
type apiRoute struct {
	route.Route
	serve func(s *Handler, ctx *fasthttp.RequestCtx, k store.Key, run string)
}

// routes are every /api route; Serve dispatches by them and Routes lists
// them (the OpenAPI document's test compares the two). A request that
// matches none is a 404 not_found.
var routes = []apiRoute{
	{route.Route{Method: "GET", Path: "/api/threads/{thread}"},
		func(s *Handler, ctx *fasthttp.RequestCtx, k store.Key, _ string) { s.apiThread(ctx, k) }},
	{route.Route{Method: "POST", Path: "/api/threads/{thread}/fork"},
		func(s *Handler, ctx *fasthttp.RequestCtx, k store.Key, _ string) { s.apiFork(ctx, k) }},
	{route.Route{Method: "GET", Path: "/api/threads/{thread}/runs/active"},
		func(s *Handler, ctx *fasthttp.RequestCtx, k store.Key, _ string) { s.apiActiveRun(ctx, k) }},
	{route.Route{Method: "GET", Path: "/api/threads/{thread}/runs/{run}/events"},
		(*Handler).apiEvents},
	{route.Route{Method: "POST", Path: "/api/threads/{thread}/runs/{run}/cancel"},
		(*Handler).apiCancel},
}

// Routes lists every route Serve answers, in full ("/api/...").
func Routes() []route.Route {
	out := make([]route.Route, len(routes))
	for i, r := range routes {
		out[i] = r.Route
	}
	return out
}

// storeError answers a failed store read.
func (s *Handler) storeError(ctx *fasthttp.RequestCtx, err error, what string) {
	if errors.Is(err, store.ErrNotFound) {
		code := apierr.ThreadNotFound
		if what == "run" {
			code = apierr.RunNotFound
		}
		apierr.Write(ctx, s.o.Shape, apierr.New(code, "No such "+what+"."))
		return
	}
	s.o.Logger.Warn("store read failed", "err", err)
	apierr.Write(ctx, s.o.Shape, apierr.Retry(apierr.StoreUnavailable, 1,
		"The conversation store is unreachable."))
}

// writeJSON answers with v as JSON (threaddoc.WriteJSON), in the API's
// error shape should it fail.
func (s *Handler) writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	threaddoc.WriteJSON(ctx, s.o.Shape, status, v)
}

func (s *Handler) apiThread(ctx *fasthttp.RequestCtx, k store.Key) {
	rctx, cancel := context.WithTimeout(context.Background(), s.o.StoreTimeout)
	defer cancel()
	th, err := s.o.Store.LoadThread(rctx, k)
	if err != nil {
		s.storeError(ctx, err, "thread")
		return
	}
	runs, err := s.o.Store.ListRuns(rctx, k)
	if err != nil {
		s.storeError(ctx, err, "thread")
		return
	}
	threaddoc.WriteThread(ctx, th, runs)
}

// apiFork makes a new thread of the tenant's from the thread's prefix:
// {"at_message": N} keeps the first N messages, {"at_run": id} the
// transcript as that run left it; "thread" names the new thread (else
// one is made up). 201 with the new thread's document.
func (s *Handler) apiFork(ctx *fasthttp.RequestCtx, k store.Key) {
	req, aerr := threaddoc.ParseFork(ctx.PostBody())
	if aerr != nil {
		apierr.Write(ctx, s.o.Shape, aerr)
		return
	}
	rctx, cancel := context.WithTimeout(context.Background(), 2*s.o.StoreTimeout)
	defer cancel()
	th, aerr, cause := threaddoc.Fork(rctx, s.o.Store, k, req)
	if aerr != nil {
		if cause != nil {
			s.o.Logger.Warn("fork failed", "thread", k.Thread, "err", cause)
		}
		apierr.Write(ctx, s.o.Shape, aerr)
		return
	}
	threaddoc.WriteThreadStatus(ctx, 201, th, nil)
}

func (s *Handler) apiActiveRun(ctx *fasthttp.RequestCtx, k store.Key) {
	rctx, cancel := context.WithTimeout(context.Background(), s.o.StoreTimeout)
	defer cancel()
	runs, err := s.o.Store.ListRuns(rctx, k)
	if err != nil {
		s.storeError(ctx, err, "thread")
		return
	}
	for i := len(runs) - 1; i >= 0; i-- {
		if runs[i].Status == store.Running {
			s.writeJSON(ctx, 200, threaddoc.ToRun(runs[i]))
			return
		}
	}
	apierr.Write(ctx, s.o.Shape, apierr.New(apierr.RunNotFound,
		"The thread has no running run."))
}

func (s *Handler) apiCancel(ctx *fasthttp.RequestCtx, k store.Key, runID string) {
	rctx, cancel := context.WithTimeout(context.Background(), s.o.StoreTimeout)
	defer cancel()
	run, err := s.o.Store.RequestCancel(rctx, k, runID)
	if err != nil {
		s.storeError(ctx, err, "run")
		return
	}
	// A run owned by this replica stops at once; another replica's run
	// stops when its owner next renews the lease.
	s.o.CancelLocal(k, runID)
	s.writeJSON(ctx, 202, threaddoc.ToRun(run))
}

// apiEvents replays a run's events from Last-Event-ID (or ?after=N), each
// preceded by "id: <n>", then follows the run live until it ends.
func (s *Handler) apiEvents(ctx *fasthttp.RequestCtx, k store.Key, runID string) {
	after := int64(0)
	if v := ctx.Request.Header.Peek("Last-Event-ID"); len(v) > 0 {
		after, _ = strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
	} else if v := ctx.QueryArgs().Peek("after"); len(v) > 0 {
		after, _ = strconv.ParseInt(string(v), 10, 64)
	}
	if after < 0 {
		after = 0
	}
	rctx, cancel := context.WithTimeout(context.Background(), s.o.StoreTimeout)
	run, err := s.o.Store.GetRun(rctx, k, runID)
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
		s.o.Follow(w, conn, k, runID, after)
	})
}
