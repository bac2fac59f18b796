package embedded

import (
	"context"
	"testing"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/storetest"
)

// TestSaveCost proves that appending one message to a 1,000-message thread
// writes O(1) bytes, while an overwrite rewrites the thread's messages.
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
	written := func() int64 { return s.written.Load() }
	reply, rh := storetest.Msg(1000, "assistant")
	next, nextH := append(msgs, reply), append(hashes, rh)
	before := written()
	tr := store.Diff(hashes, next, nextH)
	if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatal(err)
	}
	appendBytes := written() - before
	st, err = s.StartRun(ctx, store.StartRun{Key: k, RunID: "r2", TTL: 30e9})
	if err != nil {
		t.Fatal(err)
	}
	other, otherH := storetest.Msgs(5000, 1000)
	before = written()
	tr = store.Diff(nextH, other, otherH)
	if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatal(err)
	}
	overwriteBytes := written() - before
	// An append writes the message, the meta, the run and the index
	// entries, not the thread's other messages.
	msgBytes := int64(len(msgs[0]) + len(store.Hash{}))
	if appendBytes > 4096 || overwriteBytes < 1000*msgBytes {
		t.Fatalf("bytes written: append one %d, overwrite 1,000 %d (a message is %d)", appendBytes, overwriteBytes, msgBytes)
	}
	t.Logf("bytes written: append one %d, overwrite 1,000 %d", appendBytes, overwriteBytes)
}
