package embedded

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/storetest"
)

// BenchmarkChatTurn is the committer's share of the bench's chat
// workload: turns round-robin over 32 threads, each a start with the
// thread (the digest the caller holds) and a finish that writes the
// one-message request and its reply in replace mode, with usage. NoSync:
// the CPU of the steps, not the log's write. gets/turn counts the reads
// that missed the committer's hot cache (each a pebble Get: a memtable
// skiplist seek and the tables' filters); keys/turn the keys the turn's
// batches set or delete (each an insert in the memtable's skiplist).
func BenchmarkChatTurn(b *testing.B) { chatTurns(b, 32, 0) }

// BenchmarkChatTurnLong is BenchmarkChatTurn on threads of 200 messages
// (198 before the turn's two): a turn's work should not grow with them.
func BenchmarkChatTurnLong(b *testing.B) { chatTurns(b, 32, 198) }

// BenchmarkChatTurnMany is BenchmarkChatTurn over 256 threads: more than
// a group of the hot cache held of the keys outside threads.
func BenchmarkChatTurnMany(b *testing.B) { chatTurns(b, 256, 0) }

// chatStart is the start of a chat turn on k whose stored transcript has
// the hashes stored (nil: none yet), as the proxy makes it.
func chatStart(k store.Key, runID string, stored []store.Hash) store.StartRun {
	sr := store.StartRun{Key: k, RunID: runID, Owner: "replica", TTL: 30e9,
		Fingerprint: "fingerprint", Model: "gpt-x", LoadThread: true, NoSystem: true, FreshRunID: true}
	if stored != nil {
		sr.KnownDigest = store.Digest(stored)
	}
	return sr
}

func chatTurns(b *testing.B, threads, history int) {
	s, err := Open(b.TempDir(), Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	stored := make([][]store.Hash, threads)
	keys := make([]store.Key, threads)
	for i := range keys {
		keys[i] = store.Key{Tenant: "bench", Thread: fmt.Sprintf("chat-%d", i)}
	}
	past, ph := storetest.Msgs(1000, history)
	user, uh := storetest.Msg(0, "user")
	turn := func(i int) {
		t := i % threads
		st, err := s.StartRun(ctx, chatStart(keys[t], fmt.Sprintf("run-%08d", i), stored[t]))
		if err != nil {
			b.Fatal(err)
		}
		if stored[t] != nil && !st.Unchanged {
			b.Fatal("the start read the transcript again")
		}
		reply, rh := storetest.Msg(i, "assistant")
		msgs := append(append([][]byte{}, past...), user, reply)
		hashes := append(append([]store.Hash{}, ph...), uh, rh)
		tr := store.Diff(stored[t], msgs, hashes)
		tr.Connection, tr.Format, tr.Model = "openai", "openai", "gpt-x"
		if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr,
			Usage: &store.Usage{InputTokens: 10, OutputTokens: 20}, Model: "gpt-x", AnswerStatus: 200}); err != nil {
			b.Fatal(err)
		}
		stored[t] = hashes
	}
	for i := range 4 * threads {
		turn(i)
	}
	b.ReportAllocs()
	misses, written, wb := s.hot.misses, s.keys.Load(), s.written.Load()
	b.ResetTimer()
	n := 0
	for i := 4 * threads; b.Loop(); i++ {
		turn(i)
		n++
	}
	b.ReportMetric(float64(s.hot.misses-misses)/float64(n), "gets/turn")
	b.ReportMetric(float64(s.keys.Load()-written)/float64(n), "keys/turn")
	b.ReportMetric(float64(s.written.Load()-wb)/float64(n), "B/turn")
}

// BenchmarkConcurrentTurns is chronicle-bench's chat workload on the
// store alone: 32 writers (the bench's connections), each turning over
// two threads of its own, with some work of the request's between a
// turn's start and its finish (hashing, standing in for the proxy's
// parsing and the upstream's answer). Run it with -cpu 1, the bench's
// pinned proxy: ops/commit is how many steps share a commit (one log
// write, one wake-up of the committer), the figure the committer's
// yield before it commits is for.
func BenchmarkConcurrentTurns(b *testing.B) {
	s, err := Open(b.TempDir(), Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	user, uh := storetest.Msg(0, "user")
	var workers, runs atomic.Int64
	commits, ops := s.commits.Load(), s.grouped.Load()
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		w := workers.Add(1)
		var stored [2][]store.Hash
		work := make([]byte, 4<<10)
		for i := 0; pb.Next(); i++ {
			t := i % 2
			k := store.Key{Tenant: "bench", Thread: fmt.Sprintf("w%d-%d", w, t)}
			st, err := s.StartRun(ctx, chatStart(k, fmt.Sprintf("run-%08d", runs.Add(1)), stored[t]))
			if err != nil {
				b.Error(err)
				return
			}
			work[0] = byte(i)
			for range 4 {
				sum := sha256.Sum256(work)
				work[1] = sum[0]
			}
			reply, rh := storetest.Msg(i, "assistant")
			hashes := []store.Hash{uh, rh}
			tr := store.Diff(stored[t], [][]byte{user, reply}, hashes)
			tr.Connection, tr.Format, tr.Model = "openai", "openai", "gpt-x"
			if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr,
				Usage: &store.Usage{InputTokens: 10, OutputTokens: 20}, Model: "gpt-x", AnswerStatus: 200}); err != nil {
				b.Error(err)
				return
			}
			stored[t] = hashes
		}
	})
	b.ReportMetric(float64(s.grouped.Load()-ops)/float64(s.commits.Load()-commits), "ops/commit")
}
