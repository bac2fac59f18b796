package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/store"
	redisstore "github.com/chronicle-proxy/chronicle/store/redis"
	"github.com/chronicle-proxy/chronicle/store/redistest"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		url                 string
		addrs               string
		cluster, tls        bool
		master, user, pass  string
		db                  int
		sentinelPass, wrong string
	}{
		{url: "redis://127.0.0.1:6379/2", addrs: "127.0.0.1:6379", db: 2},
		{url: "redis://u:p%40ss@h", addrs: "h:6379", user: "u", pass: "p@ss"},
		{url: "rediss://h:6380", addrs: "h:6380", tls: true},
		{url: "redis://h1:1,h2:2", addrs: "h1:1,h2:2", cluster: true},
		{url: "redis://h1:1?cluster=true", addrs: "h1:1", cluster: true},
		{url: "rediss+cluster://h1:1,h2:2", addrs: "h1:1,h2:2", cluster: true, tls: true},
		{url: "redis+sentinel://:pw@s1:26379,s2:26379/mymaster/3?sentinel_password=sp", addrs: "s1:26379,s2:26379", master: "mymaster", pass: "pw", db: 3, sentinelPass: "sp"},
		{url: "http://h", wrong: "scheme"},
		{url: "redis+sentinel://s1", wrong: "master"},
		{url: "redis+cluster://h1/3", wrong: "database 0"},
		{url: "redis://h/x", wrong: "db"},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			o, err := redisstore.ParseURL(tc.url)
			if tc.wrong != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wrong) {
					t.Fatalf("err = %v, want one naming %q", err, tc.wrong)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(o.Addrs, ","); got != tc.addrs || o.IsClusterMode != tc.cluster || (o.TLSConfig != nil) != tc.tls ||
				o.MasterName != tc.master || o.Username != tc.user || o.Password != tc.pass || o.DB != tc.db || o.SentinelPassword != tc.sentinelPass {
				t.Fatalf("got %+v", o)
			}
		})
	}
	// A URL that does not parse never repeats its password.
	_, err := redisstore.ParseURL("redis://u:secret@h:notaport/0")
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("err = %v", err)
	}
}

// TestUnavailable: a dead server is store.ErrUnavailable, so the proxy can
// answer 503 store_unavailable.
func TestUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL() + "?dial_timeout=200ms"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv.Kill()
	_, err = s.LoadThread(ctx, store.Key{Tenant: "t", Thread: "a"})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("load on a dead server: %v", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("ping on a dead server: %v", err)
	}
}
