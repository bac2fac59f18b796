package openaichat

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
)

// ReasoningPolicy says on which assistant messages a provider wants
// reasoning_content sent back (DeepSeek thinking mode).
type ReasoningPolicy uint8

const (
	// ReasoningNever: never restore reasoning_content (OpenAI; the legacy
	// DeepSeek R1 reasoner, which rejects it).
	ReasoningNever ReasoningPolicy = iota
	// ReasoningToolTurns: restore it on every assistant message of an
	// exchange (the messages between two user messages) that made tool
	// calls — DeepSeek V3.2 thinking mode.
	ReasoningToolTurns
	// ReasoningAll: restore it on every assistant message that had one —
	// DeepSeek V4, which may reject assistant messages without the key.
	ReasoningAll
)

// DeepSeekReasoning is DeepSeek's rule (wire-formats.md §3.1) by model id:
// V4 and the newest aliases → ReasoningAll; ids naming R1 → ReasoningNever;
// anything else (deepseek-reasoner = V3.2, deepseek-chat) →
// ReasoningToolTurns, which is also right for a non-thinking model, since a
// non-thinking model stores no reasoning to restore.
func DeepSeekReasoning(model string) ReasoningPolicy {
	m := strings.ToLower(model)
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	switch {
	case strings.Contains(m, "r1"):
		return ReasoningNever
	case strings.HasPrefix(m, "deepseek-v4"), m == "deepseek-flash", strings.HasPrefix(m, "deepseek-flash-"),
		strings.HasPrefix(m, "deepseek-pro"):
		return ReasoningAll
	}
	return ReasoningToolTurns
}

// Dialect configures the OpenAI chat adapter for one family of servers.
// DeepSeek and Gemini's OpenAI-compatible endpoint are dialects, not
// adapters. Override fields per connection by copying a preset.
type Dialect struct {
	// Name is informative ("openai", "deepseek", …).
	Name string
	// ToolOnlyContent is the raw JSON of "content" in an assembled
	// message that has tool calls and no text: `null` (OpenAI) or `""`
	// (DeepSeek, which sends content "" itself).
	ToolOnlyContent string
	// InjectUsage adds stream_options.include_usage to streaming requests
	// that lack it (DeepSeek reports usage anyway).
	InjectUsage bool
	// SessionField is the body field that carries the session id
	// ("prompt_cache_key"), "" for none.
	SessionField string
	// SessionHeaders are headers set to the session id (ChatGPT-backend
	// "session-id", OpenCode "x-opencode-session").
	SessionHeaders []string
	// Reasoning returns the reasoning_content policy for a model; nil
	// means ReasoningNever.
	Reasoning func(model string) ReasoningPolicy
	// DoneOptional makes a finish_reason count as the terminal marker
	// when a server may omit "[DONE]" (Gemini's OpenAI endpoint).
	DoneOptional bool
}

// Dialect presets.
var (
	OpenAI = Dialect{Name: "openai", ToolOnlyContent: "null", InjectUsage: true,
		SessionField: "prompt_cache_key"}
	DeepSeek = Dialect{Name: "deepseek", ToolOnlyContent: `""`,
		Reasoning: DeepSeekReasoning}
	GeminiOpenAI = Dialect{Name: "gemini-openai", ToolOnlyContent: "null",
		DoneOptional: true}
	OpenAICompatible = Dialect{Name: "openai-compatible", ToolOnlyContent: "null", InjectUsage: true}
)

// Adapter is the adapter for OpenAI chat completions and its dialects.
type Adapter struct {
	d Dialect
}

// New returns the chat-completions adapter for a dialect.
func New(d Dialect) *Adapter {
	if d.ToolOnlyContent == "" {
		d.ToolOnlyContent = "null"
	}
	return &Adapter{d: d}
}

var _ adapters.Adapter = (*Adapter)(nil)

// Dialect returns the adapter's configuration.
func (a *Adapter) Dialect() Dialect { return a.d }

// Format implements adapters.Adapter.
func (a *Adapter) Format() adapters.Format { return adapters.FormatOpenAIChat }

// Classify implements adapters.Adapter: POST …/chat/completions is a turn (streaming
// when the body says "stream": true); anything else passes through.
func (a *Adapter) Classify(method, path, query string, body []byte) adapters.Op {
	return adapters.ClassifyPost(method, path, "/chat/completions", body)
}

// Messages implements adapters.Adapter.
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

// System implements adapters.Adapter; OpenAI system prompts are messages.
func (a *Adapter) System(body []byte) []byte { return nil }

// SetSystem implements adapters.Adapter as a no-op.
func (a *Adapter) SetSystem(body, system []byte) ([]byte, error) { return body, nil }

// WalkMessages implements adapters.Adapter. Calls come from tool_calls (and the
// legacy function_call), results from role "tool" (tool_call_id) and role
// "function" (name).
func (a *Adapter) WalkMessages(messages []byte, fn func(adapters.Message) bool) error {
	return adapters.WalkElements(messages, "messages", openAIElement, fn)
}

// openAIElement reads one message for WalkMessages. Its frame is gone
// before fn runs; the members stay raw JSON until openAIMessage reads the
// few it needs (a message's six members as gjson results took 2.2 KB of
// frame here, in the deepest path of a stream's finish).
//
//go:noinline
func openAIElement(raw []byte, i int, calls []adapters.ToolCall, results []adapters.ToolResult) adapters.Message {
	var fields openAIFields
	if f, ok := rawjson.MemberValues(raw, "role", "tool_calls", "function_call", "content", "tool_call_id", "name"); ok {
		fields = openAIFields{role: rawjson.Str(f[0]), toolCalls: rawjson.Str(f[1]), functionCall: rawjson.Str(f[2]),
			content: rawjson.Str(f[3]), toolCallID: rawjson.Str(f[4]), name: rawjson.Str(f[5])}
	} else {
		// Not a plain object: read this one through gjson.
		fields = openAIFieldsOf(gjson.Parse(rawjson.Str(raw)))
	}
	return openAIMessage(&fields, raw, i, calls, results)
}

// openAIFields are the members of a chat message WalkMessages reads, as
// raw JSON ("" when absent).
type openAIFields struct {
	role, toolCalls, functionCall, content, toolCallID, name string
}

// openAIFieldsOf looks the fields up with gjson, one lookup each (for a
// message the member walker declines).
func openAIFieldsOf(m gjson.Result) openAIFields {
	return openAIFields{role: m.Get("role").Raw, toolCalls: m.Get("tool_calls").Raw, functionCall: m.Get("function_call").Raw,
		content: m.Get("content").Raw, toolCallID: m.Get("tool_call_id").Raw, name: m.Get("name").Raw}
}

// openAIMessage is one message read from its fields; calls and results
// are reused for its lists.
func openAIMessage(f *openAIFields, raw []byte, i int, calls []adapters.ToolCall, results []adapters.ToolResult) adapters.Message {
	role := rawjson.Role(gjson.Parse(f.role))
	if f.toolCalls != "" {
		calls = appendOpenAICalls(calls, f.toolCalls)
	}
	if strings.HasPrefix(f.functionCall, "{") {
		calls = append(calls, adapters.ToolCall{Name: gjson.Get(f.functionCall, "name").String()})
	}
	switch role {
	case "tool":
		results = append(results, adapters.ToolResult{CallID: gjson.Parse(f.toolCallID).String()})
	case "function":
		results = append(results, adapters.ToolResult{Name: gjson.Parse(f.name).String()})
	}
	var empty bool
	if strings.HasPrefix(f.content, `"`) {
		// Only whether it is "" matters: not parsed (it may be long).
		empty = f.content == `""`
	} else {
		empty = openAIEmptyText(gjson.Parse(f.content))
	}
	return adapters.Message{Index: i, Raw: raw, Role: role, Calls: calls, Results: results, EmptyText: empty}
}

// appendOpenAICalls appends the calls of a tool_calls array. It walks the
// raw JSON: gjson's ForEach and Get took 2 KiB of stack here, on the path
// of a stream's finish (see openAIUsage).
func appendOpenAICalls(calls []adapters.ToolCall, toolCalls string) []adapters.ToolCall {
	rawjson.EachElement(toolCalls, func(c string) bool {
		id, _ := rawjson.Member(c, "id")
		fn, _ := rawjson.Member(c, "function")
		name, _ := rawjson.Member(fn, "name")
		calls = append(calls, adapters.ToolCall{ID: rawjson.String(id), Name: rawjson.String(name)})
		return true
	})
	return calls
}

// openAIEmptyText reports whether a content value holds no non-empty text.
func openAIEmptyText(c gjson.Result) bool {
	switch {
	case c.Type == gjson.String:
		return c.Raw == `""`
	case c.IsArray():
		empty := true
		c.ForEach(func(_, p gjson.Result) bool {
			t := p.Get("type").String()
			if t != "text" && t != "" || p.Get("text").String() != "" || p.Get("refusal").String() != "" {
				empty = false
			}
			return empty
		})
		return empty
	}
	return true
}

// PrepareUpstream implements adapters.Adapter: it sets the dialect's session field
// unless the client set one (then the client's value is what the upstream
// receives), returns the session headers, and for streams adds
// stream_options.include_usage when the dialect wants it and the client did
// not ask for it.
func (a *Adapter) PrepareUpstream(body []byte, p adapters.Prepare) (adapters.Upstream, error) {
	sessionID, stream := p.SessionID, p.Stream
	// The common case: every member to add is plainly absent, and one
	// copy into p.Buf adds them all (with p.Splice, no copy).
	var add [2]rawjson.Pair
	n := 0
	if a.d.SessionField != "" && sessionID != "" {
		add[n] = rawjson.Pair{Key: a.d.SessionField, Value: rawjson.PlainString(sessionID)}
		n++
	}
	if stream && a.d.InjectUsage {
		add[n] = rawjson.Pair{Key: "stream_options", Value: includeUsage}
		n++
	}
	if n > 0 {
		var up adapters.Upstream
		var ok bool
		if p.Splice {
			up.Body = body
			up.Insert, up.At, ok = rawjson.SpliceAbsentKeys(body, p.Messages, add[:n]...)
		} else {
			up.Body, ok = rawjson.InsertAbsentKeys(p.Buf, body, p.Messages, add[:n]...)
		}
		if ok {
			up.AddedUsage = stream && a.d.InjectUsage
			for _, h := range a.d.SessionHeaders {
				up.Headers = append(up.Headers, adapters.Header{Name: h, Value: sessionID})
			}
			if a.d.SessionField != "" || len(up.Headers) > 0 {
				up.SessionID = sessionID
			}
			return up, nil
		}
	}

	up := adapters.Upstream{Body: body}
	var err error
	if a.d.SessionField != "" && sessionID != "" {
		if out, ok := rawjson.InsertAbsentKey(up.Body, p.Messages, a.d.SessionField, rawjson.PlainString(sessionID)); ok {
			up.Body, up.SessionID = out, sessionID
		} else if cur := rawjson.Get(body, a.d.SessionField); cur.Exists() && cur.String() != "" {
			up.SessionID = cur.String()
		} else {
			if up.Body, err = sjson.SetBytes(up.Body, a.d.SessionField, sessionID); err != nil {
				return adapters.Upstream{}, fmt.Errorf("set %s: %w", a.d.SessionField, err)
			}
			up.SessionID = sessionID
		}
	}
	if sessionID != "" {
		for _, h := range a.d.SessionHeaders {
			up.Headers = append(up.Headers, adapters.Header{Name: h, Value: sessionID})
		}
		if up.SessionID == "" && len(up.Headers) > 0 {
			up.SessionID = sessionID
		}
	}
	if stream && a.d.InjectUsage {
		// up.Body may be a new buffer now: Messages no longer points into
		// it, and the whole body is searched.
		skip := p.Messages
		if len(up.Body) != len(body) {
			skip = nil
		}
		if out, ok := rawjson.InsertAbsentKey(up.Body, skip, "stream_options", includeUsage); ok {
			up.Body, up.AddedUsage = out, true
			return up, nil
		}
	}
	if stream && a.d.InjectUsage && !rawjson.Get(body, "stream_options.include_usage").Bool() {
		if up.Body, err = sjson.SetBytes(up.Body, "stream_options.include_usage", true); err != nil {
			return adapters.Upstream{}, fmt.Errorf("set include_usage: %w", err)
		}
		up.AddedUsage = true
	}
	return up, nil
}

var (
	toolCallsKey = []byte(`"tool_calls"`)
	includeUsage = []byte(`{"include_usage":true}`)
	usageKey     = []byte(`"usage"`)
	nullLit      = []byte("null")
	emptyList    = []byte(`"choices":[]`)
)

// StripAddedUsage implements adapters.Adapter for a stream where chronicle added
// include_usage: given one raw SSE event, it reports drop for the
// usage-only chunk (choices empty, usage set) and otherwise removes the
// top-level "usage":null member. It edits event in place (out aliases
// event) and never allocates. Events without either are returned as is.
func (a *Adapter) StripAddedUsage(event []byte) ([]byte, bool) {
	if bytes.Contains(event, emptyList) {
		data := eventData(event)
		if u := rawjson.Get(data, "usage"); u.IsObject() && rawjson.Get(data, "choices.#").Int() == 0 {
			return event, true
		}
	}
	// Find the last `"usage"` key whose value is null.
	end := len(event)
	for {
		i := bytes.LastIndex(event[:end], usageKey)
		if i < 0 {
			return event, false
		}
		j := skipWS(event, i+len(usageKey))
		if j < len(event) && event[j] == ':' {
			j = skipWS(event, j+1)
			if bytes.HasPrefix(event[j:], nullLit) {
				return removeMember(event, i, j+len(nullLit)), false
			}
		}
		end = i
	}
}

// eventData returns the payload of a single-line data event, or the event
// itself when it has no "data:" prefix.
func eventData(ev []byte) []byte {
	i := bytes.Index(ev, []byte("data:"))
	if i < 0 {
		return ev
	}
	ev = ev[i+5:]
	if j := bytes.IndexAny(ev, "\r\n"); j >= 0 {
		ev = ev[:j]
	}
	return ev
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// removeMember deletes the object member spanning b[start:end] together
// with one adjacent comma, shifting the rest left in place.
func removeMember(b []byte, start, end int) []byte {
	k := start - 1
	for k >= 0 && (b[k] == ' ' || b[k] == '\t' || b[k] == '\r' || b[k] == '\n') {
		k--
	}
	if k >= 0 && b[k] == ',' {
		start = k
	} else {
		e := skipWS(b, end)
		if e < len(b) && b[e] == ',' {
			end = e + 1
		}
	}
	n := copy(b[start:], b[end:])
	return b[:start+n]
}

// ErrorBody implements adapters.Adapter: {"error":{"message","type","param":null,"code"}}.
// type is "invalid_request_error" for 4xx (OpenAI uses it for 401 too),
// "rate_limit_error" for 429 and "server_error" for 5xx.
func (a *Adapter) ErrorBody(status int, code, message string) []byte {
	return ErrorBody(status, code, message)
}

// ErrorBody is OpenAI's error envelope, which the Responses API shares:
// {"error":{"message","type","param":null,"code"}}, type
// "invalid_request_error" for 4xx (OpenAI uses it for 401 too),
// "rate_limit_error" for 429 and "server_error" for 5xx.
func ErrorBody(status int, code, message string) []byte {
	typ := "invalid_request_error"
	switch {
	case status == 429:
		typ = "rate_limit_error"
	case status >= 500:
		typ = "server_error"
	}
	b := make([]byte, 0, 96+len(message)+len(code))
	b = append(b, `{"error":{"message":`...)
	b = rawjson.AppendString(b, message)
	b = append(b, `,"type":`...)
	b = rawjson.AppendString(b, typ)
	b = append(b, `,"param":null,"code":`...)
	b = rawjson.AppendString(b, code)
	b = append(b, "}}"...)
	return b
}

// StreamErrorEvent implements adapters.Adapter: a data event whose JSON has a
// top-level error (openai-node throws it as APIError).
func (a *Adapter) StreamErrorEvent(status int, code, message string) []byte {
	b := append([]byte("data: "), a.ErrorBody(status, code, message)...)
	return append(b, "\n\n"...)
}

// ParseResponse implements adapters.Adapter for a non-stream chat completion. The
// message is choices[0].message, compacted, minus what only responses
// carry: "refusal":null, "annotations":[], tool_calls[].index; "content"
// is added as null when absent.
func (a *Adapter) ParseResponse(body []byte) (adapters.Turn, error) {
	if !jsonscan.Valid(body) {
		return adapters.Turn{}, fmt.Errorf("parse response: %w", adapters.ErrInvalidJSON)
	}
	if t, ok := parseOpenAIAnswer(body); ok {
		return t, nil
	}
	return parseOpenAIResponse(body)
}

// parseOpenAIResponse is ParseResponse through gjson, for any valid body.
func parseOpenAIResponse(body []byte) (adapters.Turn, error) {
	if e := rawjson.Get(body, "error"); e.Exists() && e.Type != gjson.Null {
		return adapters.Turn{Finish: adapters.FinishError, Terminal: true, Error: append([]byte(nil), e.Raw...)}, nil
	}
	choice := rawjson.Get(body, "choices.0")
	msgR := choice.Get("message")
	if !msgR.IsObject() {
		return adapters.Turn{}, fmt.Errorf("parse response: %w", adapters.ErrNoAnswer)
	}
	// The body is valid JSON (checked above), so the message is too.
	msg := rawjson.Compact(make([]byte, 0, len(msgR.Raw)), rawjson.BytesOf(msgR.Raw))
	var err error
	if r := rawjson.Get(msg, "refusal"); r.Exists() && r.Type == gjson.Null {
		msg, _ = sjson.DeleteBytes(msg, "refusal")
	}
	if r := rawjson.Get(msg, "annotations"); r.IsArray() && len(r.Array()) == 0 {
		msg, _ = sjson.DeleteBytes(msg, "annotations")
	}
	for i := int(rawjson.Get(msg, "tool_calls.#").Int()) - 1; i >= 0; i-- {
		p := "tool_calls." + strconv.Itoa(i) + ".index"
		if rawjson.Get(msg, p).Exists() {
			msg, _ = sjson.DeleteBytes(msg, p)
		}
	}
	if !rawjson.Get(msg, "content").Exists() {
		if msg, err = sjson.SetRawBytes(msg, "content", []byte("null")); err != nil {
			return adapters.Turn{}, fmt.Errorf("parse response: %w", err)
		}
	}
	t := adapters.Turn{Message: msg, Terminal: true}
	t.Usage = openAIUsage(rawjson.Get(body, "usage"))
	t.Model = adapters.ResponseModel(rawjson.Get(body, "model").Raw)
	t.FinishRaw = choice.Get("finish_reason").String()
	rawjson.Get(msg, "tool_calls").ForEach(func(_, c gjson.Result) bool {
		t.ToolCalls = append(t.ToolCalls, adapters.ToolCall{ID: c.Get("id").String(), Name: c.Get("function.name").String()})
		return true
	})
	t.Finish = openAIFinish(t.FinishRaw, len(t.ToolCalls) > 0)
	return t, nil
}

// parseOpenAIAnswer is ParseResponse's fast path for the common answer: a
// valid body whose first choice has a message without tool calls, read
// in one walk per object with a vectorised skip over string values
// (gjson steps through a long content string once per key it looks up).
// ok is false for anything else (an error body, tool calls, escaped keys,
// unusual shapes), and parseOpenAIResponse answers; both give the same
// Turn.
func parseOpenAIAnswer(body []byte) (adapters.Turn, bool) {
	if bytes.Contains(body, toolCallsKey) {
		return adapters.Turn{}, false // (or a string that says so: the slow path is right either way)
	}
	top, ok := rawjson.MemberValues(body, "error", "choices", "usage", "model")
	if !ok || top[0] != nil || len(top[1]) < 2 || top[1][0] != '[' {
		return adapters.Turn{}, false
	}
	i := rawjson.SkipSpace(top[1], 1)
	end, ok := rawjson.SkipValue(top[1], i)
	if !ok || top[1][i] != '{' {
		return adapters.Turn{}, false
	}
	choice, ok := rawjson.MemberValues(top[1][i:end], "message", "finish_reason")
	if !ok || len(choice[0]) == 0 || choice[0][0] != '{' {
		return adapters.Turn{}, false
	}
	finish := ""
	if f := choice[1]; f != nil {
		if len(f) < 2 || f[0] != '"' || bytes.IndexByte(f, '\\') >= 0 {
			return adapters.Turn{}, false
		}
		finish = string(f[1 : len(f)-1])
	}
	msg := rawjson.Compact(make([]byte, 0, len(choice[0])+16), choice[0])
	m, _ := rawjson.MemberValues(msg, "refusal", "annotations", "content")
	if string(m[0]) == "null" || string(m[1]) == "[]" {
		// Drop them, as sjson.DeleteBytes would from compact JSON.
		out := append(make([]byte, 0, len(msg)), '{')
		refusals, annotations := 0, 0
		rawjson.WalkMembers(msg, func(key []byte, at int) (bool, int) {
			end, ok := rawjson.SkipValue(msg, at)
			if !ok {
				return true, 0
			}
			v := msg[at:end]
			switch string(key) {
			case "refusal":
				refusals++
			case "annotations":
				annotations++
			}
			if string(key) == "refusal" && string(v) == "null" || string(key) == "annotations" && string(v) == "[]" {
				return false, end
			}
			if len(out) > 1 {
				out = append(out, ',')
			}
			out = append(append(append(append(out, '"'), key...), '"', ':'), v...)
			return false, end
		})
		if refusals > 1 || annotations > 1 {
			return adapters.Turn{}, false // duplicate keys: leave them to sjson
		}
		msg = append(out, '}')
	}
	if m[2] == nil {
		if len(msg) > 2 {
			msg = append(msg[:len(msg)-1], `,"content":null}`...)
		} else {
			msg = append(msg[:len(msg)-1], `"content":null}`...)
		}
	}
	t := adapters.Turn{Message: msg, Terminal: true, FinishRaw: finish, Model: adapters.ResponseModel(rawjson.Str(top[3]))}
	if top[2] != nil {
		t.Usage = openAIUsage(gjson.Parse(rawjson.Str(top[2])))
	}
	t.Finish = openAIFinish(t.FinishRaw, false)
	return t, true
}

// openAIUsage reads an OpenAI/DeepSeek usage object.
func openAIUsage(u gjson.Result) adapters.Usage {
	if !u.IsObject() {
		return adapters.Usage{}
	}
	// Read with the raw member walker, not gjson's ForEach and Get: this
	// runs in a stream's relay on the connection's goroutine, and gjson's
	// path to a number (Get, parseObject, strconv.ParseFloat) took 2 KiB of
	// stack there, enough to push the deepest path of a stream past the
	// 8 KiB its goroutine keeps (docs/design.md, "Runtime mechanics").
	us := adapters.Usage{Present: true}
	rawjson.EachMember(u.Raw, func(key, v string) bool {
		switch rawjson.KeyName(key) {
		case "prompt_tokens":
			us.InputTokens = rawjson.Int(v)
		case "completion_tokens":
			us.OutputTokens = rawjson.Int(v)
		case "prompt_tokens_details":
			if c, ok := rawjson.Member(v, "cached_tokens"); ok {
				us.CachedTokens = rawjson.Int(c)
			}
		case "prompt_cache_hit_tokens":
			if us.CachedTokens == 0 {
				us.CachedTokens = rawjson.Int(v)
			}
		case "completion_tokens_details":
			c, _ := rawjson.Member(v, "reasoning_tokens")
			us.ReasoningTokens = rawjson.Int(c)
		}
		return true
	})
	return us
}

// openAIFinish maps a finish_reason.
func openAIFinish(raw string, hasCalls bool) adapters.FinishReason {
	var f adapters.FinishReason
	switch raw {
	case "":
		return adapters.FinishNone
	case "stop":
		f = adapters.FinishStop
	case "length":
		f = adapters.FinishLength
	case "tool_calls", "function_call":
		f = adapters.FinishToolCalls
	case "content_filter":
		f = adapters.FinishContentFilter
	default:
		f = adapters.FinishError
	}
	if hasCalls && f == adapters.FinishStop {
		f = adapters.FinishToolCalls
	}
	return f
}

// ShapeProblem implements adapters.Adapter.
func (a *Adapter) ShapeProblem(body []byte) string {
	return adapters.HistoryShapeProblem(body, "messages", `The request body must be a JSON object with a "messages" array.`)
}

// MissingModel implements adapters.Adapter: OpenAI's own refusal (400, byte for
// byte what api.openai.com answers); other dialects are left to their
// upstream.
func (a *Adapter) MissingModel(model string) (int, []byte, bool) {
	if model != "" || a.d.Name != OpenAI.Name {
		return 0, nil, false
	}
	return 400, []byte(`{"error":{"message":"you must provide a model parameter","type":"invalid_request_error","param":null,"code":null}}`), true
}

// MessageText implements adapters.Adapter: the content, a string or its text parts.
func (a *Adapter) MessageText(msg []byte) string {
	c := gjson.ParseBytes(msg).Get("content")
	if c.Type == gjson.String {
		return c.Str
	}
	var sb strings.Builder
	adapters.AppendPartsText(&sb, c, false)
	return sb.String()
}

// ReplyMessages implements adapters.Adapter: the reply is one message.
func (a *Adapter) ReplyMessages(reply []byte) [][]byte { return [][]byte{reply} }

// Wire is the OpenAI chat completions format, as adapters/formats
// registers it. Its dialects are named by Dialect.Name; "" is OpenAI.
var Wire = adapters.Wire{Format: adapters.FormatOpenAIChat, New: newWire}

// dialects are the presets by name.
var dialects = map[string]Dialect{"": OpenAI, OpenAI.Name: OpenAI, DeepSeek.Name: DeepSeek,
	GeminiOpenAI.Name: GeminiOpenAI, OpenAICompatible.Name: OpenAICompatible}

func newWire(dialect string, sessionHeaders []string) (adapters.Adapter, bool) {
	d, ok := dialects[dialect]
	if !ok {
		return nil, false
	}
	d.SessionHeaders = append(append([]string(nil), d.SessionHeaders...), sessionHeaders...)
	return New(d), true
}
