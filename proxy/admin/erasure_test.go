package admin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
)

// failingStore fails ListRuns once the thread named fail is reached, as a
// store that went away in the middle of an erasure.
type failingStore struct {
	store.Store
	fail string
}

func (f *failingStore) ListRuns(ctx context.Context, k store.Key) ([]store.Run, error) {
	if k.Thread == f.fail {
		return nil, errors.New("test: the store went away while reading thread " + k.Thread)
	}
	return f.Store.ListRuns(ctx, k)
}

func (f *failingStore) Unwrap() store.Store { return f.Store }

// TestErasureInterrupted: an erasure cut short by the store still leaves a
// tombstone of what it did, which names nothing in clear (not even
// through the error), and says to call again.
func TestErasureInterrupted(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := b.open(t)
			ctx := context.Background()
			for _, th := range []string{"a-first", "b-second"} {
				k := store.Key{Tenant: "tn", Thread: th}
				started, err := st.StartRun(ctx, store.StartRun{Key: k, RunID: th + "-r", Owner: "o", TTL: time.Minute, Subject: "subj-1"})
				if err != nil {
					t.Fatal(err)
				}
				m := []byte(`{"role":"user","content":"x"}`)
				tr := store.Transcript{Messages: [][]byte{m}, Hashes: []store.Hash{{1}}}
				if err := st.Finish(ctx, started.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
					t.Fatal(err)
				}
			}
			a := NewAudit(&failingStore{Store: st, fail: "b-second"})
			out, err := a.EraseSubject(ctx, "tn", "subj-1", Eraser{Actor: "dpo", Reason: "ticket-3"})
			if err == nil || out.Threads != 1 || out.Tombstone == "" {
				t.Fatalf("interrupted erasure: %+v, %v", out, err)
			}
			ts, err := a.Tombstones(ctx, 10)
			if err != nil || len(ts) != 1 {
				t.Fatalf("tombstones: %+v %v", ts, err)
			}
			if !strings.Contains(ts[0].Reason, "ticket-3") || !strings.Contains(ts[0].Reason, "call again") || ts[0].Threads != 1 ||
				strings.Contains(ts[0].Reason, "b-second") || ts[0].Actor != "dpo" {
				t.Fatalf("tombstone of an interrupted erasure: %+v", ts[0])
			}
			// Called again on the whole store, it finishes.
			out, err = NewAudit(st).EraseSubject(ctx, "tn", "subj-1", Eraser{Actor: "dpo", Reason: "ticket-3"})
			if err != nil || out.Threads != 1 || !out.Complete {
				t.Fatalf("erasure again: %+v, %v", out, err)
			}
		})
	}
}
