package redislimit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/chronicle-proxy/chronicle/limiter"
	"github.com/chronicle-proxy/chronicle/limiter/limitertest"
	"github.com/chronicle-proxy/chronicle/limiter/redislimit"
	"github.com/chronicle-proxy/chronicle/store/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// replica starts one Limiter on its own client, as a separate process would.
func replica(t *testing.T, rdb redis.UniversalClient, o redislimit.Options) *redislimit.Limiter {
	t.Helper()
	l, err := redislimit.New(context.Background(), rdb, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestGatesSingleNode(t *testing.T) {
	srv := redistest.Start(t)
	limitertest.RunGateTests(t, func(t *testing.T) (a, b limiter.Gates) {
		o := redislimit.Options{Prefix: t.Name()}
		return replica(t, srv.Client(t), o), replica(t, srv.Client(t), o)
	})
}

func TestGatesCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	limitertest.RunGateTests(t, func(t *testing.T) (a, b limiter.Gates) {
		o := redislimit.Options{Prefix: t.Name()}
		return replica(t, c.ClusterClient(t), o), replica(t, c.ClusterClient(t), o)
	})
}

func TestRateLimiterSingleNode(t *testing.T) {
	srv := redistest.Start(t)
	limitertest.RunRateLimiterTests(t, func(t *testing.T, now func() time.Time) (a, b limiter.RateLimiter) {
		o := redislimit.Options{Prefix: t.Name(), Now: now}
		return replica(t, srv.Client(t), o), replica(t, srv.Client(t), o)
	})
}

func TestRateLimiterCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	limitertest.RunRateLimiterTests(t, func(t *testing.T, now func() time.Time) (a, b limiter.RateLimiter) {
		o := redislimit.Options{Prefix: t.Name(), Now: now}
		return replica(t, c.ClusterClient(t), o), replica(t, c.ClusterClient(t), o)
	})
}

// TestRateLimiterServerClock runs with Redis's own TIME: a burst past the
// limit is refused with a positive retry-after.
func TestRateLimiterServerClock(t *testing.T) {
	srv := redistest.Start(t)
	l := replica(t, srv.Client(t), redislimit.Options{})
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if _, err := l.Admit(ctx, "k", limiter.Limits{RPM: 5}, 0); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	var rle *limiter.RateLimitError
	if _, err := l.Admit(ctx, "k", limiter.Limits{RPM: 5}, 0); !errors.As(err, &rle) || rle.RetryAfter <= 0 || rle.RetryAfter > 12*time.Second {
		t.Fatalf("sixth request: %v", err)
	}
}

// TestDeadReplicaSlotsReturn: a replica holding every slot stops renewing
// (its process died); the other replica's waiters get the slots once the
// lease lapses.
func TestDeadReplicaSlotsReturn(t *testing.T) {
	srv := redistest.Start(t)
	o := redislimit.Options{Prefix: "dead", Lease: 300 * time.Millisecond}
	deadClient := redis.NewClient(&redis.Options{Addr: srv.Addr})
	dead, err := redislimit.New(context.Background(), deadClient, o)
	if err != nil {
		t.Fatal(err)
	}
	live := replica(t, srv.Client(t), o)
	cfg := limiter.GateConfig{MaxConcurrent: 3}
	dg, lg := dead.Gate("conn", cfg), live.Gate("conn", cfg)
	for i := 0; i < 3; i++ {
		if _, err := dg.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if held, waiting, err := lg.(*redislimit.SharedGate).Counts(context.Background()); err != nil || held != 3 || waiting != 0 {
		t.Fatalf("Counts = %d held, %d waiting, %v; want 3, 0", held, waiting, err)
	}
	// Waiters queue behind the dead replica's holders...
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	slots := make(chan limiter.Slot, 3)
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := lg.Acquire(ctx)
			if err != nil {
				errs <- err
				return
			}
			slots <- s
		}()
	}
	// ...and the replica dies: no more renewals, no releases.
	dead.Close()
	deadClient.Close()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("waiter on live replica: %v", err)
	}
	close(slots)
	for s := range slots {
		s.Release()
	}
	if st := lg.Stats(); st.Acquired != 3 || st.InUse != 0 {
		t.Fatalf("live stats %+v", st)
	}
}

// TestRedisDownIsAnError: an unreachable Redis fails Acquire and Admit with
// an error that is neither a queue nor a rate rejection.
func TestRedisDownIsAnError(t *testing.T) {
	srv := redistest.Start(t)
	l := replica(t, srv.Client(t), redislimit.Options{})
	g := l.Gate("down", limiter.GateConfig{MaxConcurrent: 1})
	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := g.Acquire(ctx); err == nil || errors.Is(err, limiter.ErrQueueFull) {
		t.Fatalf("Acquire with Redis down: %v", err)
	}
	if _, err := l.Admit(ctx, "k", limiter.Limits{RPM: 1}, 0); err == nil || errors.Is(err, limiter.ErrRateLimited) {
		t.Fatalf("Admit with Redis down: %v", err)
	}
}

// TestLiveHolderKeepsSlot: a holder that renews keeps its slot across many
// lease periods; a waiter on another replica times out instead of taking it.
func TestLiveHolderKeepsSlot(t *testing.T) {
	srv := redistest.Start(t)
	o := redislimit.Options{Prefix: "renew", Lease: 200 * time.Millisecond}
	a, b := replica(t, srv.Client(t), o), replica(t, srv.Client(t), o)
	s, err := a.Gate("conn", limiter.GateConfig{MaxConcurrent: 1}).Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	gb := b.Gate("conn", limiter.GateConfig{MaxConcurrent: 1, Timeout: 5 * o.Lease})
	if _, err := gb.Acquire(context.Background()); !errors.Is(err, limiter.ErrQueueTimeout) {
		t.Fatalf("waiter while the holder renews: %v, want ErrQueueTimeout", err)
	}
	if st := a.Gate("conn", limiter.GateConfig{MaxConcurrent: 1}).Stats(); st.Lost != 0 || st.InUse != 1 {
		t.Fatalf("holder stats %+v", st)
	}
	s.Release()
	s2, err := gb.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s2.Release()
}
