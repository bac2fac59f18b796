package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/chronicle-proxy/chronicle/proxy/internal/threaddoc"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// serveAdmin is the audit API under /admin. Every route needs
// `Authorization: Bearer <admin.token>`; without a configured token the API
// is closed (401 for everyone). Errors use the OpenAI shape.
//
//	GET    /admin/threads                       list (filters, cursor)
//	GET    /admin/threads/{tenant}/{thread}     the thread document
//	GET    /admin/threads/{tenant}/{thread}/export  one JSONL line
//	DELETE /admin/threads/{tenant}/{thread}     the thread and all it owns
//	GET    /admin/export                        JSONL of every thread that passes the filters, streamed
//	GET    /admin/usage                         usage totals by tenant, connection, model or day
//
// Path segments are URL-unescaped, so a tenant with '/' or '%' travels as
// %2F / %25.
func (s *Server) serveAdmin(ctx *fasthttp.RequestCtx, rest []byte) {
	if !s.adminAuthorized(ctx) {
		return
	}
	if s.store == nil {
		apierr.Write(ctx, openAIAdapter, apierr.New(apierr.NotFound,
			"This proxy stores nothing (no store configured)."))
		return
	}
	var parts []string
	for _, p := range strings.Split(strings.Trim(string(rest), "/"), "/") {
		u, err := url.PathUnescape(p)
		if err != nil {
			adminBadRequest(ctx, "bad_request", "A path segment is not valid URL escaping.")
			return
		}
		parts = append(parts, u)
	}
	a := NewAudit(s.store)
	method := string(ctx.Method())
	switch {
	case len(parts) == 1 && parts[0] == "threads" && method == "GET":
		s.adminList(ctx, a)
	case len(parts) == 1 && parts[0] == "export" && method == "GET":
		s.adminExport(ctx, a)
	case len(parts) == 1 && parts[0] == "usage" && method == "GET":
		s.adminUsage(ctx, a)
	case len(parts) == 3 && parts[0] == "threads" && method == "GET":
		s.adminThread(ctx, a, store.Key{Tenant: parts[1], Thread: parts[2]})
	case len(parts) == 3 && parts[0] == "threads" && method == "DELETE":
		s.adminDelete(ctx, a, store.Key{Tenant: parts[1], Thread: parts[2]})
	case len(parts) == 4 && parts[0] == "threads" && parts[3] == "export" && method == "GET":
		s.adminExportThread(ctx, a, store.Key{Tenant: parts[1], Thread: parts[2]})
	case len(parts) == 5 && parts[0] == "threads" && parts[3] == "runs" && method == "GET":
		s.adminRun(ctx, store.Key{Tenant: parts[1], Thread: parts[2]}, parts[4])
	default:
		apierr.Write(ctx, openAIAdapter, apierr.New(apierr.NotFound,
			"No such admin route."))
	}
}

// adminRun answers one run with what only a single-run read carries: the
// stored non-stream answer ("response") and, where the connection keeps it
// (audit.upstream_body), the body sent upstream ("upstream_body").
func (s *Server) adminRun(ctx *fasthttp.RequestCtx, k store.Key, runID string) {
	rctx, cancel := s.adminCtx(1)
	defer cancel()
	run, err := s.store.GetRun(rctx, k, runID)
	if err != nil {
		s.storeError(ctx, err, "run")
		return
	}
	doc := struct {
		threaddoc.Run
		Response     json.RawMessage `json:"response"`
		UpstreamBody json.RawMessage `json:"upstream_body"`
	}{Run: threaddoc.ToRun(run), Response: threaddoc.RawOr(run.Response, "null"), UpstreamBody: threaddoc.RawOr(run.UpstreamBody, "null")}
	writeJSON(ctx, 200, doc)
}

// adminAuthorized checks the admin bearer token in constant time (both
// sides hashed first, so not even the length leaks) and answers 401 when
// it is missing or wrong, or when no token is configured.
func (s *Server) adminAuthorized(ctx *fasthttp.RequestCtx) bool {
	want := s.cfg.Admin.Token.Reveal()
	v := ctx.Request.Header.Peek("Authorization")
	var got []byte
	if len(v) > 7 && bytes.EqualFold(v[:7], []byte("Bearer ")) {
		got = bytes.TrimSpace(v[7:])
	}
	if want != "" && len(got) > 0 {
		a, b := sha256.Sum256(got), sha256.Sum256([]byte(want))
		if subtle.ConstantTimeCompare(a[:], b[:]) == 1 {
			return true
		}
	}
	msg := "The admin API needs Authorization: Bearer <admin.token>."
	switch {
	case want == "":
		msg = "The admin API is disabled: no admin.token is configured."
	case len(got) > 0:
		msg = "The admin token is not valid."
	}
	apierr.Write(ctx, openAIAdapter, apierr.New(apierr.InvalidAdminToken,
		msg))
	ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="chronicle admin"`)
	return false
}

func adminBadRequest(ctx *fasthttp.RequestCtx, code apierr.Code, msg string) {
	apierr.Write(ctx, openAIAdapter, apierr.New(code, msg))
}

// auditError answers a failed audit call.
func (s *Server) auditError(ctx *fasthttp.RequestCtx, err error) {
	switch {
	case errors.Is(err, ErrBadCursor), errors.Is(err, ErrBadFilter):
		badInput(ctx, err)
	case errors.Is(err, ErrBusy):
		apierr.Write(ctx, openAIAdapter, apierr.Retry(apierr.ThreadBusy, 1,
			"A run is in flight on this thread; cancel it or retry when it ends."))
	default:
		s.storeError(ctx, err, "thread")
	}
}

// auditQuery reads the listing filters from the query string.
func auditQuery(ctx *fasthttp.RequestCtx) (AuditQuery, bool) {
	args := ctx.QueryArgs()
	q := AuditQuery{
		Tenant: string(args.Peek("tenant")), Connection: string(args.Peek("connection")),
		Model: string(args.Peek("model")), Status: store.Status(args.Peek("status")),
		Text: string(args.Peek("q")), Cursor: string(args.Peek("cursor")),
	}
	var ok bool
	if q.Since, ok = queryTime(ctx, "since"); !ok {
		return q, false
	}
	if q.Until, ok = queryTime(ctx, "until"); !ok {
		return q, false
	}
	if v := args.Peek("limit"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 {
			adminBadRequest(ctx, apierr.InvalidFilter, "limit must be a positive integer (at most 500).")
			return q, false
		}
		q.Limit = n
	}
	if err := q.Check(); err != nil {
		badInput(ctx, err)
		return q, false
	}
	return q, true
}

// badInput answers an ErrBadCursor or ErrBadFilter. The message names the
// filter and the value the caller sent; no secret can be in it.
func badInput(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, ErrBadCursor) {
		adminBadRequest(ctx, apierr.InvalidCursor, "The cursor is not one this API handed out.")
		return
	}
	adminBadRequest(ctx, "invalid_filter", strings.TrimPrefix(err.Error(), ErrBadFilter.Error()+": ")+".")
}

func queryTime(ctx *fasthttp.RequestCtx, name string) (time.Time, bool) {
	v := ctx.QueryArgs().Peek(name)
	if len(v) == 0 {
		return time.Time{}, true
	}
	t, err := time.Parse(time.RFC3339Nano, string(v))
	if err != nil {
		adminBadRequest(ctx, "invalid_filter", name+" must be an RFC 3339 time, such as 2026-01-02T15:04:05Z.")
		return t, false
	}
	return t, true
}

// adminCtx bounds one admin call. Listing with text search and usage walk
// many threads, so they get longer than one store call on the request path.
func (s *Server) adminCtx(scale int) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Duration(scale)*s.storeTimeout)
}

func (s *Server) adminList(ctx *fasthttp.RequestCtx, a *Audit) {
	q, ok := auditQuery(ctx)
	if !ok {
		return
	}
	rctx, cancel := s.adminCtx(12)
	defer cancel()
	page, err := a.List(rctx, q)
	if err != nil {
		s.auditError(ctx, err)
		return
	}
	writeJSON(ctx, 200, page)
}

func (s *Server) adminThread(ctx *fasthttp.RequestCtx, a *Audit, k store.Key) {
	rctx, cancel := s.adminCtx(1)
	defer cancel()
	doc, err := a.Thread(rctx, k)
	if err != nil {
		s.auditError(ctx, err)
		return
	}
	ctx.SetStatusCode(200)
	ctx.SetContentType("application/json")
	ctx.SetBody(doc)
}

func (s *Server) adminExportThread(ctx *fasthttp.RequestCtx, a *Audit, k store.Key) {
	rctx, cancel := s.adminCtx(1)
	defer cancel()
	var buf bytes.Buffer
	if err := a.ExportThread(rctx, k, &buf); err != nil {
		s.auditError(ctx, err)
		return
	}
	ctx.SetStatusCode(200)
	ctx.SetContentType("application/x-ndjson")
	ctx.SetBody(buf.Bytes())
}

func (s *Server) adminDelete(ctx *fasthttp.RequestCtx, a *Audit, k store.Key) {
	rctx, cancel := s.adminCtx(1)
	defer cancel()
	runs, err := a.Delete(rctx, k)
	if err != nil {
		s.auditError(ctx, err)
		return
	}
	s.log.Info("thread deleted by admin", "tenant", k.Tenant, "thread", k.Thread, "runs", runs)
	writeJSON(ctx, 200, map[string]any{"tenant": k.Tenant, "id": k.Thread, "deleted": true, "runs": runs})
}

// adminExport streams every thread that passes the filters as JSONL, a
// store page at a time, flushing after each page: memory holds one page of
// summaries and one thread, whatever the export's size. The store is
// checked before the head goes out; an error after it ends the stream with
// one last line {"error":{...}} in the OpenAI shape.
func (s *Server) adminExport(ctx *fasthttp.RequestCtx, a *Audit) {
	q, ok := auditQuery(ctx)
	if !ok {
		return
	}
	pctx, cancel := s.adminCtx(1)
	err := s.store.Ping(pctx)
	cancel()
	if err != nil {
		s.auditError(ctx, err)
		return
	}
	ctx.SetStatusCode(200)
	ctx.SetContentType("application/x-ndjson")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		ectx, cancel := context.WithCancel(context.Background())
		defer cancel()
		n, err := a.Export(ectx, q, w, nil)
		if err != nil {
			s.log.Warn("admin export ended early", "threads", n, "err", err)
			_, _ = w.Write(apierr.Body(openAIAdapter, apierr.New(apierr.ExportFailed, "The export ended early: the store could not be read.")))
			_, _ = w.Write([]byte("\n"))
			_ = w.Flush()
		}
	})
}

func (s *Server) adminUsage(ctx *fasthttp.RequestCtx, a *Audit) {
	args := ctx.QueryArgs()
	q := UsageQuery{GroupBy: string(args.Peek("group_by")), Tenant: string(args.Peek("tenant")), Connection: string(args.Peek("connection"))}
	var ok bool
	if q.Since, ok = queryTime(ctx, "since"); !ok {
		return
	}
	if q.Until, ok = queryTime(ctx, "until"); !ok {
		return
	}
	rctx, cancel := s.adminCtx(12)
	defer cancel()
	rep, err := a.Usage(rctx, q)
	if err != nil {
		s.auditError(ctx, err)
		return
	}
	writeJSON(ctx, 200, rep)
}

//go:embed ui/index.html ui/app.js ui/style.css
var uiFS embed.FS

// uiAssets are the page's files: name → content type.
var uiAssets = map[string]string{
	"index.html": "text/html; charset=utf-8",
	"app.js":     "text/javascript; charset=utf-8",
	"style.css":  "text/css; charset=utf-8",
}

// serveUI serves the audit web page under /ui. The static files are
// public; the page asks for the admin token and sends it as a Bearer
// token on its own calls to /admin, which is where the data is.
func (s *Server) serveUI(ctx *fasthttp.RequestCtx, rest []byte) {
	m := string(ctx.Method())
	if m != "GET" && m != "HEAD" {
		apierr.Write(ctx, openAIAdapter, apierr.New(apierr.MethodNotAllowed,
			"The UI is read with GET."))
		return
	}
	name := strings.Trim(string(rest), "/")
	if name == "" {
		name = "index.html"
	}
	ct, ok := uiAssets[name]
	if !ok {
		apierr.Write(ctx, openAIAdapter, apierr.New(apierr.NotFound,
			"No such UI file."))
		return
	}
	b, err := uiFS.ReadFile("ui/" + name)
	if err != nil {
		apierr.Write(ctx, openAIAdapter, apierr.New(apierr.NotFound,
			"No such UI file."))
		return
	}
	h := &ctx.Response.Header
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	ctx.SetStatusCode(200)
	ctx.SetContentType(ct)
	ctx.SetBody(b)
}

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
}

// AuditPage is one page of the listing, newest-updated first. NextCursor
// is nil at the end.
type AuditPage struct {
	Threads    []ThreadEntry `json:"threads"`
	NextCursor *string       `json:"next_cursor"`
}

func toEntry(s store.ThreadSummary) ThreadEntry {
	u := s.Usage
	return ThreadEntry{
		Tenant: s.Key.Tenant, ID: s.Key.Thread, Connection: s.Connection, Format: s.Format, Model: s.Model,
		CreatedAt: threaddoc.Timestamp(s.CreatedAt), UpdatedAt: threaddoc.Timestamp(s.UpdatedAt), Runs: s.Runs, LastStatus: string(s.LastStatus),
		Usage: UsageJSON{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CachedTokens: u.CachedTokens, ReasoningTokens: u.ReasoningTokens},
	}
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

// storeErr keeps store.ErrInvalid recognisable as bad input.
func storeErr(err error) error {
	if errors.Is(err, store.ErrInvalid) {
		return fmt.Errorf("%w: %w", ErrBadFilter, err)
	}
	return err
}

// Thread returns the thread document (the tenant API's thread JSON) of k,
// or an error wrapping store.ErrNotFound.
func (a *Audit) Thread(ctx context.Context, k store.Key) ([]byte, error) {
	th, runs, err := a.load(ctx, k)
	if err != nil {
		return nil, err
	}
	return threaddoc.Append(nil, th, runs, false), nil
}

func (a *Audit) load(ctx context.Context, k store.Key) (store.Thread, []store.Run, error) {
	if err := k.Validate(); err != nil {
		return store.Thread{}, nil, fmt.Errorf("%w: %w", ErrBadFilter, err)
	}
	th, err := a.st.LoadThread(ctx, k)
	if err != nil {
		return th, nil, err
	}
	runs, err := a.st.ListRuns(ctx, k)
	if err != nil {
		return th, nil, err
	}
	return th, runs, nil
}

// flusher is a writer that can push what it buffered (bufio.Writer).
type flusher interface{ Flush() error }

// Export writes every thread that passes q (Cursor and Limit ignored) to w
// as JSONL, one thread document per line, newest-updated first. It walks
// the index a page at a time and holds one page of summaries and one thread
// in memory; after each page it flushes w when w can. progress, when not
// nil, is called with the count written so far after every thread. A
// thread deleted while the export runs is skipped.
func (a *Audit) Export(ctx context.Context, q AuditQuery, w io.Writer, progress func(done int)) (int, error) {
	q.Cursor, q.Limit = "", 0
	if err := q.Check(); err != nil {
		return 0, err
	}
	n := 0
	var line []byte
	fl, _ := w.(flusher)
	needle := q.Text
	q.Text = "" // scan below loads every thread anyway: search it here
	lower := strings.ToLower(needle)
	var cursor string
	for {
		page, err := a.st.ListThreads(ctx, q.storeQuery(cursor, scanPage))
		if err != nil {
			return n, storeErr(err)
		}
		for _, s := range page.Threads {
			th, runs, err := a.load(ctx, s.Key)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return n, err
			}
			if lower != "" && !threadContains(th, lower) {
				continue
			}
			line = threaddoc.Append(line[:0], th, runs, true)
			line = append(line, '\n')
			if _, err := w.Write(line); err != nil {
				return n, err
			}
			n++
			if progress != nil {
				progress(n)
			}
		}
		if fl != nil {
			if err := fl.Flush(); err != nil {
				return n, err
			}
		}
		if page.NextCursor == "" {
			return n, nil
		}
		cursor = page.NextCursor
		if err := ctx.Err(); err != nil {
			return n, err
		}
	}
}

// ExportThread writes one thread as a JSONL line.
func (a *Audit) ExportThread(ctx context.Context, k store.Key, w io.Writer) error {
	th, runs, err := a.load(ctx, k)
	if err != nil {
		return err
	}
	_, err = w.Write(append(threaddoc.Append(nil, th, runs, true), '\n'))
	return err
}

// Delete removes a thread and everything it owns (messages, runs, event
// logs, interrupts, index entries). A thread with a running run is
// refused with ErrBusy; a missing one wraps store.ErrNotFound.
func (a *Audit) Delete(ctx context.Context, k store.Key) (runs int, err error) {
	if err := k.Validate(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrBadFilter, err)
	}
	if _, err := a.st.LoadThread(ctx, k); err != nil {
		return 0, err
	}
	rs, err := a.st.ListRuns(ctx, k)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return 0, err
	}
	for _, r := range rs {
		if r.Status == store.Running {
			return 0, ErrBusy
		}
	}
	return len(rs), a.st.DeleteThread(ctx, k)
}

// ErrBusy: the thread has a running run.
var ErrBusy = errors.New("proxy: thread has a running run")

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
