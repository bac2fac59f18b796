package embedded_test

import (
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
