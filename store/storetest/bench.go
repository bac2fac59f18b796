package storetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/chronicle-proxy/chronicle/store"
)

// RunBenchmarks measures the proxy's hot-path calls on one backend: load a
// 200-message thread, save a one-message suffix onto a 1,000-message
// thread, start+finish a run that appends one message, and append a batch
// of 16 events.
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
		if err := s.Finish(ctx, l, store.Finish{Status: store.Completed}); err != nil {
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
			if err := s.Finish(ctx, st.Lease, store.Finish{Status: store.Completed, Transcript: &tr, Usage: &store.Usage{InputTokens: 1}}); err != nil {
				b.Fatal(err)
			}
			last, n = h, n+1
		}
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
