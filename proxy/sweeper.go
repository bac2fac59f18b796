package proxy

import (
	"context"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
)

// runSweeper marks runs whose replica died failed (proxy_lost) every third
// of the lease TTL, until ctx ends.
func (s *Server) runSweeper(ctx context.Context) {
	every := s.cfg.Leases.TTL.D() / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sctx, cancel := context.WithTimeout(ctx, s.storeTimeout)
		refs, err := s.store.Sweep(sctx)
		cancel()
		if err != nil {
			s.log.Warn("sweep failed", "err", err)
			continue
		}
		for _, r := range refs {
			s.log.Warn("run lost with its replica; marked failed", "thread", r.Key.Thread, "run", r.RunID, "reason", store.ReasonProxyLost)
		}
	}
}
