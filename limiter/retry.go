package limiter

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RetryPolicy retries an upstream call that answered 429 or 5xx, with
// exponential backoff and full jitter, honouring the upstream's Retry-After.
//
// The caller owns the one rule that makes a retry safe: retry only before
// any byte of the response went to the client. Once a byte was forwarded
// the attempt's outcome is the client's, and it must not be retried.
type RetryPolicy struct {
	MaxAttempts int           // total attempts including the first; <= 1 means no retry
	BaseBackoff time.Duration // first backoff ceiling; default 250ms
	MaxBackoff  time.Duration // cap on one wait (Retry-After included); default 10s
}

// Retryable reports whether an upstream status is worth retrying: 429,
// 500, 502, 503, 504 (and 529, an overload status some upstreams use).
func Retryable(status int) bool {
	switch status {
	case 429, 500, 502, 503, 504, 529:
		return true
	}
	return false
}

// Delay returns how long to wait before attempt+1 after attempt (1-based)
// failed with a retryable status, and false when no attempt is left or the
// upstream's Retry-After exceeds MaxBackoff (better to hand the 429 on than
// to hold the client that long).
func (p RetryPolicy) Delay(attempt int, retryAfter time.Duration) (time.Duration, bool) {
	if attempt >= p.MaxAttempts {
		return 0, false
	}
	base, max := p.BaseBackoff, p.MaxBackoff
	if base <= 0 {
		base = 250 * time.Millisecond
	}
	if max <= 0 {
		max = 10 * time.Second
	}
	if retryAfter > 0 {
		if retryAfter > max {
			return 0, false
		}
		return retryAfter, true
	}
	ceil := base << (attempt - 1)
	if ceil > max || ceil <= 0 {
		ceil = max
	}
	return time.Duration(rand.Int64N(int64(ceil)) + 1), true
}

// Sleep waits d or until ctx ends, returning ctx's error then.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ParseRetryAfter reads a Retry-After header value: delay seconds or an
// HTTP date (relative to now), capped at 24h. It returns 0 for absent or
// unreadable values.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		if !(n > 0) { // also NaN
			return 0
		}
		if n >= maxRetryAfter.Seconds() {
			return maxRetryAfter
		}
		return time.Duration(n * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, maxRetryAfter)
		}
	}
	return 0
}

// maxRetryAfter caps what an upstream can ask for, so a bogus header cannot
// cool a key for ever.
const maxRetryAfter = 24 * time.Hour
