package redislimit_test

import (
	"context"
	"testing"

	"github.com/chronicle-proxy/chronicle/limiter"
	"github.com/chronicle-proxy/chronicle/limiter/redislimit"
	"github.com/chronicle-proxy/chronicle/store/redistest"
)

func benchLimiter(b *testing.B) *redislimit.Limiter {
	srv := redistest.Start(b)
	l, err := redislimit.New(context.Background(), srv.Client(b), redislimit.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// BenchmarkSharedGateAcquireRelease: one uncontended round trip pair
// (acquire script + release script) against a local redis-server.
func BenchmarkSharedGateAcquireRelease(b *testing.B) {
	g := benchLimiter(b).Gate("bench", limiter.GateConfig{MaxConcurrent: 8})
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

// BenchmarkSharedGateContended: 8 goroutines per CPU through 4 slots; most
// acquisitions queue and are woken by pub/sub.
func BenchmarkSharedGateContended(b *testing.B) {
	g := benchLimiter(b).Gate("bench", limiter.GateConfig{MaxConcurrent: 4})
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

func BenchmarkSharedRateAdmitSettle(b *testing.B) {
	l := benchLimiter(b)
	ctx := context.Background()
	lim := limiter.Limits{RPM: 1 << 40, TPM: 1 << 45}
	b.ReportAllocs()
	for b.Loop() {
		r, err := l.Admit(ctx, "conn:bench", lim, 1000)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Settle(ctx, 500); err != nil {
			b.Fatal(err)
		}
	}
}
