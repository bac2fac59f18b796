package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
	redisstore "github.com/chronicle-proxy/chronicle/store/redis"
	"github.com/chronicle-proxy/chronicle/store/redistest"
	"github.com/chronicle-proxy/chronicle/store/storetest"
)

func openSingle(t testing.TB, now func() time.Time) *redisstore.Store {
	t.Helper()
	srv := redistest.Start(t)
	s, err := redisstore.Open(context.Background(), redisstore.Options{URL: srv.URL(), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformanceSingle(t *testing.T) {
	storetest.RunTests(t, func(t testing.TB, now func() time.Time) store.Store {
		return openSingle(t, now)
	})
}

func TestConformanceCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	n := 0
	storetest.RunTests(t, func(t testing.TB, now func() time.Time) store.Store {
		n++
		// One cluster for every subtest; a key prefix each keeps them apart.
		s, err := redisstore.Open(context.Background(), redisstore.Options{
			URL: "redis+cluster://" + strings.Join(cluster.Addrs(), ","), Now: now, KeyPrefix: fmt.Sprintf("c%d:", n)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func BenchmarkStore(b *testing.B) {
	storetest.RunBenchmarks(b, func(t testing.TB, now func() time.Time) store.Store {
		return openSingle(t, now)
	})
}
