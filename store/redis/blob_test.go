package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chronicle-proxy/chronicle/store"
)

// scriptArgs records the largest argument of any script the store runs.
type scriptArgs struct {
	mu      sync.Mutex
	largest int
}

func (h *scriptArgs) see(cmds []redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		if n := c.Name(); n != "evalsha" && n != "eval" {
			continue
		}
		for _, a := range c.Args() {
			switch v := a.(type) {
			case string:
				h.largest = max(h.largest, len(v))
			case []byte:
				h.largest = max(h.largest, len(v))
			}
		}
	}
}

func (h *scriptArgs) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptArgs) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.see([]redis.Cmder{cmd}); return next(ctx, cmd) }
}
func (h *scriptArgs) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.see(cmds); return next(ctx, cmds) }
}

// TestLargeMessagesStayOutOfScripts: a message of blobMin bytes or more
// never reaches a script as an argument (Redis would copy it into Lua
// while every other client waits); it is staged with a plain SET and kept
// as a blob key, and no stage or blob key outlives its message: not after
// a refused write, a retried one, a rewrite or a delete.
func TestLargeMessagesStayOutOfScripts(t *testing.T) {
	ctx := context.Background()
	s, cl := openOwn(t)
	args := &scriptArgs{}
	cl.AddHook(args)
	k := store.Key{Tenant: "t", Thread: "blobs"}
	count := func(kind string) int {
		t.Helper()
		keys, err := cl.Keys(ctx, s.prefix(k)+kind+":*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(keys)
	}
	want := func(what string, blobs int) {
		t.Helper()
		if n := count("stage"); n != 0 {
			t.Fatalf("%s: %d stage keys left", what, n)
		}
		if n := count("blob"); n != blobs {
			t.Fatalf("%s: %d blob keys, want %d", what, n, blobs)
		}
	}
	msg := func(c byte, n int) []byte {
		return []byte(`{"role":"user","content":"` + strings.Repeat(string(c), n) + `"}`)
	}
	small, big, big2 := msg('s', 10), msg('b', blobMin), msg('c', 3*blobMin)
	start := func(run string) store.Lease {
		t.Helper()
		st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: run, Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return st.Lease
	}

	l := start("r1")
	tr := store.Transcript{Messages: [][]byte{small, big}, Hashes: []store.Hash{{1}, {2}}}
	if err := s.Finish(ctx, l, store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatal(err)
	}
	want("first turn", 1)
	if err := s.Finish(ctx, l, store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatalf("retried finish: %v", err)
	}
	want("retried finish", 1)

	l = start("r2")
	stale := l
	stale.Token++
	more := store.Transcript{Keep: 2, KeepHash: store.Hash{2}, Messages: [][]byte{big2}, Hashes: []store.Hash{{3}}}
	if err := s.SaveTranscript(ctx, stale, more); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("stale save: %v", err)
	}
	want("refused save", 1)
	if err := s.SaveTranscript(ctx, l, more); err != nil {
		t.Fatal(err)
	}
	want("pending-turn save", 2)
	// The turn ends replacing both large messages with small ones.
	tr = store.Transcript{Keep: 1, KeepHash: store.Hash{1}, Messages: [][]byte{small}, Hashes: []store.Hash{{4}}}
	if err := s.Finish(ctx, l, store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatal(err)
	}
	want("rewritten", 0)

	l = start("r3")
	// The server forgets its scripts: the finish is re-sent as EVAL and
	// still finds its stages.
	if err := cl.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	tr = store.Transcript{Keep: 2, KeepHash: store.Hash{4}, Messages: [][]byte{big, big2}, Hashes: []store.Hash{{5}, {6}}}
	if err := s.Finish(ctx, l, store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatal(err)
	}
	want("two more, after SCRIPT FLUSH", 2)
	// A run with a large answer and upstream body: both kept apart too.
	l = start("r4")
	resp, up := []byte(strings.Repeat("r", blobMin)), []byte(strings.Repeat("u", 2*blobMin))
	if err := s.Finish(ctx, l, store.Finish{Status: store.Completed, Response: resp, UpstreamBody: up}); err != nil {
		t.Fatal(err)
	}
	want("large bodies", 2)
	if r, err := s.GetRun(ctx, k, "r4"); err != nil || string(r.Response) != string(resp) || string(r.UpstreamBody) != string(up) {
		t.Fatalf("GetRun: response %d bytes, upstream %d bytes, %v", len(r.Response), len(r.UpstreamBody), err)
	}
	th, err := s.LoadThread(ctx, k)
	if err != nil || len(th.Messages) != 4 || string(th.Messages[2]) != string(big) || string(th.Messages[3]) != string(big2) {
		t.Fatalf("load: %d messages, %v", len(th.Messages), err)
	}
	if err := s.DeleteThread(ctx, k); err != nil {
		t.Fatal(err)
	}
	if keys, _ := cl.Keys(ctx, s.prefix(k)+"*").Result(); len(keys) != 0 {
		t.Fatalf("keys left after delete: %q", keys)
	}
	if args.largest >= blobMin {
		t.Fatalf("a script got a %d-byte argument (blobMin %d)", args.largest, blobMin)
	}
}
