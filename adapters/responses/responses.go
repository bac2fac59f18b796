package responses

import (
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/adapters/openaichat"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
)

// Dialect configures the OpenAI Responses adapter for one family
// of servers. Override fields per connection by copying a preset.
type Dialect struct {
	// Name is informative ("openai", "chatgpt").
	Name string
	// SessionField is the body field that carries the session id
	// ("prompt_cache_key"), "" for none.
	SessionField string
	// SessionHeaders are headers set to the session id the upstream
	// receives (the ChatGPT/Codex backend's "session-id").
	SessionHeaders []string
}

// Dialect presets (wire-formats.md §2 and §5.1).
var (
	// OpenAI is api.openai.com/v1/responses and compatible
	// servers: the session id goes in prompt_cache_key.
	OpenAI = Dialect{Name: "openai", SessionField: "prompt_cache_key"}
	// ChatGPT is the ChatGPT/Codex backend
	// (chatgpt.com/backend-api/codex/responses): prompt_cache_key plus the
	// "session-id" header current Codex sends (DESIGN.md "Session ids by
	// provider").
	ChatGPT = Dialect{Name: "chatgpt", SessionField: "prompt_cache_key",
		SessionHeaders: []string{"session-id"}}
)

// Adapter is the adapter for the OpenAI Responses API (POST
// /v1/responses) and servers speaking it, such as the ChatGPT/Codex
// backend. Its "messages" are the items of the request's input array, and
// an assembled turn is the JSON array of output items a client appends to
// its next input.
type Adapter struct {
	d Dialect
}

// New returns the Responses adapter for a dialect.
func New(d Dialect) *Adapter { return &Adapter{d: d} }

var _ adapters.Adapter = (*Adapter)(nil)

// Dialect returns the adapter's configuration.
func (a *Adapter) Dialect() Dialect { return a.d }

// Format implements adapters.Adapter.
func (a *Adapter) Format() adapters.Format { return adapters.FormatOpenAIResponses }

// Classify implements adapters.Adapter: POST …/responses is a turn (streaming when
// the body says "stream": true); anything else — GET /responses/{id},
// input_items, cancel, compact, input_tokens — passes through.
func (a *Adapter) Classify(method, path, query string, body []byte) adapters.Op {
	return adapters.ClassifyPost(method, path, "/responses", body)
}

// Messages implements adapters.Adapter: the input items array (a slice of body).
// A string input is returned as one user message item
// {"type":"message","role":"user","content":"…"} (a new slice).
func (a *Adapter) Messages(body []byte) ([]byte, bool) {
	msgs, _, ok := a.MessagesKnown(body, nil)
	return msgs, ok
}

// MessagesKnown implements adapters.Adapter.
func (a *Adapter) MessagesKnown(body []byte, known [][]byte) ([]byte, adapters.Prefix, bool) {
	r := rawjson.Get(body, "input")
	switch {
	case r.Type == gjson.String && jsonscan.ValidString(r.Raw):
		b := make([]byte, 0, len(r.Raw)+48)
		b = append(b, `[{"type":"message","role":"user","content":`...)
		b = append(b, r.Raw...)
		return append(b, "}]"...), adapters.Prefix{}, true
	case r.IsArray():
		raw := rawjson.RawSlice(body, r)
		if p, ok := adapters.ValidArray(raw, known); ok {
			return raw, p, true
		}
	}
	return nil, adapters.Prefix{}, false
}

// SetMessages implements adapters.Adapter; input is always written as an array.
func (a *Adapter) SetMessages(body, messages []byte) ([]byte, error) {
	if !jsonscan.Valid(messages) || !gjson.Parse(rawjson.Str(messages)).IsArray() {
		return nil, fmt.Errorf("set input: %w", adapters.ErrInvalidJSON)
	}
	return adapters.SetRaw(body, "input", messages)
}

// System implements adapters.Adapter. Responses "instructions" are per request (not
// carried over by previous_response_id) and stay in the body; there is no
// stored system prompt.
func (a *Adapter) System(body []byte) []byte { return nil }

// SetSystem implements adapters.Adapter as a no-op.
func (a *Adapter) SetSystem(body, system []byte) ([]byte, error) { return body, nil }

// itemKind classifies an input/output item.
type itemKind uint8

const (
	kindOther itemKind = iota
	kindMessage
	kindCall   // function_call, custom_tool_call
	kindResult // function_call_output, custom_tool_call_output
	kindReasoning
)

// respItemType returns an item's type and kind; an item without "type"
// but with "role" is a message.
func respItemType(it gjson.Result) (string, itemKind) { return respItemTypeRaw(it.Raw) }

// WalkMessages implements adapters.Adapter over input items. A message item's Role
// is its role; every other item's Role is its type ("function_call",
// "function_call_output", "reasoning", or an unknown type as is). Calls
// come from function_call and custom_tool_call items (call_id, name),
// Results from function_call_output and custom_tool_call_output (call_id).
// EmptyText is computed for message items and true for the others.
func (a *Adapter) WalkMessages(messages []byte, fn func(adapters.Message) bool) error {
	return adapters.WalkElements(messages, "input", responsesElement, fn)
}

// responsesElement reads one input item for WalkMessages.
//
//go:noinline
func responsesElement(raw []byte, i int, calls []adapters.ToolCall, results []adapters.ToolResult) adapters.Message {
	item := rawjson.Str(raw)
	typ, kind := respItemTypeRaw(item)
	msg := adapters.Message{Index: i, Raw: raw, Role: typ, EmptyText: true}
	switch kind {
	case kindMessage:
		role, _ := rawjson.Member(item, "role")
		msg.Role = rawjson.Role(gjson.Parse(role))
		content, _ := rawjson.Member(item, "content")
		msg.EmptyText = responsesEmptyTextRaw(content)
	case kindCall:
		id, _ := rawjson.Member(item, "call_id")
		name, _ := rawjson.Member(item, "name")
		calls = append(calls, adapters.ToolCall{ID: rawjson.String(id), Name: rawjson.String(name)})
	case kindResult:
		id, _ := rawjson.Member(item, "call_id")
		results = append(results, adapters.ToolResult{CallID: rawjson.String(id)})
	}
	msg.Calls, msg.Results = calls, results
	return msg
}

// respItemTypeRaw is respItemType of a raw item.
func respItemTypeRaw(item string) (string, itemKind) {
	t, _ := rawjson.Member(item, "type")
	switch t {
	case `"message"`:
		return "message", kindMessage
	case `"function_call"`:
		return "function_call", kindCall
	case `"custom_tool_call"`:
		return "custom_tool_call", kindCall
	case `"function_call_output"`:
		return "function_call_output", kindResult
	case `"custom_tool_call_output"`:
		return "custom_tool_call_output", kindResult
	case `"reasoning"`:
		return "reasoning", kindReasoning
	case "":
		if _, ok := rawjson.Member(item, "role"); ok {
			return "message", kindMessage
		}
		return "", kindOther
	}
	return rawjson.String(t), kindOther
}

// responsesEmptyTextRaw reports whether a message content holds no
// non-empty text: null, "", absent, or parts none of which has a
// non-empty text or refusal (input_image/input_file parts count as
// non-empty).
func responsesEmptyTextRaw(c string) bool {
	switch {
	case rawjson.IsString(c):
		return c == `""`
	case len(c) > 0 && c[0] == '[':
		empty := true
		rawjson.EachElement(c, func(p string) bool {
			typ, _ := rawjson.Member(p, "type")
			switch rawjson.String(typ) {
			case "output_text", "input_text", "text", "", "refusal":
				text, _ := rawjson.Member(p, "text")
				refusal, _ := rawjson.Member(p, "refusal")
				if rawjson.String(text) != "" || rawjson.String(refusal) != "" {
					empty = false
				}
			default:
				empty = false
			}
			return empty
		})
		return empty
	}
	return true
}

// PrepareUpstream implements adapters.Adapter: it sets the dialect's session field
// (prompt_cache_key) unless the client set one — then the client's value
// is what the upstream receives — and sets the dialect's session headers
// to that same value, so body and headers agree. Responses streams always
// carry usage in response.completed, so nothing is injected for it.
func (a *Adapter) PrepareUpstream(body []byte, p adapters.Prepare) (adapters.Upstream, error) {
	up := adapters.Upstream{Body: body}
	sessionID := p.SessionID
	sid := sessionID
	if a.d.SessionField != "" {
		member := rawjson.Pair{Key: a.d.SessionField, Value: rawjson.NonEmpty(rawjson.PlainString(sessionID))}
		var added bool
		if p.Splice {
			up.Insert, up.At, added = rawjson.SpliceAbsentKeys(body, p.Messages, member)
		} else if out, ok := rawjson.InsertAbsentKeys(nil, body, p.Messages, member); ok {
			up.Body, added = out, true
		}
		if added {
			// the session id is in the body
		} else if cur := rawjson.Get(body, a.d.SessionField); cur.Type == gjson.String && cur.Str != "" {
			sid = cur.Str
		} else if sessionID != "" {
			var err error
			if up.Body, err = sjson.SetBytes(body, a.d.SessionField, sessionID); err != nil {
				return adapters.Upstream{}, fmt.Errorf("set %s: %w", a.d.SessionField, err)
			}
		}
	}
	if sid == "" {
		return up, nil
	}
	if a.d.SessionField != "" {
		up.SessionID = sid
	}
	for _, h := range a.d.SessionHeaders {
		up.Headers = append(up.Headers, adapters.Header{Name: h, Value: sid})
		up.SessionID = sid
	}
	return up, nil
}

// StripAddedUsage implements adapters.Adapter; the Responses adapter never adds
// usage options, so every event is returned as is.
func (a *Adapter) StripAddedUsage(event []byte) ([]byte, bool) { return event, false }

// ErrorBody implements adapters.Adapter with the OpenAI error envelope
// {"error":{"message","type","param":null,"code"}} (see openaichat.ErrorBody).
func (a *Adapter) ErrorBody(status int, code, message string) []byte {
	return openaichat.ErrorBody(status, code, message)
}

// StreamErrorEvent implements adapters.Adapter: an "error" event as Responses
// streams send it (wire-formats.md §2.3, the documented flat shape):
//
//	event: error
//	data: {"type":"error","code":CODE,"message":MSG,"param":null,"sequence_number":0}
//
// openai-node throws it as an APIError.
func (a *Adapter) StreamErrorEvent(status int, code, message string) []byte {
	b := make([]byte, 0, 112+len(code)+len(message))
	b = append(b, "event: error\ndata: {\"type\":\"error\",\"code\":"...)
	b = rawjson.AppendString(b, code)
	b = append(b, `,"message":`...)
	b = rawjson.AppendString(b, message)
	b = append(b, `,"param":null,"sequence_number":0}`...)
	return append(b, "\n\n"...)
}

// ResponseID returns the response id of a non-stream Responses body
// ("id") or of a stream event that carries the response object
// (response.created, response.completed, …: "response.id"); "" when there
// is none. The proxy keys stored threads by it to expand
// previous_response_id.
func (a *Adapter) ResponseID(payload []byte) string {
	if id := rawjson.Get(payload, "response.id"); id.Type == gjson.String {
		return id.Str
	}
	if rawjson.Get(payload, "object").Str == "response" {
		return rawjson.Get(payload, "id").Str
	}
	return ""
}

// ExpandPreviousResponse rewrites a request that chains on a stored
// response for an upstream that keeps no state: it removes
// previous_response_id and prepends storedItems (the JSON array of the
// items the chained thread holds, as a client would have sent them) to
// input. A string input becomes a user message item. A body without
// previous_response_id is returned unchanged.
func ExpandPreviousResponse(body []byte, storedItems []byte) ([]byte, error) {
	if !jsonscan.Valid(body) {
		return nil, fmt.Errorf("expand previous response: %w", adapters.ErrInvalidJSON)
	}
	prev := rawjson.Get(body, "previous_response_id")
	if prev.Type != gjson.String || prev.Str == "" {
		return body, nil
	}
	st := gjson.Parse(rawjson.Str(storedItems))
	if !st.IsArray() || !jsonscan.Valid(storedItems) {
		return nil, fmt.Errorf("expand previous response: stored items: %w", adapters.ErrInvalidJSON)
	}
	in, _ := (&Adapter{}).Messages(body)
	merged := make([]byte, 0, len(storedItems)+len(in)+2)
	merged = append(merged, '[')
	n := 0
	add := func(arr []byte) {
		gjson.Parse(rawjson.Str(arr)).ForEach(func(_, it gjson.Result) bool {
			if n > 0 {
				merged = append(merged, ',')
			}
			merged = append(merged, it.Raw...)
			n++
			return true
		})
	}
	add(storedItems)
	add(in)
	merged = append(merged, ']')
	out, err := sjson.DeleteBytes(body, "previous_response_id")
	if err != nil {
		return nil, fmt.Errorf("expand previous response: %w", err)
	}
	if out, err = adapters.SetRaw(out, "input", merged); err != nil {
		return nil, fmt.Errorf("expand previous response: %w", err)
	}
	return out, nil
}

// ParseResponse implements adapters.Adapter for a non-stream Responses body (the
// response object): the message is the output array, compacted. An error
// envelope ({"error":{…}}, or the ChatGPT backend's {"detail":…}) or a
// response with status "failed" gives FinishError with the error object.
// Terminal is false only for a background response still queued or in
// progress.
func (a *Adapter) ParseResponse(body []byte) (adapters.Turn, error) {
	if !jsonscan.Valid(body) {
		return adapters.Turn{}, fmt.Errorf("parse response: %w", adapters.ErrInvalidJSON)
	}
	root := gjson.Parse(rawjson.Str(body))
	if !root.IsObject() {
		return adapters.Turn{}, fmt.Errorf("parse response: %w", adapters.ErrNoAnswer)
	}
	out := root.Get("output")
	if !out.Exists() {
		if e := root.Get("error"); e.Exists() && e.Type != gjson.Null {
			return adapters.Turn{Message: []byte("[]"), Finish: adapters.FinishError, Terminal: true, Error: []byte(e.Raw)}, nil
		}
		if root.Get("detail").Exists() {
			return adapters.Turn{Message: []byte("[]"), Finish: adapters.FinishError, Terminal: true, Error: []byte(root.Raw)}, nil
		}
		return adapters.Turn{}, fmt.Errorf("parse response: %w", adapters.ErrNoAnswer)
	}
	t := adapters.Turn{Terminal: true, Model: adapters.ResponseModel(root.Get("model").Raw)}
	if out.IsArray() {
		// The body was checked to be valid JSON, so output is too.
		t.Message = rawjson.Compact(make([]byte, 0, len(out.Raw)), rawjson.BytesOf(out.Raw))
	} else {
		t.Message = []byte("[]")
	}
	t.ToolCalls = responsesCalls(t.Message)
	t.Usage = responsesUsage(root.Get("usage"))
	status := root.Get("status").String()
	var e gjson.Result
	if x := root.Get("error"); x.Exists() && x.Type != gjson.Null {
		e = x
	}
	t.Finish, t.FinishRaw = responsesFinish(status, root.Get("incomplete_details.reason").String(), len(t.ToolCalls) > 0)
	if status == "queued" || status == "in_progress" {
		t.Terminal = false
	}
	if e.Exists() {
		t.Error = []byte(e.Raw)
		t.Finish = adapters.FinishError
	}
	return t, nil
}

// responsesCalls lists the function_call and custom_tool_call items of an
// output array.
func responsesCalls(items []byte) []adapters.ToolCall {
	var calls []adapters.ToolCall
	gjson.Parse(rawjson.Str(items)).ForEach(func(_, it gjson.Result) bool {
		if _, k := respItemType(it); k == kindCall {
			calls = append(calls, adapters.ToolCall{ID: it.Get("call_id").String(), Name: it.Get("name").String()})
		}
		return true
	})
	return calls
}

// responsesUsage reads a Responses usage object.
func responsesUsage(u gjson.Result) adapters.Usage {
	if !u.IsObject() {
		return adapters.Usage{}
	}
	us := adapters.Usage{Present: true}
	u.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "input_tokens":
			us.InputTokens = v.Int()
		case "output_tokens":
			us.OutputTokens = v.Int()
		case "input_tokens_details":
			us.CachedTokens = v.Get("cached_tokens").Int()
		case "output_tokens_details":
			us.ReasoningTokens = v.Get("reasoning_tokens").Int()
		}
		return true
	})
	return us
}

// responsesFinish maps a response status (and, for "incomplete", the
// incomplete_details reason) to a finish reason and its raw value.
func responsesFinish(status, reason string, hasCalls bool) (adapters.FinishReason, string) {
	switch status {
	case "completed":
		if hasCalls {
			return adapters.FinishToolCalls, status
		}
		return adapters.FinishStop, status
	case "incomplete":
		if reason == "" {
			reason = status
		}
		if reason == "content_filter" {
			return adapters.FinishContentFilter, reason
		}
		return adapters.FinishLength, reason
	case "failed", "cancelled":
		return adapters.FinishError, status
	}
	return adapters.FinishNone, status
}

// ShapeProblem implements adapters.Adapter.
func (a *Adapter) ShapeProblem(body []byte) string {
	return adapters.HistoryShapeProblem(body, "input", `The request body must be a JSON object whose "input" is a string or an array of items.`)
}

// MissingModel implements adapters.Adapter: the Responses API's own refusal.
func (a *Adapter) MissingModel(model string) (int, []byte, bool) {
	if model != "" {
		return 0, nil, false
	}
	return 400, []byte(`{"error":{"message":"Missing required parameter: 'model'.","type":"invalid_request_error","param":"model","code":"missing_required_parameter"}}`), true
}

// MessageText implements adapters.Adapter: the text of the output message items.
func (a *Adapter) MessageText(msg []byte) string {
	var sb strings.Builder
	gjson.ParseBytes(msg).ForEach(func(_, item gjson.Result) bool {
		if item.Get("type").Str == "message" {
			adapters.AppendPartsText(&sb, item.Get("content"), false)
		}
		return true
	})
	return sb.String()
}

// ReplyMessages implements adapters.Adapter: the reply's output items, one thread
// message each.
func (a *Adapter) ReplyMessages(reply []byte) [][]byte {
	var out [][]byte
	_ = a.WalkMessages(reply, func(m adapters.Message) bool {
		out = append(out, append([]byte(nil), m.Raw...))
		return true
	})
	return out
}

// ExpandPreviousResponse implements Chainer.
func (a *Adapter) ExpandPreviousResponse(body, stored []byte) ([]byte, error) {
	return ExpandPreviousResponse(body, stored)
}

// Wire is the OpenAI Responses format, as adapters/formats registers it.
// Its dialects are named by Dialect.Name; "" is OpenAI.
var Wire = adapters.Wire{Format: adapters.FormatOpenAIResponses, New: newWire}

// dialects are the presets by name.
var dialects = map[string]Dialect{"": OpenAI, OpenAI.Name: OpenAI, ChatGPT.Name: ChatGPT}

func newWire(dialect string, sessionHeaders []string) (adapters.Adapter, bool) {
	d, ok := dialects[dialect]
	if !ok {
		return nil, false
	}
	d.SessionHeaders = append(append([]string(nil), d.SessionHeaders...), sessionHeaders...)
	return New(d), true
}
