package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
)

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

// Store times every store operation the proxy makes and counts its
// failures; the backend itself stays unaware of metrics. Its methods take a
// pointer: a value in the store.Store interface would go through a
// generated wrapper that copies every argument and result once more, and
// StartRun's result is large (the stack of the request that waits on it).
type Store struct {
	store.Store
	m *Metrics
}

// Meter wraps st so that its operations are timed and counted on m.
func (m *Metrics) Meter(st store.Store) *Store { return &Store{Store: st, m: m} }

func (s *Store) LoadThread(ctx context.Context, k store.Key) (store.Thread, error) {
	start := time.Now()
	t, err := s.Store.LoadThread(ctx, k)
	s.m.observeStore("load_thread", start, err)
	return t, err
}

func (s *Store) SaveTranscript(ctx context.Context, l store.Lease, t store.Transcript) error {
	start := time.Now()
	err := s.Store.SaveTranscript(ctx, l, t)
	s.m.observeStore("save_transcript", start, err)
	return err
}

// SaveTranscriptAsync times an asynchronous save from its call to its
// outcome; a backend that cannot queue one gets a goroutine that waits.
func (s *Store) SaveTranscriptAsync(ctx context.Context, l store.Lease, t store.Transcript, done func(error)) {
	start := time.Now()
	store.SaveAsync(ctx, s.Store, l, t, func(err error) {
		s.m.observeStore("save_transcript", start, err)
		done(err)
	})
}

func (s *Store) StartRun(ctx context.Context, r store.StartRun) (*store.Started, error) {
	start := time.Now()
	st, err := s.Store.StartRun(ctx, r)
	s.m.observeStore("start_run", start, errIgnoring(err, store.ErrLeaseHeld, store.ErrConflict))
	return st, err
}

func (s *Store) Renew(ctx context.Context, l store.Lease, p store.RunPatch) (store.Renewal, error) {
	start := time.Now()
	r, err := s.Store.Renew(ctx, l, p)
	s.m.observeStore("renew", start, err)
	return r, err
}

func (s *Store) Finish(ctx context.Context, l store.Lease, f *store.Finish) error {
	start := time.Now()
	err := s.Store.Finish(ctx, l, f)
	s.m.observeStore("finish", start, err)
	return err
}

func (s *Store) AppendEvents(ctx context.Context, l store.Lease, first int64, events [][]byte) error {
	start := time.Now()
	err := s.Store.AppendEvents(ctx, l, first, events)
	s.m.observeStore("append_events", start, err)
	return err
}

func (s *Store) GetRun(ctx context.Context, k store.Key, runID string) (store.Run, error) {
	start := time.Now()
	r, err := s.Store.GetRun(ctx, k, runID)
	s.m.observeStore("get_run", start, err)
	return r, err
}

func (s *Store) ListRuns(ctx context.Context, k store.Key) ([]store.Run, error) {
	start := time.Now()
	r, err := s.Store.ListRuns(ctx, k)
	s.m.observeStore("list_runs", start, err)
	return r, err
}

func (s *Store) Sweep(ctx context.Context) ([]store.RunRef, error) {
	start := time.Now()
	r, err := s.Store.Sweep(ctx)
	s.m.observeStore("sweep", start, err)
	return r, err
}

func (s *Store) ListThreads(ctx context.Context, q store.ThreadQuery) (store.ThreadPage, error) {
	start := time.Now()
	p, err := s.Store.ListThreads(ctx, q)
	s.m.observeStore("list_threads", start, err)
	return p, err
}

// errIgnoring drops the errors that are answers, not failures.
func errIgnoring(err error, answers ...error) error {
	for _, a := range answers {
		if errors.Is(err, a) {
			return nil
		}
	}
	return err
}

// Unwrap returns the metered store (store.Unwrapper).
func (s *Store) Unwrap() store.Store { return s.Store }
