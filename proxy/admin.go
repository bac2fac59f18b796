package proxy

import "github.com/valyala/fasthttp"

// serveAdmin is the audit API under /admin (admin token).
func (s *Server) serveAdmin(ctx *fasthttp.RequestCtx, rest []byte) {
	writeError(ctx, openAIAdapter, apiError{status: 404, code: "not_found", message: "No such admin route."})
}

// serveUI is the audit web page under /ui (admin token).
func (s *Server) serveUI(ctx *fasthttp.RequestCtx, rest []byte) {
	writeError(ctx, openAIAdapter, apiError{status: 404, code: "not_found", message: "No UI yet."})
}
