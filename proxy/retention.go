package proxy

import (
	"context"
	"errors"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/admin"
	"github.com/chronicle-proxy/chronicle/store"
)

// retentionLease names the store lease the retention pass runs under.
const retentionLease = "retention"

// errNoLease: the store cannot hold the pass's lease (no store.Erasure).
var errNoLease = errors.New("proxy: the store keeps no leases; retention needs store.Erasure")

// defaultRetentionFirstPass is how soon after start a replica first tries
// the retention pass (or the interval, if shorter).
const defaultRetentionFirstPass = time.Minute

// runRetention tries the retention pass shortly after start and then every
// retention.interval, until ctx ends; it runs on the replica that holds
// the store's retention lease. The first try comes soon after start, not
// an interval later: replicas restarted more often than the interval (a
// deploy a day with a day's interval) would otherwise never reach a pass.
// A new replica takes the lease once the holder's lapses, so the store
// sees a pass about every interval, at most every one and a half.
func (s *Server) runRetention(ctx context.Context) {
	every := s.cfg.Retention.Interval.D()
	first := s.retentionFirst
	if first <= 0 {
		first = defaultRetentionFirstPass
	}
	t := time.NewTimer(min(first, every))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, _, err := s.RetentionPass(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("retention pass failed", "err", err)
		}
		t.Reset(every)
	}
}

// RetentionPass runs one retention pass if this replica holds the store's
// retention lease or can take it; ran is false when another replica holds
// it. The lease lasts one and a half intervals and the holder renews it
// at each pass, so one replica keeps the pass while it lives, and another
// takes it within an interval and a half of its end.
func (s *Server) RetentionPass(ctx context.Context) (ran bool, out admin.Pruned, err error) {
	if s.store == nil || !s.cfg.RetentionOn() {
		return false, out, nil
	}
	e, ok := store.As[store.Erasure](s.store)
	if !ok {
		return false, out, errNoLease
	}
	every := s.cfg.Retention.Interval.D()
	lctx, cancel := context.WithTimeout(ctx, s.storeTimeout)
	held, err := e.Lease(lctx, retentionLease, s.replicaID, every+every/2)
	cancel()
	if err != nil {
		s.metrics.RetentionPass("error", 0, 0, time.Now())
		return false, out, err
	}
	if !held {
		s.metrics.RetentionPass("skipped", 0, 0, time.Now())
		return false, out, nil
	}
	// A pass walks every expired thread: bound it by the interval, not by
	// one store call.
	pctx, cancel := context.WithTimeout(ctx, every)
	defer cancel()
	out, err = admin.NewAudit(s.store).Prune(pctx, s.cfg, time.Now(), false)
	if err != nil {
		s.metrics.RetentionPass("error", len(out.Threads), out.Runs, time.Now())
		return true, out, err
	}
	s.metrics.RetentionPass("ok", len(out.Threads), out.Runs, time.Now())
	if len(out.Threads) > 0 || len(out.Busy) > 0 {
		s.log.Info("retention pass", "threads_deleted", len(out.Threads), "runs_deleted", out.Runs, "busy", len(out.Busy))
	}
	return true, out, nil
}
