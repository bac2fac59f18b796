package admin

import (
	"embed"
	"strings"

	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/valyala/fasthttp"
)

//go:embed ui/index.html ui/app.js ui/style.css
var uiFS embed.FS

// uiAssets are the page's files: name → content type.
var uiAssets = map[string]string{
	"index.html": "text/html; charset=utf-8",
	"app.js":     "text/javascript; charset=utf-8",
	"style.css":  "text/css; charset=utf-8",
}

// ServeUI serves the audit web page under /ui; rest is the path after
// /ui. The static files are public; the page asks for the admin token and
// sends it as a Bearer token on its own calls to /admin, which is where
// the data is.
func (h *Handler) ServeUI(ctx *fasthttp.RequestCtx, rest []byte) {
	m := string(ctx.Method())
	if m != "GET" && m != "HEAD" {
		apierr.Write(ctx, h.shape, apierr.New(apierr.MethodNotAllowed,
			"The UI is read with GET."))
		return
	}
	name := strings.Trim(string(rest), "/")
	if name == "" {
		name = "index.html"
	}
	ct, ok := uiAssets[name]
	if !ok {
		apierr.Write(ctx, h.shape, apierr.New(apierr.NotFound,
			"No such UI file."))
		return
	}
	b, err := uiFS.ReadFile("ui/" + name)
	if err != nil {
		apierr.Write(ctx, h.shape, apierr.New(apierr.NotFound,
			"No such UI file."))
		return
	}
	hdr := &ctx.Response.Header
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	ctx.SetStatusCode(200)
	ctx.SetContentType(ct)
	ctx.SetBody(b)
}
