package proxy

import (
	"strconv"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/valyala/fasthttp"
)

// apiError is one of chronicle's own errors, before an adapter shapes it for
// the caller's SDK.
type apiError struct {
	status     int
	code       string // stable, machine-readable: thread_busy, body_too_large, ...
	message    string // one sentence for a person; never carries a secret
	retryAfter int    // seconds; 0 = no Retry-After header
}

// Chronicle's own error codes. They are part of the HTTP contract.
const (
	codeUnknownConnection  = "unknown_connection"
	codeMissingAPIKey      = "missing_api_key"
	codeInvalidAPIKey      = "invalid_api_key"
	codeBodyTooLarge       = "body_too_large"
	codeHeaderTooLarge     = "header_too_large"
	codeRequestTimeout     = "request_timeout"
	codeBadRequest         = "bad_request"
	codeUpstreamTimeout    = "upstream_timeout"
	codeUpstreamError      = "upstream_unavailable"
	codeStreamTruncated    = "stream_truncated"
	codeStreamIdleTimeout  = "idle_timeout"
	codeStreamTotalTimeout = "total_timeout"
	codeStoreUnavailable   = "store_unavailable"
	codeUpstreamTruncated  = "upstream_truncated"
)

// writeError answers the request with e in the caller's provider shape.
func writeError(ctx *fasthttp.RequestCtx, ad adapters.Adapter, e apiError) {
	ctx.Response.Reset()
	ctx.SetStatusCode(e.status)
	ctx.SetContentType("application/json")
	if e.retryAfter > 0 {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	ctx.SetBody(ad.ErrorBody(e.status, e.code, e.message))
}

// Error lets an apiError travel as an error until it is written.
func (e *apiError) Error() string { return e.code + ": " + e.message }
