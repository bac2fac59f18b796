package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/redistest"
)

// TestStartSentTwice: go-redis sends a command again when a timeout or a
// broken connection lost its reply, though the script may have run. A
// start sent twice with the same arguments (the same attempt) must answer
// the second time as the first would have: the run created, with its
// lease, not "exists" (which made the proxy follow its own run as a
// retry's, until the sweeper failed it proxy_lost). A new attempt with the
// same run id (a client's X-Run-Id retry) still finds the run existing.
func TestStartSentTwice(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"single", func(t *testing.T) string { return redistest.Start(t).URL() }},
		{"cluster", func(t *testing.T) string {
			return "redis+cluster://" + strings.Join(redistest.StartCluster(t, 3).Addrs(), ",")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.name == "cluster" {
				t.Skip("-short: no cluster")
			}
			s, err := Open(ctx, Options{URL: tc.url(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			k := store.Key{Tenant: "t", Thread: "twice"}
			sr := store.StartRun{Key: k, RunID: "run-1", Owner: "replica-a", TTL: time.Minute,
				Fingerprint: "fp", Model: "m", LoadThread: true}
			now := s.now()
			exp := now + sr.TTL.Milliseconds()
			start := func(attempt string) *store.Started {
				t.Helper()
				claim, cmd, err := s.sendStart(ctx, &sr, now, exp, attempt)
				if err != nil {
					t.Fatal(err)
				}
				res, err := s.started(ctx, &sr, claim, cmd, now, exp)
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			first := start("attempt-1")
			again := start("attempt-1")
			if !first.Created || !again.Created {
				t.Fatalf("created: first %v, sent again %v; want both true", first.Created, again.Created)
			}
			if again.Lease.Token != first.Lease.Token || again.Lease.RunID != "run-1" {
				t.Fatalf("the start sent again holds lease %+v, want the first's %+v", again.Lease, first.Lease)
			}
			// The lease it answered with is the live one: a finish under it lands.
			other := start("attempt-2")
			if other.Created {
				t.Fatal("a new attempt with the same run id created the run again")
			}
			if err := s.Finish(ctx, again.Lease, &store.Finish{Status: store.Completed}); err != nil {
				t.Fatalf("finish under the re-sent start's lease: %v", err)
			}
			// Once the run ended, the same attempt no longer owns a lease.
			if late := start("attempt-1"); late.Created {
				t.Fatal("a start re-sent after its run ended created it again")
			}
		})
	}
}
