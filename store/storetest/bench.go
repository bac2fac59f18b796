package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chronicle-proxy/chronicle/store"
)

// RunBenchmarks measures the proxy's hot-path calls on one backend: load a
// 200-message thread, save a one-message suffix onto a 1,000-message
// thread, start+finish a run that appends one message, a whole turn on a
// 100-message thread (thread read with the start, or apart), start+finish
// from 16 goroutines per CPU on their own threads, and append a batch of
// 16 events.
func RunBenchmarks(b *testing.B, newBackend Factory) {
	ctx := context.Background()
	seed := func(s store.Store, k store.Key, n int) store.Lease {
		msgs, hashes := Msgs(0, n)
		st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: "seed", TTL: ttl})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.SaveTranscript(ctx, st.Lease, store.Diff(nil, msgs, hashes)); err != nil {
			b.Fatal(err)
		}
		return st.Lease
	}
	b.Run("Load200", func(b *testing.B) {
		s := newBackend(b, NewClock().Now)
		defer s.Close()
		k := store.Key{Tenant: "bench", Thread: "load"}
		seed(s, k, 200)
		b.ResetTimer()
		for b.Loop() {
			if _, err := s.LoadThread(ctx, k); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("SaveSuffix1000", func(b *testing.B) {
		s := newBackend(b, NewClock().Now)
		defer s.Close()
		k := store.Key{Tenant: "bench", Thread: "save"}
		l := seed(s, k, 1000)
		th, err := s.LoadThread(ctx, k)
		if err != nil {
			b.Fatal(err)
		}
		last := th.Hashes[len(th.Hashes)-1]
		i := 1000
		b.ResetTimer()
		for b.Loop() {
			m, h := Msg(i, "user")
			if err := s.SaveTranscript(ctx, l, store.Transcript{Keep: i, KeepHash: last, Messages: [][]byte{m}, Hashes: []store.Hash{h}}); err != nil {
				b.Fatal(err)
			}
			last = h
			i++
		}
	})
	b.Run("StartFinish", func(b *testing.B) {
		s := newBackend(b, NewClock().Now)
		defer s.Close()
		k := store.Key{Tenant: "bench", Thread: "finish"}
		l := seed(s, k, 10)
		if err := s.Finish(ctx, l, &store.Finish{Status: store.Completed}); err != nil {
			b.Fatal(err)
		}
		th, _ := s.LoadThread(ctx, k)
		last, n := th.Hashes[len(th.Hashes)-1], len(th.Hashes)
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: fmt.Sprintf("r%d", i), TTL: ttl})
			if err != nil {
				b.Fatal(err)
			}
			m, h := Msg(n, "assistant")
			tr := store.Transcript{Keep: n, KeepHash: last, Messages: [][]byte{m}, Hashes: []store.Hash{h}}
			if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr, Usage: &store.Usage{InputTokens: 1}}); err != nil {
				b.Fatal(err)
			}
			last, n = h, n+1
		}
	})
	// A persisted turn on a 100-message thread as the proxy runs it: start
	// with the thread, finish writing the reply (which replaces the last
	// message, so the thread keeps its length).
	turn := func(fused bool) func(b *testing.B) {
		return func(b *testing.B) {
			s := newBackend(b, NewClock().Now)
			defer s.Close()
			k := store.Key{Tenant: "bench", Thread: "turn"}
			l := seed(s, k, 100)
			if err := s.Finish(ctx, l, &store.Finish{Status: store.Completed}); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: fmt.Sprintf("r%d", i), TTL: ttl, LoadThread: fused})
				if err != nil {
					b.Fatal(err)
				}
				th := st.Thread
				if !fused {
					if th, err = s.LoadThread(ctx, k); err != nil {
						b.Fatal(err)
					}
				}
				if len(th.Hashes) != 100 {
					b.Fatalf("thread has %d messages", len(th.Hashes))
				}
				m, h := Msg(1000+i, "assistant")
				tr := store.Transcript{Keep: 99, KeepHash: th.Hashes[98], Messages: [][]byte{m}, Hashes: []store.Hash{h}}
				if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr, Usage: &store.Usage{InputTokens: 1}}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	// A Gemini turn as the proxy runs it in replace mode, with a 512 KiB
	// systemInstruction that stays the same: start (the request brings
	// its own system), the pending turn's save, and the finish.
	b.Run("TurnSystem512K", func(b *testing.B) {
		s := newBackend(b, NewClock().Now)
		defer s.Close()
		k := store.Key{Tenant: "bench", Thread: "system"}
		sys := []byte(`{"parts":[{"text":"` + strings.Repeat("s", 512<<10) + `"}]}`)
		msgs, hashes := Msgs(0, 20)
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: fmt.Sprintf("r%d", i), TTL: ttl, LoadThread: true, NoSystem: true})
			if err != nil {
				b.Fatal(err)
			}
			pending := store.Diff(st.Thread.Hashes, msgs[:19], hashes[:19])
			pending.System = sys
			if err := s.SaveTranscript(ctx, st.Lease, pending); err != nil {
				b.Fatal(err)
			}
			tr := store.Diff(hashes[:19], msgs, hashes)
			tr.System = sys
			if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Turn100", turn(true))
	b.Run("Turn100LoadApart", turn(false))
	// Many turns at once, each on its own thread: how well concurrent
	// writers share the backend (group commit on embedded).
	b.Run("StartFinishParallel", func(b *testing.B) {
		s := newBackend(b, NewClock().Now)
		defer s.Close()
		var next atomic.Int64
		b.SetParallelism(16)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			g := next.Add(1)
			k := store.Key{Tenant: "bench", Thread: fmt.Sprintf("par-%d", g)}
			var stored []store.Hash
			for i := 0; pb.Next(); i++ {
				st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: fmt.Sprintf("r%d-%d", g, i), TTL: ttl, LoadThread: true})
				if err != nil {
					b.Error(err)
					return
				}
				m, h := Msg(i, "user")
				tr := store.Diff(stored, [][]byte{m}, []store.Hash{h})
				if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
					b.Error(err)
					return
				}
				stored = []store.Hash{h}
			}
		})
	})
	b.Run("AppendEvents16", func(b *testing.B) {
		s := newBackend(b, NewClock().Now)
		defer s.Close()
		k := store.Key{Tenant: "bench", Thread: "events"}
		l := seed(s, k, 1)
		batch := make([][]byte, 16)
		for i := range batch {
			batch[i] = []byte(`data: {"choices":[{"index":0,"delta":{"content":"token"}}]}` + "\n\n")
		}
		seq := int64(1)
		b.ResetTimer()
		for b.Loop() {
			if err := s.AppendEvents(ctx, l, seq, batch); err != nil {
				b.Fatal(err)
			}
			seq += int64(len(batch))
		}
	})
}
