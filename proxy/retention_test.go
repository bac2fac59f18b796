package proxy

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/embedded"
	redisstore "github.com/chronicle-proxy/chronicle/store/redis"
	"github.com/chronicle-proxy/chronicle/store/redistest"
	"github.com/chronicle-proxy/chronicle/store/storetest"
	"github.com/tidwall/gjson"
)

const retentionConfig = `
leases: {ttl: 3s}
admin: {token: "` + adminToken + `"}
retention: {default: 48h, tenants: {keep: forever}, interval: 1h}
connections:
  - {name: a, provider: openai, base_url: "${MOCK}"}
  - {name: b, provider: openai, base_url: "${MOCK}", retention: 2h}
`

// retentionBackends open each store on a clock of the test's: threads
// get the updated_at the test sets, while the proxy's pass runs on real
// time.
var retentionBackends = []struct {
	name string
	open func(t *testing.T, now func() time.Time) store.Store
}{
	{"embedded", func(t *testing.T, now func() time.Time) store.Store {
		st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true, CacheBytes: 1 << 20, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}},
	{"redis", func(t *testing.T, now func() time.Time) store.Store {
		st, err := redisstore.Open(context.Background(), redisstore.Options{URL: redistest.Start(t).URL(), Now: now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}},
}

// seedAt writes a one-turn thread on conn; running leaves its run in
// flight (a lease long enough that no sweep ends it).
func seedAt(t *testing.T, st store.Store, k store.Key, conn string, running bool) {
	t.Helper()
	ctx := context.Background()
	started, err := st.StartRun(ctx, store.StartRun{Key: k, RunID: k.Thread + "-r", Owner: "seed", TTL: 10000 * time.Hour, Model: "gpt-4o"})
	if err != nil {
		t.Fatal(err)
	}
	m := []byte(`{"role":"user","content":"hello"}`)
	tr := store.Transcript{Messages: [][]byte{m}, Hashes: []store.Hash{hashOf(m)}, Connection: conn, Format: "openai-chat", Model: "gpt-4o"}
	if running {
		if err := st.SaveTranscript(ctx, started.Lease, tr); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := st.Finish(ctx, started.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatal(err)
	}
}

// TestRetentionPass: the pass deletes the threads whose retention (the
// shorter of the tenant's and the connection's) ended, leaves the others
// and those with a run in flight, counts them in the metrics, and a dry
// run lists the same threads without deleting them.
func TestRetentionPass(t *testing.T) {
	for _, b := range retentionBackends {
		t.Run(b.name, func(t *testing.T) {
			clock := storetest.NewClock()
			clock.Advance(time.Since(clock.Now()) - 100*time.Hour) // 100 hours ago
			st := b.open(t, clock.Now)
			old := []store.Key{{Tenant: "app", Thread: "old"}, {Tenant: "keep", Thread: "old-b"}}
			kept := []store.Key{{Tenant: "keep", Thread: "old-a"}, {Tenant: "app", Thread: "recent"}, {Tenant: "app", Thread: "busy"}}
			seedAt(t, st, old[0], "a", false)  // 48h default: expired
			seedAt(t, st, old[1], "b", false)  // keep is forever, but b keeps 2h: expired
			seedAt(t, st, kept[0], "a", false) // keep, on a: forever
			seedAt(t, st, kept[2], "a", true)  // expired, but a run is in flight
			clock.Advance(99 * time.Hour)      // an hour ago
			seedAt(t, st, kept[1], "a", false) // within 48h
			m := startMock(t)
			p := startProxyWith(t, m, retentionConfig, st)

			resp, out := do(t, "POST", p.URL+"/admin/prune?dry_run=true", "", adminAuth...)
			var names []string
			for _, th := range gjson.GetBytes(out, "threads").Array() {
				names = append(names, th.Get("tenant").String()+"/"+th.Get("thread").String())
			}
			slices.Sort(names)
			if resp.StatusCode != 200 || !slices.Equal(names, []string{"app/old", "keep/old-b"}) || gjson.GetBytes(out, "busy").Raw != `["app/busy"]` {
				t.Fatalf("dry run: %d %s", resp.StatusCode, out)
			}
			for _, k := range append(old, kept...) {
				if _, err := st.LoadThread(context.Background(), k); err != nil {
					t.Fatalf("dry run deleted %s: %v", k, err)
				}
			}

			// The admin document says how long each thread is kept.
			_, doc := do(t, "GET", p.URL+"/admin/threads/app/recent", "", adminAuth...)
			updated, _ := time.Parse(time.RFC3339Nano, gjson.GetBytes(doc, "updated_at").String())
			until, _ := time.Parse(time.RFC3339Nano, gjson.GetBytes(doc, "kept_until").String())
			if gjson.GetBytes(doc, "retention").String() != "48h0m0s" || !until.Equal(updated.Add(48*time.Hour)) {
				t.Fatalf("retention of app/recent: %s %s", gjson.GetBytes(doc, "retention"), gjson.GetBytes(doc, "kept_until"))
			}
			_, doc = do(t, "GET", p.URL+"/admin/threads/keep/old-a", "", adminAuth...)
			if gjson.GetBytes(doc, "retention").String() != "forever" || gjson.GetBytes(doc, "kept_until").Raw != "null" {
				t.Fatalf("retention of keep/old-a: %s %s", gjson.GetBytes(doc, "retention"), gjson.GetBytes(doc, "kept_until").Raw)
			}

			ran, got, err := p.RetentionPass(context.Background())
			if err != nil || !ran || len(got.Threads) != 2 || got.Runs != 2 || len(got.Busy) != 1 || got.Tombstone == "" {
				t.Fatalf("pass: ran %v, %+v, %v", ran, got, err)
			}
			for _, k := range old {
				if _, err := st.LoadThread(context.Background(), k); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("%s not pruned: %v", k, err)
				}
			}
			for _, k := range kept {
				if _, err := st.LoadThread(context.Background(), k); err != nil {
					t.Fatalf("%s pruned: %v", k, err)
				}
			}
			_, metrics := do(t, "GET", p.URL+"/metrics", "")
			for _, want := range []string{"chronicle_retention_threads_deleted_total 2", "chronicle_retention_runs_deleted_total 2", `chronicle_retention_passes_total{result="ok"} 1`} {
				if !strings.Contains(string(metrics), want) {
					t.Errorf("metrics lack %q", want)
				}
			}
			if strings.Contains(string(metrics), "chronicle_retention_last_pass_timestamp_seconds 0\n") {
				t.Error("the last pass's time is not set")
			}
			// Nothing is left to prune.
			if _, again, err := p.RetentionPass(context.Background()); err != nil || len(again.Threads) != 0 {
				t.Fatalf("second pass: %+v %v", again, err)
			}
		})
	}
}

// TestRetentionLeaseOneReplica: two proxies on one Redis: the pass runs
// on the one that holds the lease, and the other skips it.
func TestRetentionLeaseOneReplica(t *testing.T) {
	srv := redistest.Start(t)
	m := startMock(t)
	open := func() store.Store { return openRedis(t, srv.URL()) }
	p1 := startProxyOpts(t, m, retentionConfig, Options{Store: open(), ReplicaID: "replica-1"})
	p2 := startProxyOpts(t, m, retentionConfig, Options{Store: open(), ReplicaID: "replica-2"})
	ctx := context.Background()
	for i, c := range []struct {
		p    *testProxy
		want bool
	}{{p1, true}, {p2, false}, {p1, true}, {p2, false}} {
		ran, _, err := c.p.RetentionPass(ctx)
		if err != nil || ran != c.want {
			t.Fatalf("pass %d: ran %v, %v; want %v", i, ran, err, c.want)
		}
	}
	_, metrics := do(t, "GET", p2.URL+"/metrics", "")
	if !strings.Contains(string(metrics), `chronicle_retention_passes_total{result="skipped"} 2`) {
		t.Errorf("replica 2's skips are not counted:\n%s", metrics)
	}
}

// TestRetentionFirstPassAfterStart: a replica tries the pass soon after it
// starts (Options.RetentionFirstPass), not an interval later (1h here), so
// replicas restarted more often than the interval still prune.
func TestRetentionFirstPassAfterStart(t *testing.T) {
	clock := storetest.NewClock()
	clock.Advance(time.Since(clock.Now()) - 100*time.Hour)
	st := retentionBackends[0].open(t, clock.Now)
	k := store.Key{Tenant: "app", Thread: "old"}
	seedAt(t, st, k, "a", false) // 48h default: expired
	m := startMock(t)
	p := startProxyOpts(t, m, retentionConfig, Options{Store: st, RetentionFirstPass: time.Millisecond})
	waitFor(t, "the first retention pass", func() bool {
		_, metrics := do(t, "GET", p.URL+"/metrics", "")
		return strings.Contains(string(metrics), `chronicle_retention_passes_total{result="ok"} 1`)
	})
	if _, err := st.LoadThread(context.Background(), k); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("%s not pruned by the first pass: %v", k, err)
	}
}
