package embedded

import (
	"context"
	"testing"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/storetest"
)

// TestSaveCost proves that appending one message to a 1,000-message thread
// writes O(1) pages, while an overwrite rewrites the thread's pages.
func TestSaveCost(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	k := store.Key{Tenant: "t", Thread: "long"}
	msgs, hashes := storetest.Msgs(0, 1000)
	st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: "r1", TTL: 30e9})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SaveTranscript(ctx, st.Lease, store.Diff(nil, msgs, hashes)); err != nil {
		t.Fatal(err)
	}
	pages := func() int64 { st := s.db.Stats(); return st.TxStats.GetWrite() }
	reply, rh := storetest.Msg(1000, "assistant")
	next, nextH := append(msgs, reply), append(hashes, rh)
	before := pages()
	tr := store.Diff(hashes, next, nextH)
	if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatal(err)
	}
	appendPages := pages() - before
	st, err = s.StartRun(ctx, store.StartRun{Key: k, RunID: "r2", TTL: 30e9})
	if err != nil {
		t.Fatal(err)
	}
	other, otherH := storetest.Msgs(5000, 1000)
	before = pages()
	tr = store.Diff(nextH, other, otherH)
	if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatal(err)
	}
	overwritePages := pages() - before
	// The thread's messages take ~25 pages; an append touches the B+tree
	// path (meta, runs, one leaf) and the indexes, not the thread.
	if appendPages > 16 || overwritePages < 2*appendPages+20 {
		t.Fatalf("pages written: append one %d, overwrite 1,000 %d", appendPages, overwritePages)
	}
	t.Logf("pages written: append one %d, overwrite 1,000 %d", appendPages, overwritePages)
}
