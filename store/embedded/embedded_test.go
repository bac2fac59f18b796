package embedded_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/embedded"
	"github.com/chronicle-proxy/chronicle/store/storetest"
)

func open(t testing.TB, dir string, now func() time.Time) *embedded.Store {
	t.Helper()
	s, err := embedded.Open(dir, embedded.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.RunTests(t, func(t testing.TB, now func() time.Time) store.Store {
		return open(t, t.TempDir(), now)
	})
}

func BenchmarkStore(b *testing.B) {
	storetest.RunBenchmarks(b, func(t testing.TB, now func() time.Time) store.Store {
		return open(t, t.TempDir(), now)
	})
}

// TestUseAfterClose: every call on a closed store answers ErrUnavailable
// (pebble itself panics on a closed database).
func TestUseAfterClose(t *testing.T) {
	s := open(t, t.TempDir(), nil)
	ctx := context.Background()
	k := store.Key{Tenant: "t", Thread: "x"}
	if _, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: "r1", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"LoadThread":  func() error { _, err := s.LoadThread(ctx, k); return err },
		"ListThreads": func() error { _, err := s.ListThreads(ctx, store.ThreadQuery{}); return err },
		"GetRun":      func() error { _, err := s.GetRun(ctx, k, "r1"); return err },
		"StartRun": func() error {
			_, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: "r2", TTL: time.Minute})
			return err
		},
		"Ping":  func() error { return s.Ping(ctx) },
		"Close": func() error { return errors.Join(s.Close(), store.ErrUnavailable) },
	} {
		if err := call(); !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s after Close: %v, want ErrUnavailable", name, err)
		}
	}
}

// TestOpenInUse: a second Open of a directory in use says so.
func TestOpenInUse(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, nil)
	defer s.Close()
	if _, err := embedded.Open(dir, embedded.Options{}); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("second open: %v", err)
	}
}
