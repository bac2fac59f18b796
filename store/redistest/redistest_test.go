package redistest

import (
	"context"
	"testing"
)

func TestStartAndKill(t *testing.T) {
	s := Start(t)
	cl := s.Client(t)
	ctx := context.Background()
	if err := cl.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := cl.Get(ctx, "k").Val(); got != "v" {
		t.Fatalf("get = %q", got)
	}
	s.Kill()
	if err := cl.Ping(ctx).Err(); err == nil {
		t.Fatal("ping after kill succeeded")
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t, 3)
	cl := c.ClusterClient(t)
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c", "{x}1", "{x}2"} {
		if err := cl.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatalf("set %s: %v", k, err)
		}
	}
	if got := cl.Get(ctx, "{x}2").Val(); got != "{x}2" {
		t.Fatalf("get = %q", got)
	}
}
