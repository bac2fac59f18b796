package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/chronicle-proxy/chronicle/proxy/internal/route"
	"github.com/chronicle-proxy/chronicle/proxy/internal/threaddoc"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/valyala/fasthttp"
)

// ServeAdmin is the audit API under /admin; rest is the path after
// /admin. Every route needs `Authorization: Bearer <admin.token>`; without
// a configured token the API is closed (401 for everyone). Errors use
// Options.Shape (the OpenAI one).
//
//	GET    /admin/threads                       list (filters, cursor)
//	GET    /admin/threads/{tenant}/{thread}     the thread document
//	GET    /admin/threads/{tenant}/{thread}/export  one JSONL line
//	DELETE /admin/threads/{tenant}/{thread}     the thread and all it owns
//	GET    /admin/export                        JSONL of every thread that passes the filters, streamed
//	GET    /admin/usage                         usage totals by tenant, connection, model or day
//	GET    /admin/threads/{tenant}/{thread}/runs/{run}  one run, with its stored answer and upstream body
//	DELETE /admin/subjects/{tenant}/{subject}   erase a subject's threads
//	DELETE /admin/tenants/{tenant}              erase a tenant's threads
//	GET    /admin/tombstones                    the erasures' audit trail
//	POST   /admin/prune[?dry_run=true]          the retention pass, now
//	POST   /admin/threads/{tenant}/{thread}/fork        a new thread from the thread's prefix (as /api's fork)
//
// Path segments are URL-unescaped, so a tenant with '/' or '%' travels as
// %2F / %25. The table routes below is what is served; the list above is
// its summary.
func (h *Handler) ServeAdmin(ctx *fasthttp.RequestCtx, rest []byte) {
	if !h.authorized(ctx) {
		return
	}
	if h.audit == nil {
		apierr.Write(ctx, h.shape, apierr.New(apierr.NotFound,
			"This proxy stores nothing (no store configured)."))
		return
	}
	var parts []string
	for _, p := range strings.Split(strings.Trim(string(rest), "/"), "/") {
		u, err := url.PathUnescape(p)
		if err != nil {
			h.badRequest(ctx, apierr.BadRequest, "A path segment is not valid URL escaping.")
			return
		}
		parts = append(parts, u)
	}
	method := string(ctx.Method())
	for _, r := range routes {
		if vals, ok := r.Match("/admin", method, parts); ok {
			r.serve(h, ctx, h.audit, vals)
			return
		}
	}
	apierr.Write(ctx, h.shape, apierr.New(apierr.NotFound,
		"No such admin route."))
}

// adminRoute is one /admin route: its pattern and what serves it, given
// the values of the pattern's {name} segments in order.
type adminRoute struct {
	route.Route
	serve func(h *Handler, ctx *fasthttp.RequestCtx, a *Audit, vals []string)
}

// routes are every /admin route; ServeAdmin dispatches by them and Routes
// lists them (the OpenAPI document's test compares the two). A request
// that matches none is a 404 not_found.
var routes = []adminRoute{
	{route.Route{Method: "GET", Path: "/admin/threads"},
		func(h *Handler, ctx *fasthttp.RequestCtx, a *Audit, _ []string) { h.list(ctx, a) }},
	{route.Route{Method: "GET", Path: "/admin/export"},
		func(h *Handler, ctx *fasthttp.RequestCtx, a *Audit, _ []string) { h.export(ctx, a) }},
	{route.Route{Method: "GET", Path: "/admin/usage"},
		func(h *Handler, ctx *fasthttp.RequestCtx, a *Audit, _ []string) { h.usage(ctx, a) }},
	{route.Route{Method: "GET", Path: "/admin/threads/{tenant}/{thread}"},
		func(h *Handler, ctx *fasthttp.RequestCtx, a *Audit, v []string) {
			h.thread(ctx, a, store.Key{Tenant: v[0], Thread: v[1]})
		}},
	{route.Route{Method: "DELETE", Path: "/admin/threads/{tenant}/{thread}"},
		func(h *Handler, ctx *fasthttp.RequestCtx, a *Audit, v []string) {
			h.delete(ctx, a, store.Key{Tenant: v[0], Thread: v[1]})
		}},
	{route.Route{Method: "GET", Path: "/admin/threads/{tenant}/{thread}/export"},
		func(h *Handler, ctx *fasthttp.RequestCtx, a *Audit, v []string) {
			h.exportThread(ctx, a, store.Key{Tenant: v[0], Thread: v[1]})
		}},
	{route.Route{Method: "POST", Path: "/admin/threads/{tenant}/{thread}/fork"},
		func(h *Handler, ctx *fasthttp.RequestCtx, _ *Audit, v []string) {
			h.fork(ctx, store.Key{Tenant: v[0], Thread: v[1]})
		}},
	{route.Route{Method: "GET", Path: "/admin/threads/{tenant}/{thread}/runs/{run}"},
		func(h *Handler, ctx *fasthttp.RequestCtx, _ *Audit, v []string) {
			h.run(ctx, store.Key{Tenant: v[0], Thread: v[1]}, v[2])
		}},
	// Erasure and its audit trail (erasure_http.go).
	{route.Route{Method: "DELETE", Path: "/admin/subjects/{tenant}/{subject}"},
		func(h *Handler, ctx *fasthttp.RequestCtx, a *Audit, v []string) { h.eraseSubject(ctx, a, v[0], v[1]) }},
	{route.Route{Method: "DELETE", Path: "/admin/tenants/{tenant}"},
		func(h *Handler, ctx *fasthttp.RequestCtx, a *Audit, v []string) { h.eraseTenant(ctx, a, v[0]) }},
	{route.Route{Method: "GET", Path: "/admin/tombstones"},
		func(h *Handler, ctx *fasthttp.RequestCtx, a *Audit, _ []string) { h.tombstones(ctx, a) }},
	{route.Route{Method: "POST", Path: "/admin/prune"},
		func(h *Handler, ctx *fasthttp.RequestCtx, a *Audit, _ []string) { h.prune(ctx, a) }},
}

// Routes lists every route ServeAdmin answers, in full ("/admin/...").
func Routes() []route.Route {
	out := make([]route.Route, len(routes))
	for i, r := range routes {
		out[i] = r.Route
	}
	return out
}

// run answers one run with what only a single-run read carries: the
// stored non-stream answer ("response") and, where the connection keeps it
// (audit.upstream_body), the body sent upstream ("upstream_body").
func (h *Handler) run(ctx *fasthttp.RequestCtx, k store.Key, runID string) {
	// An id the store cannot hold is the caller's mistake (400, as on the
	// thread routes), not a store outage.
	err := k.Validate()
	if err == nil {
		err = store.ValidID(runID)
	}
	if err != nil {
		h.badInput(ctx, fmt.Errorf("%w: %w", ErrBadFilter, err))
		return
	}
	rctx, cancel := h.storeCtx(1)
	defer cancel()
	run, err := h.store.GetRun(rctx, k, runID)
	if err != nil {
		h.storeError(ctx, err, "run")
		return
	}
	doc := struct {
		threaddoc.Run
		Response     json.RawMessage `json:"response"`
		UpstreamBody json.RawMessage `json:"upstream_body"`
	}{Run: threaddoc.ToRun(run), Response: threaddoc.RawOr(run.Response, "null"), UpstreamBody: threaddoc.RawOr(run.UpstreamBody, "null")}
	threaddoc.WriteJSON(ctx, h.shape, 200, doc)
}

// fork answers POST .../fork as the tenant API does (threaddoc.Fork): 201
// with the new thread's document.
func (h *Handler) fork(ctx *fasthttp.RequestCtx, k store.Key) {
	if err := k.Validate(); err != nil {
		h.badInput(ctx, fmt.Errorf("%w: %w", ErrBadFilter, err))
		return
	}
	req, aerr := threaddoc.ParseFork(ctx.PostBody())
	if aerr != nil {
		apierr.Write(ctx, h.shape, aerr)
		return
	}
	rctx, cancel := h.storeCtx(2)
	defer cancel()
	th, aerr, cause := threaddoc.Fork(rctx, h.store, k, req)
	if aerr != nil {
		if cause != nil {
			h.log.Warn("fork failed", "tenant", k.Tenant, "thread", k.Thread, "err", cause)
		}
		apierr.Write(ctx, h.shape, aerr)
		return
	}
	h.log.Info("thread forked by admin", "tenant", k.Tenant, "thread", k.Thread, "fork", th.Thread, "at", th.Fork.At)
	threaddoc.WriteThreadStatus(ctx, 201, th, nil)
}

// auditQuery reads the listing filters from the query string.
func (h *Handler) auditQuery(ctx *fasthttp.RequestCtx) (AuditQuery, bool) {
	args := ctx.QueryArgs()
	q := AuditQuery{
		Tenant: string(args.Peek("tenant")), Connection: string(args.Peek("connection")),
		Model: string(args.Peek("model")), Status: store.Status(args.Peek("status")),
		Text: string(args.Peek("q")), Cursor: string(args.Peek("cursor")),
	}
	var ok bool
	if q.Since, ok = h.queryTime(ctx, "since"); !ok {
		return q, false
	}
	if q.Until, ok = h.queryTime(ctx, "until"); !ok {
		return q, false
	}
	if v := args.Peek("limit"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 {
			h.badRequest(ctx, apierr.InvalidFilter, "limit must be a positive integer (at most 500).")
			return q, false
		}
		q.Limit = n
	}
	if err := q.Check(); err != nil {
		h.badInput(ctx, err)
		return q, false
	}
	return q, true
}

// badInput answers an ErrBadCursor or ErrBadFilter. The message names the
// filter and the value the caller sent; no secret can be in it.
func (h *Handler) badInput(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, ErrBadCursor) {
		h.badRequest(ctx, apierr.InvalidCursor, "The cursor is not one this API handed out.")
		return
	}
	h.badRequest(ctx, apierr.InvalidFilter, strings.TrimPrefix(err.Error(), ErrBadFilter.Error()+": ")+".")
}

func (h *Handler) queryTime(ctx *fasthttp.RequestCtx, name string) (time.Time, bool) {
	v := ctx.QueryArgs().Peek(name)
	if len(v) == 0 {
		return time.Time{}, true
	}
	t, err := time.Parse(time.RFC3339Nano, string(v))
	if err != nil {
		h.badRequest(ctx, apierr.InvalidFilter, name+" must be an RFC 3339 time, such as 2026-01-02T15:04:05Z.")
		return t, false
	}
	return t, true
}

func (h *Handler) list(ctx *fasthttp.RequestCtx, a *Audit) {
	q, ok := h.auditQuery(ctx)
	if !ok {
		return
	}
	rctx, cancel := h.storeCtx(12)
	defer cancel()
	page, err := a.List(rctx, q)
	if err != nil {
		h.auditError(ctx, err)
		return
	}
	threaddoc.WriteJSON(ctx, h.shape, 200, page)
}

func (h *Handler) thread(ctx *fasthttp.RequestCtx, a *Audit, k store.Key) {
	rctx, cancel := h.storeCtx(1)
	defer cancel()
	doc, err := a.Thread(rctx, k)
	if err != nil {
		h.auditError(ctx, err)
		return
	}
	ctx.SetStatusCode(200)
	ctx.SetContentType("application/json")
	ctx.SetBody(h.withRetention(doc))
}

func (h *Handler) exportThread(ctx *fasthttp.RequestCtx, a *Audit, k store.Key) {
	rctx, cancel := h.storeCtx(1)
	defer cancel()
	var buf bytes.Buffer
	if err := a.ExportThread(rctx, k, &buf); err != nil {
		h.auditError(ctx, err)
		return
	}
	ctx.SetStatusCode(200)
	ctx.SetContentType("application/x-ndjson")
	ctx.SetBody(buf.Bytes())
}

func (h *Handler) delete(ctx *fasthttp.RequestCtx, a *Audit, k store.Key) {
	rctx, cancel := h.storeCtx(1)
	defer cancel()
	runs, err := a.Delete(rctx, k)
	if err != nil {
		h.auditError(ctx, err)
		return
	}
	h.log.Info("thread deleted by admin", "tenant", k.Tenant, "thread", k.Thread, "runs", runs)
	threaddoc.WriteJSON(ctx, h.shape, 200, map[string]any{"tenant": k.Tenant, "id": k.Thread, "deleted": true, "runs": runs})
}

// export streams every thread that passes the filters as JSONL, a
// store page at a time, flushing after each page: memory holds one page of
// summaries and one thread, whatever the export's size. The store is
// checked before the head goes out; an error after it ends the stream with
// one last line {"error":{...}} in the OpenAI shape.
func (h *Handler) export(ctx *fasthttp.RequestCtx, a *Audit) {
	q, ok := h.auditQuery(ctx)
	if !ok {
		return
	}
	pctx, cancel := h.storeCtx(1)
	err := h.store.Ping(pctx)
	cancel()
	if err != nil {
		h.auditError(ctx, err)
		return
	}
	ctx.SetStatusCode(200)
	ctx.SetContentType("application/x-ndjson")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	// fasthttp sets the write deadline once, for the whole response: move
	// it on as the export makes progress (as a stream's flushes do).
	conn, timeout := ctx.Conn(), h.writeTimeout
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		ectx, cancel := context.WithCancel(context.Background())
		defer cancel()
		n, err := a.Export(ectx, q, w, func(int) { _ = conn.SetWriteDeadline(time.Now().Add(timeout)) })
		if err != nil {
			h.log.Warn("admin export ended early", "threads", n, "err", err)
			_, _ = w.Write(apierr.Body(h.shape, apierr.New(apierr.ExportFailed, "The export ended early: the store could not be read.")))
			_, _ = w.Write([]byte("\n"))
			_ = w.Flush()
		}
	})
}

func (h *Handler) usage(ctx *fasthttp.RequestCtx, a *Audit) {
	args := ctx.QueryArgs()
	q := UsageQuery{GroupBy: string(args.Peek("group_by")), Tenant: string(args.Peek("tenant")), Connection: string(args.Peek("connection"))}
	var ok bool
	if q.Since, ok = h.queryTime(ctx, "since"); !ok {
		return
	}
	if q.Until, ok = h.queryTime(ctx, "until"); !ok {
		return
	}
	rctx, cancel := h.storeCtx(12)
	defer cancel()
	rep, err := a.Usage(rctx, q)
	if err != nil {
		h.auditError(ctx, err)
		return
	}
	threaddoc.WriteJSON(ctx, h.shape, 200, rep)
}
