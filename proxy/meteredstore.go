package proxy

import (
	"context"
	"errors"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
)

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

// meteredStore times every store operation the proxy makes and counts its
// failures; the backend itself stays unaware of metrics.
type meteredStore struct {
	store.Store
	m *serverMetrics
}

func (s meteredStore) LoadThread(ctx context.Context, k store.Key) (t store.Thread, err error) {
	defer s.m.observeStore("load_thread", time.Now(), err)
	return s.Store.LoadThread(ctx, k)
}

func (s meteredStore) SaveTranscript(ctx context.Context, l store.Lease, t store.Transcript) (err error) {
	defer s.m.observeStore("save_transcript", time.Now(), err)
	return s.Store.SaveTranscript(ctx, l, t)
}

func (s meteredStore) StartRun(ctx context.Context, r store.StartRun) (st store.Started, err error) {
	defer s.m.observeStore("start_run", time.Now(), errIgnoring(err, store.ErrLeaseHeld, store.ErrConflict))
	return s.Store.StartRun(ctx, r)
}

func (s meteredStore) Renew(ctx context.Context, l store.Lease, p store.RunPatch) (r store.Renewal, err error) {
	defer s.m.observeStore("renew", time.Now(), err)
	return s.Store.Renew(ctx, l, p)
}

func (s meteredStore) Finish(ctx context.Context, l store.Lease, f store.Finish) (err error) {
	defer s.m.observeStore("finish", time.Now(), err)
	return s.Store.Finish(ctx, l, f)
}

func (s meteredStore) AppendEvents(ctx context.Context, l store.Lease, first int64, events [][]byte) (err error) {
	defer s.m.observeStore("append_events", time.Now(), err)
	return s.Store.AppendEvents(ctx, l, first, events)
}

func (s meteredStore) GetRun(ctx context.Context, k store.Key, runID string) (r store.Run, err error) {
	defer s.m.observeStore("get_run", time.Now(), err)
	return s.Store.GetRun(ctx, k, runID)
}

func (s meteredStore) ListRuns(ctx context.Context, k store.Key) (r []store.Run, err error) {
	defer s.m.observeStore("list_runs", time.Now(), err)
	return s.Store.ListRuns(ctx, k)
}

func (s meteredStore) Sweep(ctx context.Context) (r []store.RunRef, err error) {
	defer s.m.observeStore("sweep", time.Now(), err)
	return s.Store.Sweep(ctx)
}

func (s meteredStore) ListThreads(ctx context.Context, q store.ThreadQuery) (p store.ThreadPage, err error) {
	defer s.m.observeStore("list_threads", time.Now(), err)
	return s.Store.ListThreads(ctx, q)
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
