package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/valyala/fasthttp"
)

// serveAPI is the tenant API under /api: a caller reads (and cancels) only
// its own tenant's threads, authenticated with the same credential as its
// provider calls. Another tenant's thread is a 404, never a 403.
func (s *Server) serveAPI(ctx *fasthttp.RequestCtx, rest []byte) {
	ad := openAIAdapter
	if s.store == nil {
		apierr.Write(ctx, ad, apierr.New(apierr.NotFound,
			"This proxy stores nothing (no store configured)."))
		return
	}
	key, cred := clientKey(&ctx.Request)
	if cred == credNone {
		apierr.Write(ctx, ad, apierr.New(apierr.MissingAPIKey,
			"No API key was provided."))
		return
	}
	tenant := passThroughTenant(key)
	if s.clients.enabled() {
		if tenant = s.clients.tenant(key); tenant == "" {
			apierr.Write(ctx, ad, apierr.New(apierr.InvalidAPIKey,
				"The API key is not one of this proxy's client keys."))
			return
		}
	}
	parts := strings.Split(strings.Trim(string(rest), "/"), "/")
	if len(parts) < 2 || parts[0] != "threads" {
		apierr.Write(ctx, ad, apierr.New(apierr.NotFound,
			"No such API route."))
		return
	}
	if !validID([]byte(parts[1])) {
		apierr.Write(ctx, ad, apierr.New(apierr.InvalidThreadID,
			"The thread id must be 1-128 characters of [A-Za-z0-9._:-]."))
		return
	}
	k := store.Key{Tenant: tenant, Thread: parts[1]}
	method := string(ctx.Method())
	switch {
	case len(parts) == 2 && method == "GET":
		s.apiThread(ctx, k)
	case len(parts) == 4 && parts[2] == "runs" && parts[3] == "active" && method == "GET":
		s.apiActiveRun(ctx, k)
	case len(parts) == 5 && parts[2] == "runs" && parts[4] == "events" && method == "GET":
		if !validID([]byte(parts[3])) {
			apierr.Write(ctx, ad, apierr.New(apierr.InvalidRunID,
				"The run id must be 1-128 characters of [A-Za-z0-9._:-]."))
			return
		}
		s.apiEvents(ctx, k, parts[3])
	case len(parts) == 5 && parts[2] == "runs" && parts[4] == "cancel" && method == "POST":
		if !validID([]byte(parts[3])) {
			apierr.Write(ctx, ad, apierr.New(apierr.InvalidRunID,
				"The run id must be 1-128 characters of [A-Za-z0-9._:-]."))
			return
		}
		s.apiCancel(ctx, k, parts[3])
	default:
		apierr.Write(ctx, ad, apierr.New(apierr.NotFound,
			"No such API route."))
	}
}

// storeError answers a failed store read.
func (s *Server) storeError(ctx *fasthttp.RequestCtx, err error, what string) {
	if errors.Is(err, store.ErrNotFound) {
		code := apierr.ThreadNotFound
		if what == "run" {
			code = apierr.RunNotFound
		}
		apierr.Write(ctx, openAIAdapter, apierr.New(code, "No such "+what+"."))
		return
	}
	s.log.Warn("store read failed", "err", err)
	apierr.Write(ctx, openAIAdapter, apierr.Retry(apierr.StoreUnavailable, 1,
		"The conversation store is unreachable."))
}

// threadJSON is the contract's thread document. Raw fields are provider
// JSON exactly as stored.
type threadJSON struct {
	ID         string            `json:"id"`
	Tenant     string            `json:"tenant"`
	Connection string            `json:"connection"`
	Format     string            `json:"format"`
	CreatedAt  string            `json:"created_at"`
	UpdatedAt  string            `json:"updated_at"`
	Version    int64             `json:"version"`
	System     json.RawMessage   `json:"system"`
	Messages   []json.RawMessage `json:"messages"`
	Runs       []runJSON         `json:"runs"`
}

type usageJSON struct {
	InputTokens     int64 `json:"input_tokens"`
	OutputTokens    int64 `json:"output_tokens"`
	CachedTokens    int64 `json:"cached_tokens"`
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

type interruptJSON struct {
	CallID string `json:"call_id"`
	Name   string `json:"name"`
	Status string `json:"status"`
}

// runJSON is the contract's run document; every key is always present.
type runJSON struct {
	ID               string          `json:"id"`
	Status           string          `json:"status"`
	Reason           *string         `json:"reason"`
	Model            *string         `json:"model"`
	StartedAt        string          `json:"started_at"`
	FinishedAt       *string         `json:"finished_at"`
	Usage            *usageJSON      `json:"usage"`
	Error            json.RawMessage `json:"error"`
	Interrupts       []interruptJSON `json:"interrupts"`
	InterruptedCalls json.RawMessage `json:"interrupted_calls"`
	Repairs          json.RawMessage `json:"repairs"`
	Restored         json.RawMessage `json:"restored"`
	SessionID        *string         `json:"session_id"`
	ResumedBy        *string         `json:"resumed_by"`
	Partial          *string         `json:"partial"`
}

func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// rawOr returns b when it is valid JSON, b as a JSON string when it is not,
// and def when it is empty.
func rawOr(b []byte, def string) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage(def)
	}
	if jsonscan.Valid(b) {
		return json.RawMessage(b)
	}
	q, _ := json.Marshal(string(b))
	return q
}

func toRunJSON(r store.Run) runJSON {
	out := runJSON{
		ID: r.ID, Status: string(r.Status), Reason: nullable(r.Reason), Model: nullable(r.Model),
		StartedAt: timestamp(r.StartedAt), Error: rawOr(r.Error, "null"),
		Interrupts:       []interruptJSON{},
		InterruptedCalls: rawOr(r.InterruptedCalls, "[]"),
		Repairs:          rawOr(r.Repairs, "[]"),
		Restored:         rawOr(r.Restored, "[]"),
		SessionID:        r.SessionID, ResumedBy: nullable(r.ResumedBy),
	}
	if !r.FinishedAt.IsZero() {
		f := timestamp(r.FinishedAt)
		out.FinishedAt = &f
	}
	if r.Usage != nil {
		out.Usage = &usageJSON{r.Usage.InputTokens, r.Usage.OutputTokens, r.Usage.CachedTokens, r.Usage.ReasoningTokens}
	}
	for _, in := range r.Interrupts {
		out.Interrupts = append(out.Interrupts, interruptJSON{in.CallID, in.Name, string(in.Status)})
	}
	if r.Partial != nil {
		p := string(r.Partial)
		out.Partial = &p
	}
	return out
}

func toThreadJSON(th store.Thread, runs []store.Run) threadJSON {
	out := threadJSON{
		ID: th.Thread, Tenant: th.Tenant, Connection: th.Connection, Format: th.Format,
		CreatedAt: timestamp(th.CreatedAt), UpdatedAt: timestamp(th.UpdatedAt), Version: th.Version,
		System: rawOr(th.System, "null"), Messages: make([]json.RawMessage, len(th.Messages)), Runs: []runJSON{},
	}
	for i, m := range th.Messages {
		out.Messages[i] = m
	}
	for _, r := range runs {
		out.Runs = append(out.Runs, toRunJSON(r))
	}
	return out
}

// writeJSON answers with v as JSON. HTML escaping is off: stored provider
// JSON must come back byte for byte, "&" included.
func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if err != nil {
		apierr.Write(ctx, openAIAdapter, apierr.New(apierr.InternalError,
			"The document could not be encoded."))
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func (s *Server) apiThread(ctx *fasthttp.RequestCtx, k store.Key) {
	rctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
	defer cancel()
	th, err := s.store.LoadThread(rctx, k)
	if err != nil {
		s.storeError(ctx, err, "thread")
		return
	}
	runs, err := s.store.ListRuns(rctx, k)
	if err != nil {
		s.storeError(ctx, err, "thread")
		return
	}
	writeThread(ctx, th, runs)
}

// writeThread answers with the thread document (appendThreadDoc splices
// the stored messages in byte for byte).
func writeThread(ctx *fasthttp.RequestCtx, th store.Thread, runs []store.Run) {
	ctx.SetStatusCode(200)
	ctx.SetContentType("application/json")
	ctx.SetBody(appendThreadDoc(nil, th, runs, false))
}

func (s *Server) apiActiveRun(ctx *fasthttp.RequestCtx, k store.Key) {
	rctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
	defer cancel()
	runs, err := s.store.ListRuns(rctx, k)
	if err != nil {
		s.storeError(ctx, err, "thread")
		return
	}
	for i := len(runs) - 1; i >= 0; i-- {
		if runs[i].Status == store.Running {
			writeJSON(ctx, 200, toRunJSON(runs[i]))
			return
		}
	}
	apierr.Write(ctx, openAIAdapter, apierr.New(apierr.RunNotFound,
		"The thread has no running run."))
}

func (s *Server) apiCancel(ctx *fasthttp.RequestCtx, k store.Key, runID string) {
	rctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
	defer cancel()
	run, err := s.store.RequestCancel(rctx, k, runID)
	if err != nil {
		s.storeError(ctx, err, "run")
		return
	}
	// A run owned by this replica stops at once; another replica's run
	// stops when its owner next renews the lease.
	s.cancelLocal(k, runID)
	writeJSON(ctx, 202, toRunJSON(run))
}

// apiEvents replays a run's events from Last-Event-ID (or ?after=N), each
// preceded by "id: <n>", then follows the run live until it ends.
func (s *Server) apiEvents(ctx *fasthttp.RequestCtx, k store.Key, runID string) {
	after := int64(0)
	if v := ctx.Request.Header.Peek("Last-Event-ID"); len(v) > 0 {
		after, _ = strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
	} else if v := ctx.QueryArgs().Peek("after"); len(v) > 0 {
		after, _ = strconv.ParseInt(string(v), 10, 64)
	}
	if after < 0 {
		after = 0
	}
	rctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
	run, err := s.store.GetRun(rctx, k, runID)
	cancel()
	if err != nil {
		s.storeError(ctx, err, "run")
		return
	}
	_ = run
	ctx.SetStatusCode(200)
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	// A follower of a silent run gets the head now, not with the first
	// event or heartbeat.
	ctx.Response.ImmediateHeaderFlush = true
	conn := ctx.Conn()
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		s.streamEvents(w, conn, k, runID, after, true, nil)
	})
}
