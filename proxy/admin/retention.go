package admin

import (
	"context"
	"errors"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/config"
	"github.com/chronicle-proxy/chronicle/store"
)

// Retention (issue 31): a thread is kept for config.RetentionFor(its
// tenant, its connection) after its last update (updated_at), then the
// pass deletes it with everything it owns. The pass is Prune; the proxy
// runs it on one replica at a time (proxy/retention.go), `chronicle
// threads prune` and POST /admin/prune run it by hand.

// PrunedThread is a thread the pass deleted (or, dry, would delete).
type PrunedThread struct {
	Tenant     string    `json:"tenant"`
	Thread     string    `json:"thread"`
	Connection string    `json:"connection"`
	UpdatedAt  time.Time `json:"updated_at"`
	Retention  string    `json:"retention"`
	ExpiredAt  time.Time `json:"expired_at"`
}

// Pruned is what a pass did.
type Pruned struct {
	DryRun bool `json:"dry_run"`
	// Threads are those deleted (dry run: those that would be).
	Threads  []PrunedThread `json:"threads"`
	Runs     int            `json:"runs"`
	Events   int64          `json:"events"`
	Messages int            `json:"messages"`
	// Busy are expired threads left because a run was in flight
	// ("tenant/thread"); the next pass takes them.
	Busy      []string `json:"busy"`
	Tombstone string   `json:"tombstone,omitempty"`
	Compacted bool     `json:"compacted"`
}

// Expiry is when a thread last updated at updated expires under p; zero
// for forever.
func Expiry(p config.Period, updated time.Time) time.Time {
	if p == config.Forever {
		return time.Time{}
	}
	return updated.Add(p.D())
}

// Prune deletes (dry: lists) every indexed thread whose retention under
// cfg ended before now. Threads that never saved a transcript are not in
// the audit index and are not pruned (docs/auditors.md).
func (a *Audit) Prune(ctx context.Context, cfg *config.Config, now time.Time, dryRun bool) (Pruned, error) {
	out := Pruned{DryRun: dryRun, Threads: []PrunedThread{}, Busy: []string{}}
	if !cfg.RetentionOn() {
		return out, nil
	}
	tenants, err := a.st.ListTenants(ctx)
	if err != nil {
		return out, err
	}
	var expired []PrunedThread
	for _, t := range tenants {
		shortest := cfg.ShortestRetention(t)
		if shortest == config.Forever {
			continue
		}
		q := store.ThreadQuery{Tenant: t, Until: now.Add(-shortest.D()), Limit: maxListLimit}
		for {
			page, err := a.st.ListThreads(ctx, q)
			if err != nil {
				return out, err
			}
			for _, s := range page.Threads {
				p := cfg.RetentionFor(t, s.Connection)
				exp := Expiry(p, s.UpdatedAt)
				if exp.IsZero() || exp.After(now) {
					continue
				}
				pt := PrunedThread{Tenant: t, Thread: s.Key.Thread, Connection: s.Connection, UpdatedAt: s.UpdatedAt, Retention: p.String(), ExpiredAt: exp}
				if s.LastStatus == store.Running {
					out.Busy = append(out.Busy, t+"/"+s.Key.Thread)
					continue
				}
				expired = append(expired, pt)
			}
			if page.NextCursor == "" {
				break
			}
			q.Cursor = page.NextCursor
		}
	}
	if dryRun {
		out.Threads = expired
		return out, nil
	}
	var deleteErr error
	for _, pt := range expired {
		n, err := a.deleteCounted(ctx, store.Key{Tenant: pt.Tenant, Thread: pt.Thread}, pt.UpdatedAt)
		if errors.Is(err, errUpdated) {
			continue // a turn came since: no longer expired
		}
		if errors.Is(err, ErrBusy) {
			out.Busy = append(out.Busy, pt.Tenant+"/"+pt.Thread)
			continue
		}
		if err != nil {
			deleteErr = err
			break
		}
		out.Threads = append(out.Threads, pt)
		out.Runs += n.runs
		out.Events += n.events
		out.Messages += n.messages
	}
	if len(out.Threads) == 0 {
		return out, deleteErr
	}
	// What was deleted gets its tombstone, also when the pass was cut
	// short or the compaction failed.
	var compactErr error
	if deleteErr == nil {
		compactErr = a.compact(ctx)
		out.Compacted = compactErr == nil
	}
	if e, ok := store.As[store.Erasure](a.st); ok {
		er := Erased{Threads: len(out.Threads), Runs: out.Runs, Events: out.Events, Messages: out.Messages, Busy: out.Busy}
		by := Eraser{Actor: "retention"}
		tctx := ctx
		if deleteErr != nil {
			by.Reason = "interrupted before the end: the next pass goes on"
			var cancel context.CancelFunc
			tctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
		}
		id, err := a.tombstone(tctx, e, by, store.Tombstone{Scope: "retention"}, er)
		out.Tombstone = id
		if err != nil && deleteErr == nil {
			return out, err
		}
	}
	if deleteErr != nil {
		return out, deleteErr
	}
	return out, compactErr
}
