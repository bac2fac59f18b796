package limiter_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/chronicle-proxy/chronicle/limiter"
)

func TestWatchdogClocks(t *testing.T) {
	tests := []struct {
		name   string
		t      limiter.Timeouts
		events []time.Duration // gaps before each Touch
		want   limiter.Reason
		at     time.Duration // when it fires, measured from start
	}{
		{"first byte", limiter.Timeouts{FirstByte: 5 * time.Second, Idle: time.Minute, Total: time.Hour}, nil, limiter.FirstByteTimeout, 5 * time.Second},
		{"idle after events", limiter.Timeouts{FirstByte: 5 * time.Second, Idle: 3 * time.Second, Total: time.Hour},
			[]time.Duration{4 * time.Second, 2 * time.Second, 2 * time.Second}, limiter.IdleTimeout, 11 * time.Second},
		{"total despite events", limiter.Timeouts{FirstByte: 5 * time.Second, Idle: 3 * time.Second, Total: 10 * time.Second},
			[]time.Duration{0, 2 * time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second}, limiter.TotalTimeout, 10 * time.Second},
		{"idle from start without first-byte clock", limiter.Timeouts{Idle: 3 * time.Second}, nil, limiter.IdleTimeout, 3 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				w := limiter.NewWatchdog(context.Background(), tc.t)
				defer w.Stop()
				firedAt := make(chan time.Duration, 1)
				go func() {
					<-w.Context().Done()
					firedAt <- time.Since(start)
				}()
				for _, gap := range tc.events {
					time.Sleep(gap) // fake time inside the bubble
					if w.Context().Err() != nil {
						break
					}
					w.Touch()
				}
				if got := <-firedAt; got != tc.at {
					t.Errorf("fired after %v, want %v", got, tc.at)
				}
				if w.Fired() != tc.want {
					t.Errorf("Fired() = %q, want %q", w.Fired(), tc.want)
				}
				var te *limiter.TimeoutError
				if cause := context.Cause(w.Context()); !errors.As(cause, &te) || te.Reason != tc.want || !errors.Is(cause, limiter.ErrStreamTimeout) {
					t.Errorf("cause %v", cause)
				}
			})
		})
	}
}

func TestWatchdogStopAndParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := limiter.NewWatchdog(context.Background(), limiter.Timeouts{FirstByte: time.Second, Idle: time.Second, Total: time.Minute})
		w.Touch()
		w.Stop()
		time.Sleep(2 * time.Minute)
		if w.Fired() != "" || context.Cause(w.Context()) != context.Canceled {
			t.Fatalf("stopped watchdog: fired %q cause %v", w.Fired(), context.Cause(w.Context()))
		}

		parent, cancel := context.WithCancel(context.Background())
		w = limiter.NewWatchdog(parent, limiter.Timeouts{Total: time.Minute})
		cancel()
		<-w.Context().Done()
		if w.Fired() != "" {
			t.Fatalf("parent cancel reported as %q", w.Fired())
		}
		w.Stop()

		w = limiter.NewWatchdog(context.Background(), limiter.Timeouts{})
		time.Sleep(time.Hour)
		if w.Context().Err() != nil {
			t.Fatal("watchdog without clocks fired")
		}
		w.Stop()
	})
}

func TestWatchdogTouchAllocs(t *testing.T) {
	w := limiter.NewWatchdog(context.Background(), limiter.Timeouts{Idle: time.Hour})
	defer w.Stop()
	if n := testing.AllocsPerRun(1000, w.Touch); n != 0 {
		t.Fatalf("Touch allocates %v times", n)
	}
}

func BenchmarkWatchdogTouch(b *testing.B) {
	w := limiter.NewWatchdog(context.Background(), limiter.Timeouts{Idle: time.Hour})
	defer w.Stop()
	b.ReportAllocs()
	for b.Loop() {
		w.Touch()
	}
}
