package proxy

import (
	_ "embed"

	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/valyala/fasthttp"
)

// openAPIDoc is the OpenAPI 3.1 document of chronicle's own routes (/api,
// /admin): openapi.json beside this file, kept by hand.
// TestOpenAPIDocument holds it to the route tables that serve /api and
// /admin (api.Routes, admin.Routes) and to what the handlers answer.
//
//go:embed openapi.json
var openAPIDoc []byte

// serveOpenAPI answers GET /openapi.json with the document. It needs no
// credential: the document describes routes, never data.
func serveOpenAPI(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() && !ctx.IsHead() {
		apierr.Write(ctx, openAIAdapter, apierr.New(apierr.MethodNotAllowed,
			"/openapi.json answers GET and HEAD only."))
		ctx.Response.Header.Set("Allow", "GET, HEAD")
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/json")
	ctx.SetBody(openAPIDoc)
}
