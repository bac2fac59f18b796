package redisstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/chronicle-proxy/chronicle/store"
	redisstore "github.com/chronicle-proxy/chronicle/store/redis"
	"github.com/chronicle-proxy/chronicle/store/redistest"
	"github.com/chronicle-proxy/chronicle/store/storetest"
)

// argBytes counts the bytes of every command argument sent.
type argBytes struct{ n atomic.Int64 }

func (h *argBytes) count(cmd redis.Cmder) {
	for _, a := range cmd.Args() {
		switch v := a.(type) {
		case string:
			h.n.Add(int64(len(v)))
		case *string:
			h.n.Add(int64(len(*v)))
		case []byte:
			h.n.Add(int64(len(v)))
		default:
			h.n.Add(8)
		}
	}
}

func (h *argBytes) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *argBytes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.count(cmd); return next(ctx, cmd) }
}
func (h *argBytes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

// TestSaveCost proves that appending one message to a 1,000-message thread
// sends O(1) bytes, while an overwrite sends the whole thread.
func TestSaveCost(t *testing.T) {
	srv := redistest.Start(t)
	cl := srv.Client(t)
	hook := &argBytes{}
	cl.AddHook(hook)
	ctx := context.Background()
	s, err := redisstore.Open(ctx, redisstore.Options{Client: cl})
	if err != nil {
		t.Fatal(err)
	}
	// Warm up: the first Finish probes WAITAOF.
	warm, err := s.StartRun(ctx, store.StartRun{Key: store.Key{Tenant: "t", Thread: "warm"}, RunID: "w", TTL: 30e9})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, warm.Lease, &store.Finish{Status: store.Completed, Transcript: &store.Transcript{}}); err != nil {
		t.Fatal(err)
	}
	k := store.Key{Tenant: "t", Thread: "long"}
	msgs, hashes := storetest.Msgs(0, 1000)
	msgBytes := 0
	for _, m := range msgs {
		msgBytes += len(m)
	}
	st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: "r1", TTL: 30e9})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SaveTranscript(ctx, st.Lease, store.Diff(nil, msgs, hashes)); err != nil {
		t.Fatal(err)
	}
	th, err := s.LoadThread(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	reply, rh := storetest.Msg(1000, "assistant")
	next, nextH := append(msgs, reply), append(hashes, rh)

	hook.n.Store(0)
	tr := store.Diff(th.Hashes, next, nextH)
	if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatal(err)
	}
	appendCost := hook.n.Load()
	// One message plus a fixed overhead (script sha, ids, flags, index).
	if limit := int64(len(reply)) + 2048; appendCost > limit {
		t.Fatalf("appending one message to 1,000 sent %d bytes, want <= %d", appendCost, limit)
	}

	st, err = s.StartRun(ctx, store.StartRun{Key: k, RunID: "r2", TTL: 30e9})
	if err != nil {
		t.Fatal(err)
	}
	hook.n.Store(0)
	other, otherH := storetest.Msgs(5000, 1000)
	tr = store.Diff(nextH, other, otherH)
	if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatal(err)
	}
	if overwrite := hook.n.Load(); overwrite < int64(msgBytes) {
		t.Fatalf("overwrite sent %d bytes, want >= %d (the whole thread)", overwrite, msgBytes)
	}
	t.Logf("append one: %d bytes; overwrite 1,000: %d bytes", appendCost, hook.n.Load())
}

// trips counts client round trips: one per command sent alone and one per
// pipeline (a cluster pipeline's per-node parts go out in parallel). A new
// pooled connection's handshake (HELLO, CLIENT SETINFO) is not a request's.
type trips struct{ n atomic.Int64 }

func handshake(cmd redis.Cmder) bool { return cmd.Name() == "hello" || cmd.Name() == "client" }

func (h *trips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && !handshake(cmds[0]) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// TestRoundTrips proves the per-turn cost: StartRun with the thread, the
// pending-turn save, an event batch and Finish with the transcript and the
// audit indexes take one round trip each, on one node and on a cluster;
// after SCRIPT FLUSH (a restarted server) each takes one more, once.
func TestRoundTrips(t *testing.T) {
	single := func(t *testing.T) (redis.UniversalClient, func(context.Context) error) {
		cl := redistest.Start(t).Client(t)
		return cl, func(ctx context.Context) error { return cl.ScriptFlush(ctx).Err() }
	}
	cluster := func(t *testing.T) (redis.UniversalClient, func(context.Context) error) {
		cl := redistest.StartCluster(t, 3).ClusterClient(t)
		return cl, func(ctx context.Context) error {
			return cl.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() })
		}
	}
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (redis.UniversalClient, func(context.Context) error)
	}{{"Single", single}, {"Cluster", cluster}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cl, flush := tc.open(t)
			hook := &trips{}
			cl.AddHook(hook)
			s, err := redisstore.Open(ctx, redisstore.Options{Client: cl})
			if err != nil {
				t.Fatal(err)
			}
			k := store.Key{Tenant: "t", Thread: "trips"}
			msgs, hashes := storetest.Msgs(0, 10)
			var stored []store.Hash
			turn := func(run string, n int) map[string]int64 {
				t.Helper()
				got := map[string]int64{}
				step := func(name string, fn func() error) {
					t.Helper()
					hook.n.Store(0)
					if err := fn(); err != nil {
						t.Fatalf("%s %s: %v", run, name, err)
					}
					got[name] = hook.n.Load()
				}
				var st *store.Started
				step("StartRun", func() (err error) {
					st, err = s.StartRun(ctx, store.StartRun{Key: k, RunID: run, TTL: 30e9, LoadThread: true})
					if err == nil && (!st.Created || len(st.Thread.Hashes) != len(stored)) {
						err = fmt.Errorf("started %+v with %d messages, want %d", st.Created, len(st.Thread.Hashes), len(stored))
					}
					return err
				})
				step("SaveTranscript", func() error {
					return s.SaveTranscript(ctx, st.Lease, store.Diff(st.Thread.Hashes, msgs[:n-1], hashes[:n-1]))
				})
				step("AppendEvents", func() error { return s.AppendEvents(ctx, st.Lease, 1, msgs[:3]) })
				step("Finish", func() error {
					tr := store.Diff(hashes[:n-1], msgs[:n], hashes[:n])
					// The audited upstream body rides in the same script.
					return s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr, Usage: &store.Usage{InputTokens: 1},
						UpstreamBody: []byte(`{"messages":[]}`)})
				})
				stored = hashes[:n]
				return got
			}
			one := map[string]int64{"StartRun": 1, "SaveTranscript": 1, "AppendEvents": 1, "Finish": 1}
			// The first Finish probes WAITAOF once (on a cluster through
			// the thread's master, whose node client this hook misses).
			first := turn("r1", 2)
			probe := int64(2)
			if tc.name == "Cluster" {
				probe = 1
			}
			if first["Finish"] != probe {
				t.Errorf("first finish: %d round trips, want %d (with the WAITAOF probe)", first["Finish"], probe)
			}
			first["Finish"] = 1
			if diff := cmp.Diff(one, first); diff != "" {
				t.Fatalf("first turn round trips (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(one, turn("r2", 4)); diff != "" {
				t.Fatalf("round trips (-want +got):\n%s", diff)
			}
			if err := flush(ctx); err != nil {
				t.Fatal(err)
			}
			two := map[string]int64{"StartRun": 2, "SaveTranscript": 2, "AppendEvents": 2, "Finish": 2}
			if diff := cmp.Diff(two, turn("r3", 6)); diff != "" {
				t.Fatalf("round trips after SCRIPT FLUSH (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(one, turn("r4", 8)); diff != "" {
				t.Fatalf("round trips once the scripts are cached again (-want +got):\n%s", diff)
			}
			th, err := s.LoadThread(ctx, k)
			if err != nil || len(th.Messages) != 8 {
				t.Fatalf("thread after four turns: %d messages, %v", len(th.Messages), err)
			}
			page, err := s.ListThreads(ctx, store.ThreadQuery{Tenant: "t"})
			if err != nil || len(page.Threads) != 1 || page.Threads[0].Runs != 4 || page.Threads[0].Usage.InputTokens != 4 {
				t.Fatalf("listing: %+v %v", page, err)
			}
		})
	}
}

// TestMetaIsHashTable proves that a start makes the thread's meta hash a
// hash table (the field 'enc', see the start script's metaEncoding), also
// for a thread an older release left as a listpack, and that the thread
// reads the same after.
func TestMetaIsHashTable(t *testing.T) {
	srv := redistest.Start(t, "--enable-debug-command", "yes")
	cl := srv.Client(t)
	ctx := context.Background()
	s, err := redisstore.Open(ctx, redisstore.Options{Client: cl})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	k := store.Key{Tenant: "t", Thread: "enc"}
	meta := "chr:{t/enc}:meta"
	wantEncoding := func(when, want string) {
		t.Helper()
		e, err := cl.ObjectEncoding(ctx, meta).Result()
		if err != nil {
			t.Fatal(err)
		}
		if e != want {
			t.Fatalf("meta %s: encoding %s, want %s", when, e, want)
		}
	}
	reload := func() {
		t.Helper()
		if err := cl.Do(ctx, "DEBUG", "RELOAD").Err(); err != nil {
			t.Fatal(err)
		}
	}
	msgs, hashes := storetest.Msgs(0, 4)
	turn := func(run string, n int) {
		t.Helper()
		st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: run, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		tr := store.Diff(nil, msgs[:n], hashes[:n])
		if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr,
			Usage: &store.Usage{InputTokens: 1, OutputTokens: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	turn("r1", 3)
	wantEncoding("after the first turn", "hashtable")
	// A thread as an older release leaves it: no 'enc', and a listpack
	// once the server reloads it.
	if err := cl.HDel(ctx, meta, "enc").Err(); err != nil {
		t.Fatal(err)
	}
	reload()
	wantEncoding("without 'enc' after a reload", "listpack")
	before, err := s.LoadThread(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	turn("r2", 4)
	wantEncoding("after a turn on a listpack thread", "hashtable")
	// A restart keeps it a hash table.
	reload()
	wantEncoding("after a reload", "hashtable")
	after, err := s.LoadThread(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if store.Digest(after.Hashes) != store.Digest(hashes) || store.Digest(before.Hashes) != store.Digest(hashes[:3]) ||
		after.Version != before.Version+1 || after.CreatedAt != before.CreatedAt {
		t.Fatalf("thread after the turn: %d messages version %d, before %d messages version %d",
			len(after.Hashes), after.Version, len(before.Hashes), before.Version)
	}
}
