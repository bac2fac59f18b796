package embedded

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/storetest"
)

// BenchmarkGroupCommit runs persisted turns (StartRun with the thread, then
// Finish with a transcript) from 1, 8 and 64 writers on their own threads,
// under the default fsync setting, and reports how many writes shared each
// commit. Each turn rewrites the thread's one message: the versions of
// that key pile up in the memtable until a flush, which the iteration of a
// LoadThread walks (an append writes new keys instead).
func BenchmarkGroupCommit(b *testing.B) {
	for _, writers := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			s, err := Open(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			per := b.N/writers + 1
			start, grouped := s.commits.Load(), s.grouped.Load()
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					k := store.Key{Tenant: "bench", Thread: fmt.Sprintf("w%d", w)}
					var stored []store.Hash
					for i := range per {
						st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: fmt.Sprintf("r%d-%d", w, i), TTL: 30e9, LoadThread: true})
						if err != nil {
							b.Error(err)
							return
						}
						m, h := storetest.Msg(i, "user")
						tr := store.Diff(stored, [][]byte{m}, []store.Hash{h})
						if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
							b.Error(err)
							return
						}
						stored = []store.Hash{h}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			commits := s.commits.Load() - start
			b.ReportMetric(float64(s.grouped.Load()-grouped)/float64(commits), "writes/commit")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(per*writers), "ns/turn")
		})
	}
}
