package admin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/config"
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

// staleListing lists threads as they were a minute earlier: a turn came
// between the retention pass's listing and its delete.
type staleListing struct{ store.Store }

func (s staleListing) ListThreads(ctx context.Context, q store.ThreadQuery) (store.ThreadPage, error) {
	p, err := s.Store.ListThreads(ctx, q)
	for i := range p.Threads {
		p.Threads[i].UpdatedAt = p.Threads[i].UpdatedAt.Add(-time.Minute)
	}
	return p, err
}

func (s staleListing) Unwrap() store.Store { return s.Store }

// TestPruneSkipsUpdated: a thread updated after the retention pass found
// it expired is no longer expired, and stays.
func TestPruneSkipsUpdated(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := b.open(t)
			ctx := context.Background()
			k := store.Key{Tenant: "tn", Thread: "th"}
			started, err := st.StartRun(ctx, store.StartRun{Key: k, RunID: "r1", Owner: "o", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			m := []byte(`{"role":"user","content":"x"}`)
			tr := store.Transcript{Messages: [][]byte{m}, Hashes: []store.Hash{{1}}}
			if err := st.Finish(ctx, started.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Parse([]byte("retention: {default: 1h}"), func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatal(err)
			}
			later := time.Now().Add(3 * time.Hour)
			out, err := NewAudit(staleListing{st}).Prune(ctx, cfg, later, false)
			if err != nil || len(out.Threads) != 0 {
				t.Fatalf("pass over a thread updated since it was listed: %+v, %v", out, err)
			}
			if _, err := st.LoadThread(ctx, k); err != nil {
				t.Fatalf("the updated thread was deleted: %v", err)
			}
			// As listed now, it is expired and goes.
			if out, err := NewAudit(st).Prune(ctx, cfg, later, false); err != nil || len(out.Threads) != 1 {
				t.Fatalf("pass: %+v, %v", out, err)
			}
		})
	}
}
