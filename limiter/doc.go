// Package limiter owns chronicle's admission control: FIFO gates that cap
// concurrent upstream streams per connection, the stream watchdog (first
// byte, idle and total clocks), request and token rate limits with
// reservation and settlement, upstream key pools, and a retry policy.
//
// Every kind has a small interface (Gate, Gates, RateLimiter) with an
// in-process implementation here, for a single replica, and a Redis
// implementation in limiter/redislimit, for replicas that share one Redis.
// limiter/limitertest holds the conformance suites both pass.
//
// The package knows nothing of providers or HTTP servers: callers pass
// names (a connection, a tenant), numbers (an estimate of tokens) and
// statuses, and get back sentinel errors (ErrQueueFull, ErrQueueTimeout,
// ErrRateLimited) with the figures a 429 response needs.
package limiter

import "errors"

// Sentinel errors. Compare with errors.Is; a rate-limit rejection is a
// *RateLimitError that also matches ErrRateLimited.
var (
	// ErrQueueFull means every slot was held and the queue already had
	// GateConfig.MaxWaiting waiters (or waiting was not allowed).
	ErrQueueFull = errors.New("limiter: queue full")
	// ErrQueueTimeout means the waiter did not get a slot within
	// GateConfig.Timeout.
	ErrQueueTimeout = errors.New("limiter: queue timeout")
	// ErrRateLimited means a rate limit refused the request; the error is
	// a *RateLimitError with the retry-after and quota figures.
	ErrRateLimited = errors.New("limiter: rate limited")
	// ErrNoKeys means a key pool has no usable key left (all removed).
	ErrNoKeys = errors.New("limiter: no usable upstream key")
	// ErrClosed means the limiter was closed.
	ErrClosed = errors.New("limiter: closed")
	// ErrStreamTimeout is what a watchdog's TimeoutError matches: one of
	// its clocks expired.
	ErrStreamTimeout = errors.New("limiter: stream timeout")
)
