// Package apierr owns chronicle's own errors: every code it answers with
// (codes.go, each with its HTTP status), the Error value the request
// pipeline returns, the mapping of the errors its parts report (upstream
// round trips, store calls) to codes, and the one place an error is
// written to a client — as a body in the caller's provider shape, or as an
// SSE error event once a stream's headers went out.
//
// Messages are one sentence for a person and never carry a secret or an
// internal error's text.
package apierr

import (
	"errors"
	"net"
	"strconv"

	"github.com/valyala/fasthttp"
)

// Error is one of chronicle's own errors, before a Shape renders it.
type Error struct {
	Code Code
	// Message is one sentence for a person; never a secret.
	Message string
	// RetryAfter, in seconds, is sent as Retry-After when above 0.
	RetryAfter int
}

// The constructors and Write are never inlined: errors are cold, and
// inlined they would grow the frames of the request path, which an open
// connection's small stack must hold (proxy's TestConnectionStackStaysSmall).

// New is an error with code and message.
//
//go:noinline
func New(code Code, message string) *Error { return &Error{Code: code, Message: message} }

// Retry is an error with code and message that the client may retry after
// seconds (at least 1).
//
//go:noinline
func Retry(code Code, seconds int, message string) *Error {
	if seconds < 1 {
		seconds = 1
	}
	return &Error{Code: code, Message: message, RetryAfter: seconds}
}

// Status is the error's HTTP status.
func (e *Error) Status() int { return e.Code.Status() }

// Error lets an Error travel as an error until it is written.
func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Shape renders chronicle's errors in one provider's format; every wire
// format's adapter is one.
type Shape interface {
	// ErrorBody is an error response body.
	ErrorBody(status int, code, message string) []byte
	// StreamErrorEvent is the SSE event that reports an error after a
	// stream's headers went out.
	StreamErrorEvent(status int, code, message string) []byte
}

// Write answers the request with e in shape, replacing whatever response
// ctx held.
//
//go:noinline
func Write(ctx *fasthttp.RequestCtx, shape Shape, e *Error) {
	ctx.Response.Reset()
	ctx.SetStatusCode(e.Status())
	ctx.SetContentType("application/json")
	if e.RetryAfter > 0 {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	ctx.SetBody(shape.ErrorBody(e.Status(), string(e.Code), e.Message))
}

// Body is e as a response body in shape, for an answer whose status line
// already went out (an export that broke off).
func Body(shape Shape, e *Error) []byte {
	return shape.ErrorBody(e.Status(), string(e.Code), e.Message)
}

// Event is e as the SSE error event of shape.
func Event(shape Shape, e *Error) []byte {
	return shape.StreamErrorEvent(e.Status(), string(e.Code), e.Message)
}

// As returns err's *Error, or def when err holds none.
func As(err error, def *Error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return def
}

// The answers to an upstream round trip that failed before its response
// head, by what went wrong.
var (
	upstreamTimeout = New(UpstreamTimeout, "The upstream did not answer within the connection's timeouts.first_byte.")
	upstreamDown    = New(UpstreamUnavailable, "The upstream could not be reached or closed the connection.")
)

// IsTimeout reports whether err is a round trip that ran out of time.
func IsTimeout(err error) bool {
	var netErr net.Error
	return errors.Is(err, fasthttp.ErrTimeout) || (errors.As(err, &netErr) && netErr.Timeout())
}

// Upstream maps a failed upstream round trip to its answer: a timeout
// before the response head is 504 upstream_timeout, anything else 502
// upstream_unavailable.
func Upstream(err error) *Error {
	if IsTimeout(err) {
		return upstreamTimeout
	}
	return upstreamDown
}

// UpstreamTimedOut and UpstreamDown are Upstream's two answers, for a
// retry answered from a run that ended with one of them.
func UpstreamTimedOut() *Error { return upstreamTimeout }

// UpstreamDown is the answer to an upstream that could not be reached.
func UpstreamDown() *Error { return upstreamDown }
