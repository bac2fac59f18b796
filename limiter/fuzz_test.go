package limiter_test

import (
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/limiter"
)

// FuzzParseRetryAfter: any header value parses to a non-negative delay.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"", "0", "3", "1.5", "-2", "1e309", "NaN", "Thu, 01 Jan 2026 00:00:10 GMT", "Wed, 21 Oct 2015 07:28:00 GMT"} {
		f.Add(s)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		if d := limiter.ParseRetryAfter(v, now); d < 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v", v, d)
		}
	})
}
