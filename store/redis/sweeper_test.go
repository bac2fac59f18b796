package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/redistest"
)

// TestSweeperEntries checks the sweeper index and the run id claims that
// StartRun and Finish keep beside the thread: on a single node one script
// writes them, on a cluster separate commands do. The public API only
// shows them indirectly (a stray entry is dropped by the next sweep), so
// this reads the keys themselves.
func TestSweeperEntries(t *testing.T) {
	ctx := context.Background()
	topologies := []struct {
		name string
		open func(t *testing.T) *Store
	}{
		{"single", func(t *testing.T) *Store {
			s, err := Open(ctx, Options{URL: redistest.Start(t).URL()})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"cluster", func(t *testing.T) *Store {
			c := redistest.StartCluster(t, 3)
			s, err := Open(ctx, Options{URL: "redis+cluster://" + strings.Join(c.Addrs(), ",")})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	}
	for _, tc := range topologies {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.name == "cluster" {
				t.Skip("-short: no cluster")
			}
			s := tc.open(t)
			defer s.Close()
			k := store.Key{Tenant: "t", Thread: "sw"}
			score := func(run string) (float64, bool) {
				t.Helper()
				v, err := s.c.ZScore(ctx, s.active(), activeMember(k, run)).Result()
				if errors.Is(err, redis.Nil) {
					return 0, false
				}
				if err != nil {
					t.Fatal(err)
				}
				return v, true
			}
			claim := func(run string) string {
				t.Helper()
				v, err := s.c.HGet(ctx, s.tenantRuns(k.Tenant), run).Result()
				if errors.Is(err, redis.Nil) {
					return ""
				}
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			start := func(run string, ttl time.Duration) (*store.Started, error) {
				return s.StartRun(ctx, store.StartRun{Key: k, RunID: run, Owner: "o", TTL: ttl, Fingerprint: "fp"})
			}

			first, err := start("r1", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if sc, ok := score("r1"); !ok || int64(sc) != first.Lease.Expires.UnixMilli() {
				t.Fatalf("started run's sweeper entry: %v %v, want the lease expiry %d", sc, ok, first.Lease.Expires.UnixMilli())
			}
			if c := claim("r1"); c != k.Thread {
				t.Fatalf("claim of r1 = %q", c)
			}

			// Refused as held: no claim, no sweeper entry left behind.
			if _, err := start("r2", time.Minute); !errors.Is(err, store.ErrLeaseHeld) {
				t.Fatalf("start on a held lease: %v", err)
			}
			if _, ok := score("r2"); ok || claim("r2") != "" {
				t.Fatalf("refused start left sweeper entry %v, claim %q", ok, claim("r2"))
			}

			// A run id of another thread: refused, the other thread's claim
			// kept, nothing written for this one.
			other := store.Key{Tenant: "t", Thread: "other"}
			if _, err := s.StartRun(ctx, store.StartRun{Key: other, RunID: "r1", Owner: "o", TTL: time.Minute}); !errors.Is(err, store.ErrConflict) {
				t.Fatalf("run id of another thread: %v", err)
			}
			if c := claim("r1"); c != k.Thread {
				t.Fatalf("claim of r1 after the refusal = %q", c)
			}
			if n, err := s.c.Exists(ctx, s.prefix(other)+"run:r1").Result(); err != nil || n != 0 {
				t.Fatalf("refused start left a run on the other thread: %d %v", n, err)
			}
			if l, err := s.c.HGet(ctx, s.meta(other), "l_run").Result(); !errors.Is(err, redis.Nil) {
				t.Fatalf("refused start left a lease on the other thread: %q %v", l, err)
			}

			// Finished: the entry goes and the thread is listed.
			msgs, hashes := [][]byte{[]byte(`{"role":"user","content":"hi"}`)}, []store.Hash{{1}}
			tr := store.Diff(nil, msgs, hashes)
			if err := s.Finish(ctx, first.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
				t.Fatal(err)
			}
			if _, ok := score("r1"); ok {
				t.Fatal("finished run still has a sweeper entry")
			}
			if _, err := s.c.ZScore(ctx, s.tenantThreads(k.Tenant), k.Thread).Result(); err != nil {
				t.Fatalf("finished thread not in the tenant's index: %v", err)
			}
			if _, err := s.c.ZScore(ctx, s.allThreads(), k.Tenant+"/"+k.Thread).Result(); err != nil {
				t.Fatalf("finished thread not in the index: %v", err)
			}

			// A start that finds an expired lease fails that run and drops
			// its sweeper entry.
			if _, err := start("r3", time.Millisecond); err != nil {
				t.Fatal(err)
			}
			s.opts.Now = func() time.Time { return time.Now().Add(time.Hour) }
			next, err := start("r4", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := score("r3"); ok {
				t.Fatal("the lost run kept its sweeper entry")
			}

			// A refused finish (a stale token) leaves the run to the
			// sweeper, due now.
			stale := next.Lease
			stale.Token++
			if err := s.Finish(ctx, stale, &store.Finish{Status: store.Completed}); !errors.Is(err, store.ErrFenced) {
				t.Fatalf("finish with a stale token: %v", err)
			}
			if sc, ok := score("r4"); !ok || sc != 0 {
				t.Fatalf("refused finish: sweeper entry %v %v, want due now (0)", sc, ok)
			}
		})
	}
}
