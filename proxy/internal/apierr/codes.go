package apierr

import "net/http"

// Code is one of chronicle's own error codes: stable and machine-readable,
// part of the HTTP contract (README, "Errors").
type Code string

// Every code chronicle answers with. Its status is in table, beside it.
const (
	// Routing and credentials.
	UnknownConnection Code = "unknown_connection"
	NotFound          Code = "not_found"
	MethodNotAllowed  Code = "method_not_allowed"
	MissingAPIKey     Code = "missing_api_key"
	InvalidAPIKey     Code = "invalid_api_key"
	InvalidAdminToken Code = "invalid_admin_token"

	// A request chronicle cannot use; nothing is forwarded or stored.
	BadRequest        Code = "bad_request"
	InvalidJSON       Code = "invalid_json"
	InvalidThreadID   Code = "invalid_thread_id"
	InvalidRunID      Code = "invalid_run_id"
	InvalidThreadMode Code = "invalid_thread_mode"
	InvalidSubject    Code = "invalid_subject"
	InvalidCursor     Code = "invalid_cursor"
	InvalidFilter     Code = "invalid_filter"
	InvalidForkPoint  Code = "invalid_fork_point"
	BodyTooLarge      Code = "body_too_large"
	HeaderTooLarge    Code = "header_too_large"
	RequestTimeout    Code = "request_timeout"

	// Threads and runs.
	ThreadNotFound Code = "thread_not_found"
	RunNotFound    Code = "run_not_found"
	ThreadBusy     Code = "thread_busy"
	RunIDConflict  Code = "run_id_conflict"
	RunInProgress  Code = "run_in_progress"
	ThreadExists   Code = "thread_exists"

	// Limits.
	RateLimited       Code = "rate_limited"
	KeysCoolingDown   Code = "keys_cooling_down"
	QueueFull         Code = "queue_full"
	QueueTimeout      Code = "queue_timeout"
	TooManyStreams    Code = "too_many_streams"
	NoUpstreamKeys    Code = "no_upstream_keys"
	LimitsUnavailable Code = "limits_unavailable"

	// The upstream, and streams after their headers went out.
	UpstreamUnavailable Code = "upstream_unavailable"
	UpstreamTimeout     Code = "upstream_timeout"
	UpstreamTruncated   Code = "upstream_truncated"
	StreamTruncated     Code = "stream_truncated"
	IdleTimeout         Code = "idle_timeout"
	TotalTimeout        Code = "total_timeout"
	RunCancelled        Code = "run_cancelled"
	ProxyLost           Code = "proxy_lost"

	// The store.
	StoreUnavailable Code = "store_unavailable"
	ExportFailed     Code = "export_failed"

	// chronicle itself.
	InternalError Code = "internal_error"
)

// StatusClientClosed is the status a run cancelled by its client is
// recorded with (nginx's 499; no client reads it).
const StatusClientClosed = 499

// table is each code's HTTP status: the one place it is decided.
var table = map[Code]int{
	UnknownConnection: http.StatusNotFound,
	NotFound:          http.StatusNotFound,
	MethodNotAllowed:  http.StatusMethodNotAllowed,
	MissingAPIKey:     http.StatusUnauthorized,
	InvalidAPIKey:     http.StatusUnauthorized,
	InvalidAdminToken: http.StatusUnauthorized,

	BadRequest:        http.StatusBadRequest,
	InvalidJSON:       http.StatusBadRequest,
	InvalidThreadID:   http.StatusBadRequest,
	InvalidRunID:      http.StatusBadRequest,
	InvalidThreadMode: http.StatusBadRequest,
	InvalidSubject:    http.StatusBadRequest,
	InvalidCursor:     http.StatusBadRequest,
	InvalidFilter:     http.StatusBadRequest,
	InvalidForkPoint:  http.StatusBadRequest,
	BodyTooLarge:      http.StatusRequestEntityTooLarge,
	HeaderTooLarge:    http.StatusRequestHeaderFieldsTooLarge,
	RequestTimeout:    http.StatusRequestTimeout,

	ThreadNotFound: http.StatusNotFound,
	RunNotFound:    http.StatusNotFound,
	ThreadBusy:     http.StatusConflict,
	RunIDConflict:  http.StatusConflict,
	RunInProgress:  http.StatusConflict,
	ThreadExists:   http.StatusConflict,

	RateLimited:       http.StatusTooManyRequests,
	KeysCoolingDown:   http.StatusTooManyRequests,
	QueueFull:         http.StatusTooManyRequests,
	QueueTimeout:      http.StatusTooManyRequests,
	TooManyStreams:    http.StatusTooManyRequests,
	NoUpstreamKeys:    http.StatusServiceUnavailable,
	LimitsUnavailable: http.StatusServiceUnavailable,

	UpstreamUnavailable: http.StatusBadGateway,
	UpstreamTimeout:     http.StatusGatewayTimeout,
	UpstreamTruncated:   http.StatusBadGateway,
	StreamTruncated:     http.StatusBadGateway,
	IdleTimeout:         http.StatusGatewayTimeout,
	TotalTimeout:        http.StatusGatewayTimeout,
	RunCancelled:        StatusClientClosed,
	ProxyLost:           http.StatusBadGateway,

	StoreUnavailable: http.StatusServiceUnavailable,
	ExportFailed:     http.StatusServiceUnavailable,

	InternalError: http.StatusInternalServerError,
}

// Status is the code's HTTP status (500 for a code not in the table).
func (c Code) Status() int {
	if s, ok := table[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}
