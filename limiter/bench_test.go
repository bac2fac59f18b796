package limiter_test

import (
	"context"
	"testing"

	"github.com/chronicle-proxy/chronicle/limiter"
)

func BenchmarkLocalGateAcquireRelease(b *testing.B) {
	g := limiter.NewGate(limiter.GateConfig{MaxConcurrent: 8})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s, err := g.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		s.Release()
	}
}

// BenchmarkLocalGateContended runs GOMAXPROCS goroutines through a gate of
// 4 slots, so most acquisitions queue.
func BenchmarkLocalGateContended(b *testing.B) {
	g := limiter.NewGate(limiter.GateConfig{MaxConcurrent: 4})
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s, err := g.Acquire(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			s.Release()
		}
	})
}

func BenchmarkLocalRateAdmitSettle(b *testing.B) {
	l := limiter.NewLocalRateLimiter()
	ctx := context.Background()
	lim := limiter.Limits{RPM: 1 << 40, TPM: 1 << 50}
	b.ReportAllocs()
	for b.Loop() {
		r, err := l.Admit(ctx, "conn:bench", lim, 1000)
		if err != nil {
			b.Fatal(err)
		}
		_ = r.Settle(ctx, 500)
	}
}
