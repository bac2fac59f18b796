package admin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/internal/threaddoc"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/tidwall/gjson"
)

// Audit is the cross-tenant, read-mostly view of a store that the admin API
// and the `chronicle threads` command share: listing with filters and text
// search, the thread document, JSONL export, deletion and usage totals.
// It holds no state of its own and is safe for concurrent use.
type Audit struct {
	st store.Store
	// scanLimit bounds how many candidate threads one text-search page
	// loads (see AuditQuery.Text).
	scanLimit int
}

// NewAudit returns the audit view of st.
func NewAudit(st store.Store) *Audit { return &Audit{st: st, scanLimit: defaultScanLimit} }

// Listing bounds. A text search loads every candidate thread it looks at,
// so one request looks at no more than defaultScanLimit of them.
const (
	defaultListLimit = 50
	maxListLimit     = 500
	defaultScanLimit = 1000
	// scanPage is the store page size a text search and an export walk
	// the index with; an export holds one such page of summaries (and one
	// thread) in memory at a time.
	scanPage = 100
)

// Errors the audit view returns for bad input; the admin API answers 400.
var (
	// ErrBadCursor: a cursor that this API did not hand out.
	ErrBadCursor = errors.New("proxy: invalid cursor")
	// ErrBadFilter: a filter value outside what the listing accepts.
	ErrBadFilter = errors.New("proxy: invalid filter")
)

// AuditQuery filters the audit listing. Empty fields do not filter.
type AuditQuery struct {
	Tenant     string
	Connection string
	Model      string
	Status     store.Status // the thread's last run status
	Since      time.Time    // updated at or after
	Until      time.Time    // updated at or before
	// Text keeps threads whose messages (or Gemini system instruction)
	// contain it in some string value, compared case-insensitively. The
	// store has no text index: each candidate thread that passes the other
	// filters is loaded and scanned, at most scanLimit of them per call,
	// so a page may come back short (even empty) with a NextCursor that
	// continues the scan.
	Text   string
	Cursor string
	Limit  int // default 50, at most 500
}

// Check validates the query's values.
func (q *AuditQuery) Check() error {
	switch q.Status {
	case "", store.Running, store.Completed, store.Failed, store.Aborted, store.Interrupted:
	default:
		return fmt.Errorf("%w: status %q (want running, completed, failed, aborted or interrupted)", ErrBadFilter, q.Status)
	}
	if q.Limit < 0 {
		return fmt.Errorf("%w: limit %d", ErrBadFilter, q.Limit)
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since) {
		return fmt.Errorf("%w: until is before since", ErrBadFilter)
	}
	_, _, err := decodeCursor(q.Cursor)
	return err
}

// UsageJSON is a token usage total.
type UsageJSON = threaddoc.Usage

// ThreadEntry is one audit listing entry: Runs is a count, Usage the sum
// over the thread's runs.
type ThreadEntry struct {
	Tenant     string    `json:"tenant"`
	ID         string    `json:"id"`
	Connection string    `json:"connection"`
	Format     string    `json:"format"`
	Model      string    `json:"model"`
	CreatedAt  string    `json:"created_at"`
	UpdatedAt  string    `json:"updated_at"`
	Runs       int64     `json:"runs"`
	LastStatus string    `json:"last_status"`
	Usage      UsageJSON `json:"usage"`
	// Parent and ForkPoint: a fork's parent and where it was taken; null
	// for a thread that is no fork.
	Parent    *string              `json:"parent"`
	ForkPoint *threaddoc.ForkPoint `json:"fork_point"`
}

// AuditPage is one page of the listing, newest-updated first. NextCursor
// is nil at the end.
type AuditPage struct {
	Threads    []ThreadEntry `json:"threads"`
	NextCursor *string       `json:"next_cursor"`
}

func toEntry(s store.ThreadSummary) ThreadEntry {
	u := s.Usage
	e := ThreadEntry{
		Tenant: s.Key.Tenant, ID: s.Key.Thread, Connection: s.Connection, Format: s.Format, Model: s.Model,
		CreatedAt: threaddoc.Timestamp(s.CreatedAt), UpdatedAt: threaddoc.Timestamp(s.UpdatedAt), Runs: s.Runs, LastStatus: string(s.LastStatus),
		Usage: UsageJSON{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CachedTokens: u.CachedTokens, ReasoningTokens: u.ReasoningTokens},
	}
	e.Parent, e.ForkPoint = threaddoc.ForkOf(s.Fork)
	return e
}

// cursorJSON is the admin cursor: the store's cursor of a page plus how many
// entries of that page were already looked at (text search stops mid-page).
type cursorJSON struct {
	Store string `json:"c"`
	Skip  int    `json:"o,omitempty"`
}

func encodeCursor(storeCursor string, skip int) *string {
	b, _ := json.Marshal(cursorJSON{storeCursor, skip})
	s := base64.RawURLEncoding.EncodeToString(b)
	return &s
}

func decodeCursor(c string) (string, int, error) {
	if c == "" {
		return "", 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	var cj cursorJSON
	if err == nil {
		err = json.Unmarshal(b, &cj)
	}
	if err != nil || cj.Skip < 0 || cj.Skip >= scanPage {
		return "", 0, ErrBadCursor
	}
	return cj.Store, cj.Skip, nil
}

func (q *AuditQuery) storeQuery(cursor string, limit int) store.ThreadQuery {
	return store.ThreadQuery{Tenant: q.Tenant, Connection: q.Connection, Model: q.Model, Status: q.Status,
		Since: q.Since, Until: q.Until, Cursor: cursor, Limit: limit}
}

func listLimit(n int) int {
	switch {
	case n <= 0:
		return defaultListLimit
	case n > maxListLimit:
		return maxListLimit
	}
	return n
}

// List returns one page of the listing.
func (a *Audit) List(ctx context.Context, q AuditQuery) (AuditPage, error) {
	if err := q.Check(); err != nil {
		return AuditPage{}, err
	}
	limit := listLimit(q.Limit)
	cursor, skip, _ := decodeCursor(q.Cursor)
	out := AuditPage{Threads: []ThreadEntry{}}
	if q.Text == "" && skip == 0 {
		page, err := a.st.ListThreads(ctx, q.storeQuery(cursor, limit))
		if err != nil {
			return out, storeErr(err)
		}
		for _, s := range page.Threads {
			out.Threads = append(out.Threads, toEntry(s))
		}
		if page.NextCursor != "" {
			out.NextCursor = encodeCursor(page.NextCursor, 0)
		}
		return out, nil
	}
	err := a.scan(ctx, q, cursor, skip, func(s store.ThreadSummary, th store.Thread) (bool, error) {
		out.Threads = append(out.Threads, toEntry(s))
		return len(out.Threads) < limit, nil
	}, func(next *string) { out.NextCursor = next })
	return out, err
}

// scan walks the listing from (cursor, skip) in store pages of scanPage,
// calls fn for every thread that passes q (text included), and stops when
// fn returns false, the index ends, or scanLimit candidates were looked at
// (text search only). done receives the cursor that continues after the
// last candidate looked at (nil at the end).
func (a *Audit) scan(ctx context.Context, q AuditQuery, cursor string, skip int,
	fn func(store.ThreadSummary, store.Thread) (bool, error), done func(*string)) error {
	needle := strings.ToLower(q.Text)
	scanned := 0
	for {
		page, err := a.st.ListThreads(ctx, q.storeQuery(cursor, scanPage))
		if err != nil {
			return storeErr(err)
		}
		for i := skip; i < len(page.Threads); i++ {
			s := page.Threads[i]
			var th store.Thread
			keep := true
			if needle != "" {
				scanned++
				th, err = a.st.LoadThread(ctx, s.Key)
				switch {
				case errors.Is(err, store.ErrNotFound):
					keep = false // deleted since it was listed
				case err != nil:
					return storeErr(err)
				default:
					keep = threadContains(th, needle)
				}
			}
			more := true
			if keep {
				if more, err = fn(s, th); err != nil {
					return err
				}
			}
			if !more || (needle != "" && scanned >= a.scanLimit) {
				switch {
				case i+1 < len(page.Threads):
					done(encodeCursor(cursor, i+1))
				case page.NextCursor != "":
					done(encodeCursor(page.NextCursor, 0))
				default:
					done(nil)
				}
				return nil
			}
		}
		if page.NextCursor == "" {
			done(nil)
			return nil
		}
		cursor, skip = page.NextCursor, 0
	}
}

// storeErr keeps store.ErrInvalid recognisable as bad input.
func storeErr(err error) error {
	if errors.Is(err, store.ErrInvalid) {
		return fmt.Errorf("%w: %w", ErrBadFilter, err)
	}
	return err
}

// opaqueKeys hold provider blobs (signatures, encrypted reasoning) that are
// not text anyone searches for.
var opaqueKeys = map[string]bool{"thoughtSignature": true, "thought_signature": true, "encrypted_content": true, "signature": true}

// threadContains reports whether a string value in th's messages or system
// instruction contains needle (already lower-cased).
func threadContains(th store.Thread, needle string) bool {
	if len(th.System) > 0 && jsonContains(gjson.ParseBytes(th.System), needle) {
		return true
	}
	for _, m := range th.Messages {
		// A cheap reject first: a needle of plain ASCII letters that is not
		// in the raw bytes (case-folded) is in no string value either.
		if isPlainASCII(needle) && !containsFold(m, needle) {
			continue
		}
		if jsonContains(gjson.ParseBytes(m), needle) {
			return true
		}
	}
	return false
}

func jsonContains(v gjson.Result, needle string) bool {
	switch {
	case v.Type == gjson.String:
		return strings.Contains(strings.ToLower(v.Str), needle)
	case v.IsObject():
		found := false
		v.ForEach(func(k, val gjson.Result) bool {
			if opaqueKeys[k.Str] {
				return true
			}
			found = jsonContains(val, needle)
			return !found
		})
		return found
	case v.IsArray():
		found := false
		v.ForEach(func(_, val gjson.Result) bool {
			found = jsonContains(val, needle)
			return !found
		})
		return found
	}
	return false
}

// isPlainASCII reports whether s has only ASCII letters, digits and
// spaces, which JSON never escapes.
func isPlainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == ' ' || c == '-' || c == '_' || c == '.' || c == ',') {
			return false
		}
	}
	return true
}

func containsFold(b []byte, lowerNeedle string) bool {
	n := len(lowerNeedle)
	for i := 0; i+n <= len(b); i++ {
		j := 0
		for ; j < n; j++ {
			c := b[i+j]
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != lowerNeedle[j] {
				break
			}
		}
		if j == n {
			return true
		}
	}
	return false
}
