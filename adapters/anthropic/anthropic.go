package anthropic

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
)

// Adapter is the adapter of the Anthropic Messages API.
type Adapter struct {
	// SessionHeaders are headers set to the session id; none by default
	// (Anthropic caches by prefix and has no session field).
	SessionHeaders []string
}

// New returns the Anthropic Messages adapter.
func New() *Adapter { return &Adapter{} }

var (
	_ adapters.Adapter   = (*Adapter)(nil)
	_ adapters.KeyPlacer = (*Adapter)(nil)
)

// Format implements adapters.Adapter.
func (a *Adapter) Format() adapters.Format { return adapters.FormatAnthropic }

// bearerVersion is the first API version whose SDKs send the key as a
// Bearer token (wire-formats §6.1).
const bearerVersion = "2026-10-21"

// KeyHeader implements adapters.KeyPlacer: x-api-key, the header every
// API version takes, unless the client speaks bearerVersion or later,
// whose SDKs send keys as Bearer tokens (the pool key then goes the same
// way the client's own would have).
func (a *Adapter) KeyHeader(req adapters.Headers) (name, prefix string) {
	if v := req.Peek("Anthropic-Version"); len(v) == len(bearerVersion) && string(v) >= bearerVersion {
		return "Authorization", "Bearer "
	}
	return "X-Api-Key", ""
}

// Classify implements adapters.Adapter: POST …/messages (…/v1/messages;
// the query may hold beta=true) is a turn, streaming with "stream": true.
// count_tokens, batches, models and everything else pass through.
func (a *Adapter) Classify(method, path, query string, body []byte) adapters.Op {
	return adapters.ClassifyPost(method, path, "/messages", body)
}

// Messages implements adapters.Adapter: the messages array.
func (a *Adapter) Messages(body []byte) ([]byte, bool) {
	msgs, _, ok := a.MessagesKnown(body, nil)
	return msgs, ok
}

// MessagesKnown implements adapters.Adapter.
func (a *Adapter) MessagesKnown(body []byte, known [][]byte) ([]byte, adapters.Prefix, bool) {
	return adapters.KnownArray(body, "messages", known)
}

// SetMessages implements adapters.Adapter.
func (a *Adapter) SetMessages(body, messages []byte) ([]byte, error) {
	return adapters.SetRaw(body, "messages", messages)
}

// System implements adapters.Adapter: the raw top-level system (a string
// or an array of text blocks), nil when absent.
func (a *Adapter) System(body []byte) []byte {
	r := rawjson.Get(body, "system")
	if !r.Exists() || r.Type == gjson.Null {
		return nil
	}
	return rawjson.RawSlice(body, r)
}

// SetSystem implements adapters.Adapter; nil deletes system.
func (a *Adapter) SetSystem(body, system []byte) ([]byte, error) {
	if system == nil {
		if !rawjson.Get(body, "system").Exists() {
			return body, nil
		}
		out, err := sjson.DeleteBytes(body, "system")
		if err != nil {
			return nil, fmt.Errorf("delete system: %w", err)
		}
		return out, nil
	}
	return adapters.SetRaw(body, "system", system)
}

// WalkMessages implements adapters.Adapter. Calls are tool_use blocks,
// results tool_result blocks (by tool_use_id).
func (a *Adapter) WalkMessages(messages []byte, fn func(adapters.Message) bool) error {
	return adapters.WalkElements(messages, "messages", element, fn)
}

// element reads one message for WalkMessages.
//
//go:noinline
func element(raw []byte, i int, calls []adapters.ToolCall, results []adapters.ToolResult) adapters.Message {
	msg := rawjson.Str(raw)
	empty := true
	content, _ := rawjson.Member(msg, "content")
	switch {
	case rawjson.IsString(content):
		empty = content == `""`
	default:
		rawjson.EachElement(content, func(b string) bool {
			typ := rawjson.String(rawjson.MemberRaw(b, `"type"`))
			switch typ {
			case "tool_use":
				calls = append(calls, adapters.ToolCall{ID: rawjson.String(rawjson.MemberRaw(b, `"id"`)), Name: rawjson.String(rawjson.MemberRaw(b, `"name"`))})
			case "tool_result":
				results = append(results, adapters.ToolResult{CallID: rawjson.String(rawjson.MemberRaw(b, `"tool_use_id"`))})
			case "text":
				if t := rawjson.MemberRaw(b, `"text"`); rawjson.IsString(t) && t != `""` {
					empty = false
				}
			}
			return true
		})
	}
	role, _ := rawjson.Member(msg, "role")
	return adapters.Message{Index: i, Raw: raw, Role: rawjson.Role(gjson.Parse(role)), Calls: calls, Results: results, EmptyText: empty}
}

// PrepareUpstream implements adapters.Adapter: Anthropic reports usage in
// every stream and caches by prefix, so the body goes as it is; only the
// configured session headers apply.
func (a *Adapter) PrepareUpstream(body []byte, p adapters.Prepare) (adapters.Upstream, error) {
	up := adapters.Upstream{Body: body}
	if p.SessionID != "" && len(a.SessionHeaders) > 0 {
		for _, h := range a.SessionHeaders {
			up.Headers = append(up.Headers, adapters.Header{Name: h, Value: p.SessionID})
		}
		up.SessionID = p.SessionID
	}
	return up, nil
}

// StripAddedUsage implements adapters.Adapter; chronicle never adds any.
func (a *Adapter) StripAddedUsage(event []byte) ([]byte, bool) { return event, false }

// ErrorType is Anthropic's error type for an HTTP status (wire-formats §6.8).
func ErrorType(status int) string {
	switch status {
	case 400, 405, 422:
		return "invalid_request_error"
	case 409:
		return "conflict_error"
	case 401:
		return "authentication_error"
	case 402:
		return "billing_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 408, 504:
		return "timeout_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// ErrorBody implements adapters.Adapter: Anthropic's envelope, with
// chronicle's code beside the type (the SDKs read type and message and
// keep the rest).
func (a *Adapter) ErrorBody(status int, code, message string) []byte {
	b := make([]byte, 0, 96+len(message)+len(code))
	b = append(b, `{"type":"error","error":{"type":`...)
	b = rawjson.AppendString(b, ErrorType(status))
	b = append(b, `,"message":`...)
	b = rawjson.AppendString(b, message)
	b = append(b, `,"code":`...)
	b = rawjson.AppendString(b, code)
	return append(b, `}}`...)
}

// StreamErrorEvent implements adapters.Adapter: an "event: error" event,
// as Anthropic ends a stream that fails (the SDKs route by the event line).
func (a *Adapter) StreamErrorEvent(status int, code, message string) []byte {
	b := append([]byte("event: error\ndata: "), a.ErrorBody(status, code, message)...)
	return append(b, "\n\n"...)
}

// ShapeProblem implements adapters.Adapter.
func (a *Adapter) ShapeProblem(body []byte) string {
	return adapters.HistoryShapeProblem(body, "messages", `The request body must be a JSON object with a "messages" array.`)
}

// missingModel is the API's answer to a Messages request without a model.
var missingModel = []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"model: Field required"}}`)

// MissingModel implements adapters.Adapter: Anthropic requires the model.
func (a *Adapter) MissingModel(model string) (int, []byte, bool) {
	if model != "" {
		return 0, nil, false
	}
	return 400, missingModel, true
}

// MessageText implements adapters.Adapter: the text blocks' text.
func (a *Adapter) MessageText(msg []byte) string {
	c := gjson.GetBytes(msg, "content")
	if c.Type == gjson.String {
		return c.Str
	}
	var sb strings.Builder
	c.ForEach(func(_, b gjson.Result) bool {
		if b.Get("type").Str == "text" {
			sb.WriteString(b.Get("text").Str)
		}
		return true
	})
	return sb.String()
}

// ReplyMessages implements adapters.Adapter: the reply is one message.
func (a *Adapter) ReplyMessages(reply []byte) [][]byte { return [][]byte{reply} }

// ParseResponse implements adapters.Adapter for a Messages body: the
// message is {"role":"assistant","content":CONTENT}, the content array
// byte for byte as the API sent it.
func (a *Adapter) ParseResponse(body []byte) (adapters.Turn, error) {
	if !jsonscan.Valid(body) {
		return adapters.Turn{}, fmt.Errorf("parse response: %w", adapters.ErrInvalidJSON)
	}
	root := gjson.Parse(rawjson.Str(body))
	if root.Get("type").Str == "error" {
		e := root.Get("error")
		return adapters.Turn{Finish: adapters.FinishError, Terminal: true, Error: []byte(e.Raw)}, nil
	}
	content := root.Get("content")
	if !content.IsArray() {
		return adapters.Turn{}, fmt.Errorf("parse response: %w", adapters.ErrNoAnswer)
	}
	t := adapters.Turn{Terminal: true, Model: adapters.ResponseModel(root.Get("model").Raw)}
	t.Message = make([]byte, 0, len(content.Raw)+32)
	t.Message = append(t.Message, `{"role":"assistant","content":`...)
	t.Message = rawjson.Compact(t.Message, rawjson.BytesOf(content.Raw))
	t.Message = append(t.Message, '}')
	content.ForEach(func(_, b gjson.Result) bool {
		if b.Get("type").Str == "tool_use" {
			t.ToolCalls = append(t.ToolCalls, adapters.ToolCall{ID: b.Get("id").Str, Name: b.Get("name").Str})
		}
		return true
	})
	var u usage
	u.take(root.Get("usage"))
	t.Usage = u.usage()
	t.FinishRaw = root.Get("stop_reason").Str
	t.Finish = finishOf(t.FinishRaw)
	return t, nil
}

// usage is Anthropic's token counts as the API reports them. A stream's
// message_delta usage is cumulative: each field it has replaces the one
// before, none is added.
type usage struct {
	present                              bool
	input, cacheWrite, cacheRead, output int64
}

// take takes the fields of one usage object.
func (u *usage) take(v gjson.Result) {
	if !v.IsObject() {
		return
	}
	v.ForEach(func(k, x gjson.Result) bool {
		switch k.Str {
		case "input_tokens":
			u.input, u.present = x.Int(), true
		case "cache_creation_input_tokens":
			u.cacheWrite, u.present = x.Int(), true
		case "cache_read_input_tokens":
			u.cacheRead, u.present = x.Int(), true
		case "output_tokens":
			u.output, u.present = x.Int(), true
		}
		return true
	})
}

// usage is u in chronicle's terms: input counts the tokens read from and
// written to the cache too, cached those read from it.
func (u usage) usage() adapters.Usage {
	if !u.present {
		return adapters.Usage{}
	}
	return adapters.Usage{Present: true, InputTokens: u.input + u.cacheWrite + u.cacheRead, OutputTokens: u.output, CachedTokens: u.cacheRead}
}

// finishOf maps a stop_reason.
func finishOf(raw string) adapters.FinishReason {
	switch raw {
	case "":
		return adapters.FinishNone
	case "end_turn", "stop_sequence", "pause_turn":
		return adapters.FinishStop
	case "tool_use":
		return adapters.FinishToolCalls
	case "max_tokens", "model_context_window_exceeded":
		return adapters.FinishLength
	case "refusal":
		return adapters.FinishContentFilter
	}
	return adapters.FinishStop
}

// Wire is the Anthropic Messages format, as adapters/formats registers
// it. It has one dialect, "".
var Wire = adapters.Wire{Format: adapters.FormatAnthropic, New: newWire}

func newWire(dialect string, sessionHeaders []string) (adapters.Adapter, bool) {
	if dialect != "" {
		return nil, false
	}
	return &Adapter{SessionHeaders: slices.Clone(sessionHeaders)}, true
}
