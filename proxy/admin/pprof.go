package admin

import (
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// pprofHandler serves Go's profiles under /debug/pprof.
var pprofHandler = fasthttpadaptor.NewFastHTTPHandler(func() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}())

// ServePprof serves profiles when admin.pprof is on, behind the admin
// token.
func (h *Handler) ServePprof(ctx *fasthttp.RequestCtx) {
	if !h.pprof {
		apierr.Write(ctx, h.shape, apierr.New(apierr.NotFound,
			"Profiling is off (admin.pprof)."))
		return
	}
	if !h.authorized(ctx) {
		return
	}
	// A CPU profile runs longer than the server's write timeout allows.
	if c := ctx.Conn(); c != nil {
		_ = c.SetWriteDeadline(time.Time{})
	}
	pprofHandler(ctx)
}
