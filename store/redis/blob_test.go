package redisstore

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/chronicle-proxy/chronicle/store"
)

// scriptArgs records the largest argument of any script the store runs,
// and counts the system blobs it stages.
type scriptArgs struct {
	mu           sync.Mutex
	largest      int
	systemStages int
}

func (h *scriptArgs) see(cmds []redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		if a := c.Args(); c.Name() == "set" && len(a) > 1 {
			if key, _ := a[1].(string); strings.Contains(key, "stage:") && strings.HasSuffix(key, ":sys") {
				h.systemStages++
			}
		}
		if n := c.Name(); n != "evalsha" && n != "eval" {
			continue
		}
		for _, a := range c.Args() {
			switch v := a.(type) {
			case string:
				h.largest = max(h.largest, len(v))
			case *string:
				h.largest = max(h.largest, len(*v))
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
	start := func(run string) store.Lease { t.Helper(); return startRun(t, s, k, run) }

	l := start("r1")
	tr := store.Transcript{Messages: [][]byte{small, big}, Hashes: []store.Hash{{1}, {2}}}
	if err := s.Finish(ctx, l, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatal(err)
	}
	want("first turn", 1)
	if err := s.Finish(ctx, l, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
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
	if err := s.Finish(ctx, l, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
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
	if err := s.Finish(ctx, l, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatal(err)
	}
	want("two more, after SCRIPT FLUSH", 2)
	// A run with a large answer and upstream body: both kept apart too.
	l = start("r4")
	resp, up := []byte(strings.Repeat("r", blobMin)), []byte(strings.Repeat("u", 2*blobMin))
	if err := s.Finish(ctx, l, &store.Finish{Status: store.Completed, Response: resp, UpstreamBody: up}); err != nil {
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

// TestLargeSystemStaysOutOfScripts: a system blob of blobMin bytes or more
// is never a script argument and is sent only when it changes: a write
// names it by its sum, and stages it only when the script answers that the
// stored one differs. A thread of the old layout (the blob in the meta
// hash) reads the same and moves on its next write.
func TestLargeSystemStaysOutOfScripts(t *testing.T) {
	ctx := context.Background()
	s, cl := openOwn(t)
	args := &scriptArgs{}
	cl.AddHook(args)
	k := store.Key{Tenant: "t", Thread: "system"}
	p := s.prefix(k)
	sysA := []byte(`{"parts":[{"text":"` + strings.Repeat("a", 2*blobMin) + `"}]}`)
	sysB := []byte(`{"parts":[{"text":"` + strings.Repeat("b", blobMin) + `"}]}`)
	var hashes []store.Hash
	// turn saves a pending message and finishes with a reply, both with
	// sys, and returns how many system blobs it staged.
	turn := func(run string, sys []byte) int {
		t.Helper()
		l := startRun(t, s, k, run)
		before := args.systemStages
		for _, write := range []func(tr store.Transcript) error{
			func(tr store.Transcript) error { return s.SaveTranscript(ctx, l, tr) },
			func(tr store.Transcript) error {
				return s.Finish(ctx, l, &store.Finish{Status: store.Completed, Transcript: &tr})
			},
		} {
			h := store.Hash{byte(len(hashes) + 1)}
			tr := store.Transcript{Keep: len(hashes), Messages: [][]byte{[]byte(`{"role":"user","content":"m"}`)}, Hashes: []store.Hash{h}, System: sys}
			if len(hashes) > 0 {
				tr.KeepHash = hashes[len(hashes)-1]
			}
			if err := write(tr); err != nil {
				t.Fatalf("%s: %v", run, err)
			}
			hashes = append(hashes, h)
		}
		th, err := s.LoadThread(ctx, k)
		if err != nil || !bytes.Equal(th.System, sys) {
			t.Fatalf("%s: load: system of %d bytes, want %d (%v)", run, len(th.System), len(sys), err)
		}
		if keys, _ := cl.Keys(ctx, p+"stage:*").Result(); len(keys) != 0 {
			t.Fatalf("%s: stage keys left: %q", run, keys)
		}
		return args.systemStages - before
	}
	for _, c := range []struct {
		run    string
		sys    []byte
		staged int
	}{
		{"r1", sysA, 1}, // new: the pending save stages it once, the finish names it
		{"r2", sysA, 0}, // unchanged
		{"r3", sysB, 1}, // changed
		{"r4", sysB, 0},
	} {
		if n := turn(c.run, c.sys); n != c.staged {
			t.Fatalf("%s staged the system %d times, want %d", c.run, n, c.staged)
		}
	}

	// The old layout: the blob in the meta field "sys", no key, no sum.
	if err := cl.HSet(ctx, p+"meta", "sys", string(sysA)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cl.HDel(ctx, p+"meta", "syssum").Err(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Del(ctx, p+"sys").Err(); err != nil {
		t.Fatal(err)
	}
	if th, err := s.LoadThread(ctx, k); err != nil || !bytes.Equal(th.System, sysA) {
		t.Fatalf("old layout: system of %d bytes (%v)", len(th.System), err)
	}
	if n := turn("r5", sysA); n != 1 {
		t.Fatalf("moving the old layout staged the system %d times, want 1", n)
	}
	if ok, _ := cl.HExists(ctx, p+"meta", "sys").Result(); ok {
		t.Fatal("the meta field of the old layout outlived a write")
	}
	if n := turn("r6", nil); n != 0 {
		t.Fatalf("clearing staged %d", n)
	}
	if n, _ := cl.Exists(ctx, p+"sys").Result(); n != 0 {
		t.Fatal("a cleared system kept its key")
	}
	turn("r7", sysB)
	if err := s.DeleteThread(ctx, k); err != nil {
		t.Fatal(err)
	}
	if keys, _ := cl.Keys(ctx, p+"*").Result(); len(keys) != 0 {
		t.Fatalf("keys left after delete: %q", keys)
	}
	if args.largest >= blobMin {
		t.Fatalf("a script got a %d-byte argument (blobMin %d)", args.largest, blobMin)
	}
}
