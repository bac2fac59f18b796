package admin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/internal/threaddoc"
	"github.com/chronicle-proxy/chronicle/store"
)

// Usage groupings.
const (
	GroupTenant     = "tenant"
	GroupConnection = "connection"
	GroupModel      = "model"
	GroupDay        = "day"
)

// UsageQuery selects the runs whose usage is summed: runs started within
// [Since, Until] (either may be zero) of threads that pass Tenant and
// Connection.
type UsageQuery struct {
	GroupBy    string // tenant (default), connection, model or day (UTC, of the run's start)
	Tenant     string
	Connection string
	Since      time.Time
	Until      time.Time
}

// UsageGroup is the total of one group.
type UsageGroup struct {
	Key   string    `json:"key"`
	Runs  int64     `json:"runs"`
	Usage UsageJSON `json:"usage"`
}

// UsageReport is the answer of GET /admin/usage.
type UsageReport struct {
	GroupBy string       `json:"group_by"`
	Since   *string      `json:"since"`
	Until   *string      `json:"until"`
	Groups  []UsageGroup `json:"groups"`
	Total   UsageGroup   `json:"total"`
}

// Usage sums the usage of the runs q selects, by group. It reads every
// thread updated since q.Since and each one's runs (one ListRuns call per
// thread): an aggregate over the whole store costs a walk of it.
func (a *Audit) Usage(ctx context.Context, q UsageQuery) (UsageReport, error) {
	if q.GroupBy == "" {
		q.GroupBy = GroupTenant
	}
	switch q.GroupBy {
	case GroupTenant, GroupConnection, GroupModel, GroupDay:
	default:
		return UsageReport{}, fmt.Errorf("%w: group_by %q (want tenant, connection, model or day)", ErrBadFilter, q.GroupBy)
	}
	rep := UsageReport{GroupBy: q.GroupBy, Groups: []UsageGroup{}, Total: UsageGroup{Key: "total"}}
	if !q.Since.IsZero() {
		s := threaddoc.Timestamp(q.Since)
		rep.Since = &s
	}
	if !q.Until.IsZero() {
		s := threaddoc.Timestamp(q.Until)
		rep.Until = &s
	}
	sums := map[string]*UsageGroup{}
	add := func(g *UsageGroup, u *store.Usage) {
		g.Runs++
		if u != nil {
			g.Usage.InputTokens += u.InputTokens
			g.Usage.OutputTokens += u.OutputTokens
			g.Usage.CachedTokens += u.CachedTokens
			g.Usage.ReasoningTokens += u.ReasoningTokens
		}
	}
	// Threads updated before Since hold no run started after it; Until
	// cannot filter threads (a thread updated later holds earlier runs).
	sq := store.ThreadQuery{Tenant: q.Tenant, Connection: q.Connection, Since: q.Since, Limit: maxListLimit}
	for {
		page, err := a.st.ListThreads(ctx, sq)
		if err != nil {
			return rep, storeErr(err)
		}
		for _, s := range page.Threads {
			runs, err := a.st.ListRuns(ctx, s.Key)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return rep, err
			}
			for _, r := range runs {
				if (!q.Since.IsZero() && r.StartedAt.Before(q.Since)) || (!q.Until.IsZero() && r.StartedAt.After(q.Until)) {
					continue
				}
				var key string
				switch q.GroupBy {
				case GroupTenant:
					key = s.Key.Tenant
				case GroupConnection:
					key = s.Connection
				case GroupModel:
					if key = r.Model; key == "" {
						key = s.Model
					}
				case GroupDay:
					key = r.StartedAt.UTC().Format("2006-01-02")
				}
				g := sums[key]
				if g == nil {
					g = &UsageGroup{Key: key}
					sums[key] = g
				}
				add(g, r.Usage)
				add(&rep.Total, r.Usage)
			}
		}
		if page.NextCursor == "" {
			break
		}
		sq.Cursor = page.NextCursor
	}
	for _, g := range sums {
		rep.Groups = append(rep.Groups, *g)
	}
	sort.Slice(rep.Groups, func(i, j int) bool { return rep.Groups[i].Key < rep.Groups[j].Key })
	return rep, nil
}
