package redisstore_test

import (
	"context"
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
	storetest.RunTests(t, func(t *testing.T, now func() time.Time) store.Store {
		return openSingle(t, now)
	})
}
