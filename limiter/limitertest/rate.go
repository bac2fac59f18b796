package limitertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/limiter"
)

// Clock is a fake clock the rate suite advances by hand.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock set to a fixed instant.
func NewClock() *Clock { return &Clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

// Now reads the clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// NewRateLimiters returns two rate limiters that stand for two replicas
// sharing state, both reading time from now.
type NewRateLimiters func(t *testing.T, now func() time.Time) (a, b limiter.RateLimiter)

// RunRateLimiterTests runs the rate-limit conformance suite.
func RunRateLimiterTests(t *testing.T, newLimiters NewRateLimiters) {
	t.Run("RPM", func(t *testing.T) { testRPM(t, newLimiters) })
	t.Run("TPMReserveSettle", func(t *testing.T) { testTPM(t, newLimiters) })
	t.Run("TPMConcurrentWithinCap", func(t *testing.T) { testTPMConcurrent(t, newLimiters) })
	t.Run("RefundGivesRequestBack", func(t *testing.T) { testRefund(t, newLimiters) })
	t.Run("KeysIndependent", func(t *testing.T) { testKeys(t, newLimiters) })
	t.Run("Unlimited", func(t *testing.T) { testUnlimited(t, newLimiters) })
}

func testRPM(t *testing.T, newLimiters NewRateLimiters) {
	clk := NewClock()
	a, b := newLimiters(t, clk.Now)
	ctx := context.Background()
	lim := limiter.Limits{RPM: 60}
	var rejected []*limiter.RateLimitError
	for i := 0; i < 120; i++ {
		l := a
		if i%2 == 1 {
			l = b
		}
		r, err := l.Admit(ctx, "conn:rpm", lim, 0)
		if i < 60 {
			if err != nil {
				t.Fatalf("request %d: %v, want pass (first 60 pass)", i, err)
			}
			rq, _ := r.Quota()
			if want := (limiter.Quota{Limit: 60, Remaining: int64(59 - i), Reset: time.Duration(i+1) * time.Second}); rq != want {
				t.Fatalf("request %d quota %+v, want %+v", i, rq, want)
			}
			continue
		}
		var rle *limiter.RateLimitError
		if !errors.As(err, &rle) || !errors.Is(err, limiter.ErrRateLimited) {
			t.Fatalf("request %d: %v, want *RateLimitError", i, err)
		}
		rejected = append(rejected, rle)
	}
	e := rejected[0]
	if e.Kind != "requests" || e.RetryAfter != time.Second || e.Requests.Limit != 60 || e.Requests.Remaining != 0 || e.Requests.Reset != time.Minute {
		t.Fatalf("rejection %+v", e)
	}
	clk.Advance(e.RetryAfter)
	if _, err := b.Admit(ctx, "conn:rpm", lim, 0); err != nil {
		t.Fatalf("after honouring Retry-After: %v", err)
	}
	if _, err := a.Admit(ctx, "conn:rpm", lim, 0); !errors.Is(err, limiter.ErrRateLimited) {
		t.Fatalf("second request after one interval: %v, want ErrRateLimited", err)
	}
}

func testTPM(t *testing.T, newLimiters NewRateLimiters) {
	clk := NewClock()
	a, b := newLimiters(t, clk.Now)
	ctx := context.Background()
	lim := limiter.Limits{TPM: 1000}
	r1, err := a.Admit(ctx, "tenant:t", lim, 400)
	if err != nil {
		t.Fatal(err)
	}
	if _, tq := r1.Quota(); tq.Remaining != 600 || tq.Limit != 1000 {
		t.Fatalf("token quota %+v, want 600 of 1000 remaining", tq)
	}
	if _, err := b.Admit(ctx, "tenant:t", lim, 400); err != nil {
		t.Fatal(err)
	}
	_, err = a.Admit(ctx, "tenant:t", lim, 400)
	var rle *limiter.RateLimitError
	if !errors.As(err, &rle) || rle.Kind != "tokens" {
		t.Fatalf("third reservation: %v, want tokens limit", err)
	}
	if rle.RetryAfter != 12*time.Second || rle.Tokens.Remaining != 200 {
		t.Fatalf("rejection %+v, want retry 12s (200 tokens short at 1000/min), 200 remaining", rle)
	}
	// Settling the first turn with its real usage gives 300 back.
	if err := r1.Settle(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if err := r1.Settle(ctx, 0); err != nil { // second settle: no-op
		t.Fatal(err)
	}
	r3, err := b.Admit(ctx, "tenant:t", lim, 400)
	if err != nil {
		t.Fatalf("after settlement: %v", err)
	}
	if _, tq := r3.Quota(); tq.Remaining != 100 {
		t.Fatalf("remaining %d, want 100 (100+400+400 used)", tq.Remaining)
	}
	// Overshoot is charged as debt.
	if err := r3.Settle(ctx, 600); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Admit(ctx, "tenant:t", lim, 1); !errors.Is(err, limiter.ErrRateLimited) {
		t.Fatalf("after overshoot: %v, want ErrRateLimited", err)
	}
}

// testTPMConcurrent admits many reservations at one instant from two
// replicas, settles some low: what was admitted never exceeds the cap.
func testTPMConcurrent(t *testing.T, newLimiters NewRateLimiters) {
	clk := NewClock()
	a, b := newLimiters(t, clk.Now)
	ctx := context.Background()
	lim := limiter.Limits{TPM: 10000}
	var admitted, used atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 80; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := a
			if i%2 == 1 {
				l = b
			}
			size := int64(100 + 50*(i%7))
			r, err := l.Admit(ctx, "conn:tpm", lim, size)
			if err != nil {
				if !errors.Is(err, limiter.ErrRateLimited) {
					t.Errorf("admit: %v", err)
				}
				return
			}
			admitted.Add(size)
			actual := size / 2
			used.Add(actual)
			if err := r.Settle(ctx, actual); err != nil {
				t.Errorf("settle: %v", err)
			}
		}()
	}
	wg.Wait()
	if got := used.Load(); got > lim.TPM {
		t.Fatalf("%d tokens used at one instant, cap %d", got, lim.TPM)
	}
	// Whatever is left is exactly the cap minus settled usage.
	r, err := a.Admit(ctx, "conn:tpm", lim, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, tq := r.Quota(); tq.Remaining != lim.TPM-used.Load() {
		t.Fatalf("remaining %d, want %d (cap %d - used %d; %d admitted)", tq.Remaining, lim.TPM-used.Load(), lim.TPM, used.Load(), admitted.Load())
	}
}

func testRefund(t *testing.T, newLimiters NewRateLimiters) {
	clk := NewClock()
	a, b := newLimiters(t, clk.Now)
	ctx := context.Background()
	lim := limiter.Limits{RPM: 2, TPM: 100}
	r1, err := a.Admit(ctx, "k", lim, 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admit(ctx, "k", lim, 10); !errors.Is(err, limiter.ErrRateLimited) {
		t.Fatalf("tokens exhausted: %v", err)
	}
	if err := r1.Refund(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r1.Refund(ctx); err != nil {
		t.Fatal(err)
	}
	// The refund gave back the request too: two more fit under RPM 2.
	for i := 0; i < 2; i++ {
		if _, err := b.Admit(ctx, "k", lim, 50); err != nil {
			t.Fatalf("after refund, request %d: %v", i, err)
		}
	}
	if _, err := a.Admit(ctx, "k", lim, 0); !errors.Is(err, limiter.ErrRateLimited) {
		t.Fatalf("third request under RPM 2: %v", err)
	}
}

func testKeys(t *testing.T, newLimiters NewRateLimiters) {
	clk := NewClock()
	a, b := newLimiters(t, clk.Now)
	ctx := context.Background()
	lim := limiter.Limits{RPM: 1}
	for i := 0; i < 5; i++ {
		if _, err := a.Admit(ctx, fmt.Sprintf("tenant:%d", i), lim, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Admit(ctx, "tenant:0", lim, 0); !errors.Is(err, limiter.ErrRateLimited) {
		t.Fatalf("same key: %v", err)
	}
}

func testUnlimited(t *testing.T, newLimiters NewRateLimiters) {
	clk := NewClock()
	a, _ := newLimiters(t, clk.Now)
	for i := 0; i < 200; i++ {
		r, err := a.Admit(context.Background(), "free", limiter.Limits{}, 1e9)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Settle(context.Background(), 1e9); err != nil {
			t.Fatal(err)
		}
	}
}
