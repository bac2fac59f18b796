package redisstore_test

import (
	"context"
	"sync/atomic"
	"testing"

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
	// Warm the script cache (the first call of a script sends its body).
	warm, err := s.StartRun(ctx, store.StartRun{Key: store.Key{Tenant: "t", Thread: "warm"}, RunID: "w", TTL: 30e9})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, warm.Lease, store.Finish{Status: store.Completed, Transcript: &store.Transcript{}}); err != nil {
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
	if err := s.Finish(ctx, st.Lease, store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
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
	if err := s.Finish(ctx, st.Lease, store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatal(err)
	}
	if overwrite := hook.n.Load(); overwrite < int64(msgBytes) {
		t.Fatalf("overwrite sent %d bytes, want >= %d (the whole thread)", overwrite, msgBytes)
	}
	t.Logf("append one: %d bytes; overwrite 1,000: %d bytes", appendCost, hook.n.Load())
}
