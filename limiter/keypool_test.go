package limiter_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/limiter"
	"github.com/chronicle-proxy/chronicle/limiter/limitertest"
)

const keyA, keyB, keyC = "sk-aaaa-secret-one", "sk-bbbb-secret-two", "sk-cccc-secret-three"

func TestKeyPool(t *testing.T) {
	clk := limitertest.NewClock()
	var logs bytes.Buffer
	p := limiter.NewKeyPool([]limiter.Secret{keyA, keyB, keyC, keyA}, limiter.KeyPoolOptions{
		Now: clk.Now, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	acq := func() *limiter.KeyLease {
		t.Helper()
		l, err := p.Acquire()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// Least busy: three acquisitions spread over three keys.
	l1, l2, l3 := acq(), acq(), acq()
	seen := map[string]bool{l1.Secret().Reveal(): true, l2.Secret().Reveal(): true, l3.Secret().Reveal(): true}
	if len(seen) != 3 {
		t.Fatalf("three in-flight requests share keys: %v", seen)
	}
	byKey := map[string]*limiter.KeyLease{}
	for _, l := range []*limiter.KeyLease{l1, l2, l3} {
		byKey[l.Secret().Reveal()] = l
	}
	byKey[keyA].Done(429, 30*time.Second) // cools down 30s
	byKey[keyB].Done(401, 0)              // removed
	byKey[keyC].Done(200, 0)
	byKey[keyC].Done(401, 0) // second Done is a no-op

	for i := 0; i < 5; i++ {
		l := acq()
		if got := l.Secret().Reveal(); got != keyC {
			t.Fatalf("during cooldown got a %s key, want only C", l.Fingerprint())
		}
		l.Done(200, 0)
	}
	hold := acq() // C, busy
	// A still cooling and B gone: C is the only choice even though busy.
	if l := acq(); l.Secret().Reveal() != keyC {
		t.Fatal("want C")
	} else {
		l.Done(0, 0)
	}
	hold.Done(429, 0) // default cooldown 1s
	var rle *limiter.RateLimitError
	if _, err := p.Acquire(); !errors.As(err, &rle) || rle.Kind != "keys" || rle.RetryAfter != time.Second {
		t.Fatalf("all cooling: %v", err)
	}
	clk.Advance(30 * time.Second)
	// Both cooldowns over: A is back.
	got := map[string]bool{}
	a, b := acq(), acq()
	got[a.Secret().Reveal()], got[b.Secret().Reveal()] = true, true
	if !got[keyA] || !got[keyC] || got[keyB] {
		t.Fatalf("after cooldown got %v", got)
	}
	a.Done(401, 0)
	b.Done(401, 0)
	if _, err := p.Acquire(); !errors.Is(err, limiter.ErrNoKeys) {
		t.Fatalf("all removed: %v", err)
	}
	out := logs.String()
	for _, k := range []string{keyA, keyB, keyC} {
		if strings.Contains(out, k) {
			t.Fatalf("log leaks a key: %s", out)
		}
		if !strings.Contains(out, limiter.Secret(k).Fingerprint()) {
			t.Fatalf("log does not name removed key %s: %s", limiter.Secret(k).Fingerprint(), out)
		}
	}
	if st := p.Stats(); len(st) != 3 || !st[1].Removed || len(st[0].Fingerprint) != 8 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSecretNeverPrints(t *testing.T) {
	s := limiter.Secret("sk-live-123456")
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "key", s)
	j, _ := json.Marshal(map[string]any{"k": s})
	outs := []string{
		fmt.Sprint(s), fmt.Sprintf("%v %s %q %#v %x %d %+v", s, s, s, s, s, s, s),
		fmt.Sprintf("%v", struct{ K limiter.Secret }{s}), logs.String(), string(j), s.String(),
	}
	for _, o := range outs {
		if strings.Contains(o, "123456") || !strings.Contains(o, "[redacted]") {
			t.Errorf("leak or missing redaction: %q", o)
		}
	}
	if s.Reveal() != "sk-live-123456" {
		t.Fatal("Reveal")
	}
	if fp := s.Fingerprint(); len(fp) != 8 || strings.Trim(fp, "0123456789abcdef") != "" {
		t.Fatal(fp)
	}
}

func TestRetryPolicy(t *testing.T) {
	p := limiter.RetryPolicy{MaxAttempts: 3, BaseBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second}
	tests := []struct {
		attempt    int
		retryAfter time.Duration
		ok         bool
		max        time.Duration
		exact      bool
	}{
		{1, 0, true, 100 * time.Millisecond, false},
		{2, 0, true, 200 * time.Millisecond, false},
		{3, 0, false, 0, true},
		{1, 2 * time.Second, true, 2 * time.Second, true},
		{1, 6 * time.Second, false, 0, true},
	}
	for _, tc := range tests {
		d, ok := p.Delay(tc.attempt, tc.retryAfter)
		if ok != tc.ok || d > tc.max || d < 0 || (tc.exact && d != tc.max) || (ok && d == 0) {
			t.Errorf("Delay(%d, %v) = %v, %v", tc.attempt, tc.retryAfter, d, ok)
		}
	}
	for status, want := range map[int]bool{429: true, 500: true, 503: true, 400: false, 401: false, 200: false} {
		if limiter.Retryable(status) != want {
			t.Errorf("Retryable(%d)", status)
		}
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"": 0, "3": 3 * time.Second, "0.5": 500 * time.Millisecond, "-1": 0, "soon": 0,
		"Thu, 01 Jan 2026 00:00:10 GMT": 10 * time.Second,
	} {
		if got := limiter.ParseRetryAfter(in, now); got != want {
			t.Errorf("ParseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
	if limiter.EstimateTokens(0) != 0 || limiter.EstimateTokens(1) != 1 || limiter.EstimateTokens(400) != 100 {
		t.Error("EstimateTokens")
	}
}
