// Package admin owns chronicle's operator side, across tenants: the Audit
// service that the admin API and the `chronicle threads` command share
// (listing with filters and text search, the thread document, JSONL
// export, deletion, usage totals), the admin API under /admin, the audit
// web page under /ui, and Go's profiles under /debug/pprof.
//
// Everything but the page's static files sits behind the admin token. A
// Handler gets what it needs at construction (Options): the store, the
// admin token, a logger and the store timeout; it knows nothing of the
// request pipeline. Every error it answers is written through apierr.
package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/config"
	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/valyala/fasthttp"
)

// Options are what a Handler needs.
type Options struct {
	// Store is what the audit reads and deletes from; nil means the proxy
	// stores nothing, and every authorized /admin call is a 404.
	Store store.Store
	// Token is admin.token: the bearer token of /admin and /debug. Empty
	// closes them (401 for everyone).
	Token config.Secret
	// Pprof is admin.pprof: serve /debug/pprof behind the token.
	Pprof bool
	// Logger receives the handler's log; nil means slog.Default().
	Logger *slog.Logger
	// StoreTimeout bounds one store call of an admin request (listing
	// with text search and usage get twelve times it); 0 means 5s.
	StoreTimeout time.Duration
	// WriteTimeout is limits.write_timeout: an export stream moves its
	// write deadline on by it after every thread, so a long export is cut
	// only when the client stops reading, not after write_timeout in all.
	// 0 means 30s.
	WriteTimeout time.Duration
	// Shape renders every error the handler answers: the OpenAI shape,
	// whatever the route. Required.
	Shape apierr.Shape
	// Config gives the retention periods POST /admin/prune applies and
	// the thread document's "kept until" (retention.go); nil: forever.
	Config *config.Config
}

// Handler serves /admin, /ui and /debug. It is safe for concurrent use.
type Handler struct {
	store        store.Store
	audit        *Audit // nil without a store
	token        config.Secret
	pprof        bool
	log          *slog.Logger
	storeTimeout time.Duration
	writeTimeout time.Duration
	shape        apierr.Shape
	cfg          *config.Config
}

// New returns the handler of o.
func New(o Options) *Handler {
	h := &Handler{store: o.Store, token: o.Token, pprof: o.Pprof, log: o.Logger, storeTimeout: o.StoreTimeout, writeTimeout: o.WriteTimeout, shape: o.Shape, cfg: o.Config}
	if h.log == nil {
		h.log = slog.Default()
	}
	if h.storeTimeout <= 0 {
		h.storeTimeout = 5 * time.Second
	}
	if h.writeTimeout <= 0 {
		h.writeTimeout = 30 * time.Second
	}
	if o.Store != nil {
		h.audit = NewAudit(o.Store)
	}
	return h
}

// authorized checks the admin bearer token in constant time (both
// sides hashed first, so not even the length leaks) and answers 401 when
// it is missing or wrong, or when no token is configured.
func (h *Handler) authorized(ctx *fasthttp.RequestCtx) bool {
	want := h.token.Reveal()
	v := ctx.Request.Header.Peek("Authorization")
	var got []byte
	if len(v) > 7 && bytes.EqualFold(v[:7], []byte("Bearer ")) {
		got = bytes.TrimSpace(v[7:])
	}
	if want != "" && len(got) > 0 {
		a, b := sha256.Sum256(got), sha256.Sum256([]byte(want))
		if subtle.ConstantTimeCompare(a[:], b[:]) == 1 {
			return true
		}
	}
	msg := "The admin API needs Authorization: Bearer <admin.token>."
	switch {
	case want == "":
		msg = "The admin API is disabled: no admin.token is configured."
	case len(got) > 0:
		msg = "The admin token is not valid."
	}
	apierr.Write(ctx, h.shape, apierr.New(apierr.InvalidAdminToken,
		msg))
	ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="chronicle admin"`)
	return false
}

func (h *Handler) badRequest(ctx *fasthttp.RequestCtx, code apierr.Code, msg string) {
	apierr.Write(ctx, h.shape, apierr.New(code, msg))
}

// auditError answers a failed audit call.
func (h *Handler) auditError(ctx *fasthttp.RequestCtx, err error) {
	switch {
	case errors.Is(err, ErrBadCursor), errors.Is(err, ErrBadFilter):
		h.badInput(ctx, err)
	case errors.Is(err, ErrBusy):
		apierr.Write(ctx, h.shape, apierr.Retry(apierr.ThreadBusy, 1,
			"A run is in flight on this thread; cancel it or retry when it ends."))
	default:
		h.storeError(ctx, err, "thread")
	}
}

// storeCtx bounds one admin call. Listing with text search and usage walk
// many threads, so they get longer than one store call on the request path.
func (h *Handler) storeCtx(scale int) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Duration(scale)*h.storeTimeout)
}

// storeError answers a failed store read.
func (h *Handler) storeError(ctx *fasthttp.RequestCtx, err error, what string) {
	if errors.Is(err, store.ErrNotFound) {
		code := apierr.ThreadNotFound
		if what == "run" {
			code = apierr.RunNotFound
		}
		apierr.Write(ctx, h.shape, apierr.New(code, "No such "+what+"."))
		return
	}
	h.log.Warn("store read failed", "err", err)
	apierr.Write(ctx, h.shape, apierr.Retry(apierr.StoreUnavailable, 1,
		"The conversation store is unreachable."))
}
