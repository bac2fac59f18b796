// Package threaddoc owns the JSON documents of a stored thread and of its
// runs, the contract that the tenant API (/api) and the admin API (/admin)
// both answer with, and how they are written: stored provider JSON is
// spliced in byte for byte, never re-encoded, and HTML escaping is off.
package threaddoc

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/valyala/fasthttp"
)

// Thread is the contract's thread document. Raw fields are provider JSON
// exactly as stored.
type Thread struct {
	ID         string `json:"id"`
	Tenant     string `json:"tenant"`
	Connection string `json:"connection"`
	Format     string `json:"format"`
	CreatedAt  string `json:"created_at"`
	UpdatedAt  string `json:"updated_at"`
	Version    int64  `json:"version"`
	// Parent and ForkPoint: a fork's parent thread and where it was
	// taken; null for a thread that is no fork.
	Parent    *string           `json:"parent"`
	ForkPoint *ForkPoint        `json:"fork_point"`
	System    json.RawMessage   `json:"system"`
	Messages  []json.RawMessage `json:"messages"`
	Runs      []Run             `json:"runs"`
}

// Usage is a token usage total.
type Usage struct {
	InputTokens     int64 `json:"input_tokens"`
	OutputTokens    int64 `json:"output_tokens"`
	CachedTokens    int64 `json:"cached_tokens"`
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

// Interrupt is one tool call a run parked on.
type Interrupt struct {
	CallID string `json:"call_id"`
	Name   string `json:"name"`
	Status string `json:"status"`
}

// Run is the contract's run document; every key is always present.
type Run struct {
	ID               string          `json:"id"`
	Status           string          `json:"status"`
	Reason           *string         `json:"reason"`
	Model            *string         `json:"model"`
	StartedAt        string          `json:"started_at"`
	FinishedAt       *string         `json:"finished_at"`
	Usage            *Usage          `json:"usage"`
	Error            json.RawMessage `json:"error"`
	Interrupts       []Interrupt     `json:"interrupts"`
	InterruptedCalls json.RawMessage `json:"interrupted_calls"`
	Repairs          json.RawMessage `json:"repairs"`
	Restored         json.RawMessage `json:"restored"`
	SessionID        *string         `json:"session_id"`
	ResumedBy        *string         `json:"resumed_by"`
	Partial          *string         `json:"partial"`
	// Redactions: what the connection's redaction masked before the
	// run's bodies were stored (path or pattern and count, never the
	// text); [] when nothing was.
	Redactions json.RawMessage `json:"redactions"`
}

// Timestamp is t as the documents write times: UTC, milliseconds.
func Timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// RawOr returns b when it is valid JSON, b as a JSON string when it is not,
// and def when it is empty.
func RawOr(b []byte, def string) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage(def)
	}
	if jsonscan.Valid(b) {
		return json.RawMessage(b)
	}
	q, _ := json.Marshal(string(b))
	return q
}

// ToRun is r's run document.
func ToRun(r store.Run) Run {
	out := Run{
		ID: r.ID, Status: string(r.Status), Reason: nullable(r.Reason), Model: nullable(r.Model),
		StartedAt: Timestamp(r.StartedAt), Error: RawOr(r.Error, "null"),
		Interrupts:       []Interrupt{},
		InterruptedCalls: RawOr(r.InterruptedCalls, "[]"),
		Repairs:          RawOr(r.Repairs, "[]"),
		Restored:         RawOr(r.Restored, "[]"),
		SessionID:        r.SessionID, ResumedBy: nullable(r.ResumedBy),
		Redactions: RawOr(r.Redactions, "[]"),
	}
	if !r.FinishedAt.IsZero() {
		f := Timestamp(r.FinishedAt)
		out.FinishedAt = &f
	}
	if r.Usage != nil {
		out.Usage = &Usage{r.Usage.InputTokens, r.Usage.OutputTokens, r.Usage.CachedTokens, r.Usage.ReasoningTokens}
	}
	for _, in := range r.Interrupts {
		out.Interrupts = append(out.Interrupts, Interrupt{in.CallID, in.Name, string(in.Status)})
	}
	if r.Partial != nil {
		p := string(r.Partial)
		out.Partial = &p
	}
	return out
}

// ForkOf is a fork point's parent and fork_point (both nil for a thread
// that is no fork).
func ForkOf(f store.ForkPoint) (*string, *ForkPoint) {
	if f.Parent == "" {
		return nil, nil
	}
	parent := f.Parent
	return &parent, &ForkPoint{AtMessage: f.At, AtRun: nullable(f.Run)}
}

func toThread(th store.Thread, runs []store.Run) Thread {
	out := Thread{
		ID: th.Thread, Tenant: th.Tenant, Connection: th.Connection, Format: th.Format,
		CreatedAt: Timestamp(th.CreatedAt), UpdatedAt: Timestamp(th.UpdatedAt), Version: th.Version,
		System: RawOr(th.System, "null"), Messages: make([]json.RawMessage, len(th.Messages)), Runs: []Run{},
	}
	for i, m := range th.Messages {
		out.Messages[i] = m
	}
	out.Parent, out.ForkPoint = ForkOf(th.Fork)
	for _, r := range runs {
		out.Runs = append(out.Runs, ToRun(r))
	}
	return out
}

// Append appends the thread document to dst. Stored messages are spliced
// in as they are (encoding/json would re-encode them); with oneLine a
// message holding raw newlines is compacted so the document fits one JSONL
// line (insignificant whitespace is all that changes).
func Append(dst []byte, th store.Thread, runs []store.Run, oneLine bool) []byte {
	doc := toThread(th, nil)
	doc.System, doc.Messages, doc.Runs = json.RawMessage(`null`), nil, nil
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(doc)
	head := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	cut := bytes.LastIndex(head, []byte(`"system":null`))
	dst = append(dst, head[:cut]...)
	dst = append(dst, `"system":`...)
	if len(th.System) > 0 {
		dst = appendRaw(dst, th.System, oneLine)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"messages":[`...)
	for i, m := range th.Messages {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendRaw(dst, m, oneLine)
	}
	runsDoc := make([]Run, 0, len(runs))
	for _, r := range runs {
		runsDoc = append(runsDoc, ToRun(r))
	}
	buf.Reset()
	_ = enc.Encode(runsDoc)
	dst = append(dst, `],"runs":`...)
	dst = append(dst, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
	return append(dst, '}')
}

func appendRaw(dst, raw []byte, oneLine bool) []byte {
	if oneLine && bytes.ContainsAny(raw, "\r\n") {
		var b bytes.Buffer
		if json.Compact(&b, raw) == nil {
			return append(dst, b.Bytes()...)
		}
	}
	return append(dst, raw...)
}

// WriteThread answers with the thread document (Append splices the stored
// messages in byte for byte).
func WriteThread(ctx *fasthttp.RequestCtx, th store.Thread, runs []store.Run) {
	WriteThreadStatus(ctx, 200, th, runs)
}

// WriteThreadStatus is WriteThread with another status (201 for a fork).
func WriteThreadStatus(ctx *fasthttp.RequestCtx, status int, th store.Thread, runs []store.Run) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(Append(nil, th, runs, false))
}

// WriteJSON answers with v as JSON. HTML escaping is off: stored provider
// JSON must come back byte for byte, "&" included. A v that cannot be
// encoded is answered with internal_error in shape.
func WriteJSON(ctx *fasthttp.RequestCtx, shape apierr.Shape, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if err != nil {
		apierr.Write(ctx, shape, apierr.New(apierr.InternalError,
			"The document could not be encoded."))
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}
