package limiter_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/chronicle-proxy/chronicle/limiter"
	"github.com/chronicle-proxy/chronicle/limiter/limitertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLocalGates(t *testing.T) {
	limitertest.RunGateTests(t, func(t *testing.T) (a, b limiter.Gates) {
		g := limiter.NewLocalGates()
		return g, g
	})
}

func TestLocalRateLimiter(t *testing.T) {
	limitertest.RunRateLimiterTests(t, func(t *testing.T, now func() time.Time) (a, b limiter.RateLimiter) {
		l := limiter.NewLocalRateLimiter(limiter.WithClock(now))
		return l, l
	})
}
