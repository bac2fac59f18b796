package admin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/config"
	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/chronicle-proxy/chronicle/proxy/internal/threaddoc"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"
)

// eraser reads ?actor= and ?reason=. Without an actor the tombstone
// names the admin token by a fingerprint (the first 8 hex digits of its
// SHA-256), so that erasures made under a rotated token stay apart.
func (h *Handler) eraser(ctx *fasthttp.RequestCtx) (Eraser, bool) {
	args := ctx.QueryArgs()
	e := Eraser{Actor: string(args.Peek("actor")), Reason: string(args.Peek("reason"))}
	if err := CheckEraser(e); err != nil {
		h.badInput(ctx, err)
		return e, false
	}
	if e.Actor == "" {
		sum := sha256.Sum256([]byte(h.token.Reveal()))
		e.Actor = "admin-token:" + hex.EncodeToString(sum[:4])
	}
	return e, true
}

func (h *Handler) eraseSubject(ctx *fasthttp.RequestCtx, a *Audit, tenant, subject string) {
	by, ok := h.eraser(ctx)
	if !ok {
		return
	}
	rctx, cancel := h.storeCtx(12)
	defer cancel()
	out, err := a.EraseSubject(rctx, tenant, subject, by)
	h.erased(ctx, out, err)
}

func (h *Handler) eraseTenant(ctx *fasthttp.RequestCtx, a *Audit, tenant string) {
	by, ok := h.eraser(ctx)
	if !ok {
		return
	}
	rctx, cancel := h.storeCtx(12)
	defer cancel()
	out, err := a.EraseTenant(rctx, tenant, by)
	h.erased(ctx, out, err)
}

// erased answers an erasure: 200 with what it removed, also when threads
// with a run in flight were left (complete false, busy names them).
func (h *Handler) erased(ctx *fasthttp.RequestCtx, out Erased, err error) {
	if errors.Is(err, ErrNoErasure) {
		apierr.Write(ctx, h.shape, apierr.New(apierr.NotFound, "This store cannot erase by subject or tenant."))
		return
	}
	if err != nil && out.Tombstone != "" {
		// Cut short after deleting part of the scope: say how much went,
		// and that calling again finishes it (erasures are idempotent).
		h.log.Warn("erasure cut short", "scope", out.Scope, "threads", out.Threads, "tombstone", out.Tombstone, "err", err)
		apierr.Write(ctx, h.shape, apierr.Retry(apierr.StoreUnavailable, 1, fmt.Sprintf(
			"The erasure was cut short after removing %d threads (tombstone %s): call again to finish it.", out.Threads, out.Tombstone)))
		return
	}
	if err != nil {
		h.auditError(ctx, err)
		return
	}
	h.log.Info("erased by admin", "scope", out.Scope, "threads", out.Threads, "runs", out.Runs, "busy", len(out.Busy), "tombstone", out.Tombstone)
	threaddoc.WriteJSON(ctx, h.shape, 200, out)
}

func (h *Handler) tombstones(ctx *fasthttp.RequestCtx, a *Audit) {
	limit := 100
	if v := ctx.QueryArgs().Peek("limit"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 || n > 1000 {
			h.badRequest(ctx, apierr.InvalidFilter, "limit must be an integer from 1 to 1000.")
			return
		}
		limit = n
	}
	rctx, cancel := h.storeCtx(1)
	defer cancel()
	ts, err := a.Tombstones(rctx, limit)
	if errors.Is(err, ErrNoErasure) {
		apierr.Write(ctx, h.shape, apierr.New(apierr.NotFound, "This store keeps no tombstones."))
		return
	}
	if err != nil {
		h.auditError(ctx, err)
		return
	}
	threaddoc.WriteJSON(ctx, h.shape, 200, map[string]any{"tombstones": ts})
}

// prune runs the retention pass now (?dry_run=true: lists what would go).
// It takes no lease: a pass running meanwhile on a replica deletes the
// same threads, and a delete is idempotent.
func (h *Handler) prune(ctx *fasthttp.RequestCtx, a *Audit) {
	dry := false
	switch v := string(ctx.QueryArgs().Peek("dry_run")); v {
	case "", "false":
	case "true":
		dry = true
	default:
		h.badRequest(ctx, apierr.InvalidFilter, "dry_run must be true or false.")
		return
	}
	cfg := h.cfg
	if cfg == nil {
		cfg = &config.Config{}
	}
	rctx, cancel := h.storeCtx(12)
	defer cancel()
	out, err := a.Prune(rctx, cfg, time.Now(), dry)
	if err != nil {
		h.auditError(ctx, err)
		return
	}
	if !dry {
		h.log.Info("pruned by admin", "threads", len(out.Threads), "runs", out.Runs, "busy", len(out.Busy))
	}
	threaddoc.WriteJSON(ctx, h.shape, 200, out)
}

// withRetention adds to an admin thread document, when retention is on,
// its retention under the config: "retention" (a duration, or "forever")
// and "kept_until" (when the pass may delete it; null for forever).
// Without retention the document is the tenant API's, byte for byte.
func (h *Handler) withRetention(doc []byte) []byte {
	if h.cfg == nil || !h.cfg.RetentionOn() {
		return doc
	}
	p := h.cfg.RetentionFor(gjson.GetBytes(doc, "tenant").String(), gjson.GetBytes(doc, "connection").String())
	out, err := sjson.SetBytes(doc, "retention", p.String())
	if err != nil {
		return doc
	}
	var until any // null: forever
	if updated, err := time.Parse(time.RFC3339Nano, gjson.GetBytes(doc, "updated_at").String()); err == nil && p != config.Forever {
		until = Expiry(p, updated).UTC().Format(time.RFC3339Nano)
	}
	if out2, err := sjson.SetBytes(out, "kept_until", until); err == nil {
		return out2
	}
	return out
}
