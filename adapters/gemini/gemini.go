package gemini

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
)

// Adapter is the adapter for the Gemini native API (generateContent,
// streamGenerateContent with and without alt=sse).
type Adapter struct {
	// SessionHeaders are headers set to the session id; none by default
	// (Gemini caches by prefix).
	SessionHeaders []string
}

// New returns the Gemini native adapter.
func New() *Adapter { return &Adapter{} }

var _ adapters.Adapter = (*Adapter)(nil)

// KeyHeader implements adapters.KeyPlacer: the Gemini API takes its key in
// x-goog-api-key.
func (g *Adapter) KeyHeader(adapters.Headers) (name, prefix string) {
	return "X-Goog-Api-Key", ""
}

// Format implements adapters.Adapter.
func (g *Adapter) Format() adapters.Format { return adapters.FormatGemini }

// Classify implements adapters.Adapter: POST …/models/{model}:generateContent is a
// non-stream turn, :streamGenerateContent a stream — SSE with alt=sse, a
// JSON array without. Anything else (countTokens, embedContent, model
// lists) passes through.
func (g *Adapter) Classify(method, path, query string, body []byte) adapters.Op {
	if method != "POST" {
		return adapters.Op{Kind: adapters.OpPassThrough}
	}
	i := strings.LastIndex(path, "/models/")
	if i < 0 {
		return adapters.Op{Kind: adapters.OpPassThrough}
	}
	rest := path[i+len("/models/"):]
	j := strings.LastIndexByte(rest, ':')
	if j < 0 {
		return adapters.Op{Kind: adapters.OpPassThrough}
	}
	model, verb := rest[:j], rest[j+1:]
	switch verb {
	case "generateContent":
		return adapters.Op{Kind: adapters.OpGenerate, Model: model}
	case "streamGenerateContent":
		op := adapters.Op{Kind: adapters.OpGenerate, Stream: true, Framing: adapters.FramingJSONArray, Model: model}
		if q, err := url.ParseQuery(query); err == nil && q.Get("alt") == "sse" {
			op.Framing = adapters.FramingSSE
		}
		return op
	}
	return adapters.Op{Kind: adapters.OpPassThrough}
}

// Messages implements adapters.Adapter: the contents array.
func (g *Adapter) Messages(body []byte) ([]byte, bool) {
	msgs, _, ok := g.MessagesKnown(body, nil)
	return msgs, ok
}

// MessagesKnown implements adapters.Adapter.
func (g *Adapter) MessagesKnown(body []byte, known [][]byte) ([]byte, adapters.Prefix, bool) {
	return adapters.KnownArray(body, "contents", known)
}

// SetMessages implements adapters.Adapter.
func (g *Adapter) SetMessages(body, messages []byte) ([]byte, error) {
	return adapters.SetRaw(body, "contents", messages)
}

// System implements adapters.Adapter: the raw systemInstruction, nil when absent.
func (g *Adapter) System(body []byte) []byte {
	r := rawjson.Get(body, "systemInstruction")
	if !r.Exists() || r.Type == gjson.Null {
		return nil
	}
	return rawjson.RawSlice(body, r)
}

// SetSystem implements adapters.Adapter; nil deletes systemInstruction.
func (g *Adapter) SetSystem(body, system []byte) ([]byte, error) {
	if system == nil {
		if !rawjson.Get(body, "systemInstruction").Exists() {
			return body, nil
		}
		out, err := sjson.DeleteBytes(body, "systemInstruction")
		if err != nil {
			return nil, fmt.Errorf("delete systemInstruction: %w", err)
		}
		return out, nil
	}
	return adapters.SetRaw(body, "systemInstruction", system)
}

// WalkMessages implements adapters.Adapter. Calls are functionCall parts, results
// functionResponse parts; IDs are functionCall.id / functionResponse.id
// where the client sent them, else "".
func (g *Adapter) WalkMessages(messages []byte, fn func(adapters.Message) bool) error {
	return adapters.WalkElements(messages, "contents", geminiElement, fn)
}

// geminiElement reads one content for WalkMessages.
//
//go:noinline
func geminiElement(raw []byte, i int, calls []adapters.ToolCall, results []adapters.ToolResult) adapters.Message {
	content := rawjson.Str(raw)
	empty := true
	parts, _ := rawjson.Member(content, "parts")
	each := rawjson.EachElement
	if rawjson.IsObject(parts) {
		// Read as gjson's ForEach reads it (the walk before session 11):
		// an object's members as an array's elements.
		each = func(obj string, fn func(string) bool) {
			rawjson.EachMember(obj, func(_, v string) bool { return fn(v) })
		}
	}
	each(parts, func(p string) bool {
		if fc, _ := rawjson.Member(p, "functionCall"); rawjson.IsObject(fc) {
			id, _ := rawjson.Member(fc, "id")
			name, _ := rawjson.Member(fc, "name")
			calls = append(calls, adapters.ToolCall{ID: rawjson.String(id), Name: rawjson.String(name)})
		}
		if fr, _ := rawjson.Member(p, "functionResponse"); rawjson.IsObject(fr) {
			id, _ := rawjson.Member(fr, "id")
			name, _ := rawjson.Member(fr, "name")
			results = append(results, adapters.ToolResult{CallID: rawjson.String(id), Name: rawjson.String(name)})
		}
		if t, _ := rawjson.Member(p, "text"); rawjson.IsString(t) && t != `""` {
			if thought, _ := rawjson.Member(p, "thought"); !jsonBool(thought) {
				empty = false
			}
		}
		return true
	})
	role, _ := rawjson.Member(content, "role")
	return adapters.Message{Index: i, Raw: raw, Role: rawjson.Role(gjson.Parse(role)), Calls: calls, Results: results, EmptyText: empty}
}

// jsonBool is gjson's Bool of one raw JSON value.
func jsonBool(v string) bool {
	switch v {
	case "", "false", "null":
		return false
	case "true":
		return true
	}
	return gjson.Parse(v).Bool()
}

// PrepareUpstream implements adapters.Adapter: Gemini reports usage on every chunk
// and caches by prefix, so only the configured session headers apply.
func (g *Adapter) PrepareUpstream(body []byte, p adapters.Prepare) (adapters.Upstream, error) {
	up := adapters.Upstream{Body: body}
	sessionID := p.SessionID
	if sessionID != "" && len(g.SessionHeaders) > 0 {
		for _, h := range g.SessionHeaders {
			up.Headers = append(up.Headers, adapters.Header{Name: h, Value: sessionID})
		}
		up.SessionID = sessionID
	}
	return up, nil
}

// StripAddedUsage implements adapters.Adapter; Gemini never needs it.
func (g *Adapter) StripAddedUsage(event []byte) ([]byte, bool) { return event, false }

// GoogleStatus is the canonical gRPC status name Google uses for an HTTP
// status (DESIGN.md "Status codes").
func GoogleStatus(status int) string {
	switch status {
	case 400, 413:
		return "INVALID_ARGUMENT"
	case 401:
		return "UNAUTHENTICATED"
	case 403:
		return "PERMISSION_DENIED"
	case 404:
		return "NOT_FOUND"
	case 409:
		return "ABORTED"
	case 429:
		return "RESOURCE_EXHAUSTED"
	case 499:
		return "CANCELLED"
	case 501:
		return "UNIMPLEMENTED"
	case 503:
		return "UNAVAILABLE"
	case 504:
		return "DEADLINE_EXCEEDED"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return "FAILED_PRECONDITION"
}

// ErrorBody implements adapters.Adapter: Google's envelope with chronicle's code as
// a google.rpc.ErrorInfo reason in upper case (thread_busy → THREAD_BUSY).
func (g *Adapter) ErrorBody(status int, code, message string) []byte {
	b := make([]byte, 0, 192+len(message)+len(code))
	b = append(b, `{"error":{"code":`...)
	b = fmt.Appendf(b, "%d", status)
	b = append(b, `,"message":`...)
	b = rawjson.AppendString(b, message)
	b = append(b, `,"status":`...)
	b = rawjson.AppendString(b, GoogleStatus(status))
	b = append(b, `,"details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":`...)
	b = rawjson.AppendString(b, strings.ToUpper(code))
	b = append(b, `,"domain":"chronicle"}]}}`...)
	return b
}

// StreamErrorEvent implements adapters.Adapter: the error envelope as an SSE data
// event, framed with CRLF like Gemini's own events. (For a JSON-array stream
// the proxy writes "," + ErrorBody + "]" instead.)
func (g *Adapter) StreamErrorEvent(status int, code, message string) []byte {
	b := append([]byte("data: "), g.ErrorBody(status, code, message)...)
	return append(b, "\r\n\r\n"...)
}

// ParseResponse implements adapters.Adapter for a generateContent body: the message
// is candidates[0].content, compacted ({"parts":[],"role":"model"} when the
// candidate has none).
func (g *Adapter) ParseResponse(body []byte) (adapters.Turn, error) {
	if !jsonscan.Valid(body) {
		return adapters.Turn{}, fmt.Errorf("parse response: %w", adapters.ErrInvalidJSON)
	}
	root := gjson.Parse(rawjson.Str(body))
	if root.IsArray() { // an error body wrapped in an array, or a buffered stream
		a := g.NewAssembler()
		var err error
		root.ForEach(func(_, el gjson.Result) bool {
			err = a.Feed([]byte(el.Raw))
			return err == nil
		})
		t := a.Result()
		return t, err
	}
	if e := root.Get("error"); e.Exists() && e.Type != gjson.Null {
		return adapters.Turn{Finish: adapters.FinishError, Terminal: true, Error: []byte(e.Raw)}, nil
	}
	t := adapters.Turn{Terminal: true, Model: adapters.ResponseModel(root.Get("modelVersion").Raw)}
	cand := root.Get("candidates.0")
	content := cand.Get("content")
	if content.IsObject() {
		// The body is valid JSON (checked above), so content is too.
		t.Message = rawjson.Compact(make([]byte, 0, len(content.Raw)), rawjson.BytesOf(content.Raw))
		if !rawjson.Get(t.Message, "role").Exists() {
			t.Message, _ = sjson.SetBytes(t.Message, "role", "model")
		}
		if !rawjson.Get(t.Message, "parts").Exists() {
			t.Message, _ = sjson.SetRawBytes(t.Message, "parts", []byte("[]"))
		}
	} else {
		t.Message = []byte(`{"role":"model","parts":[]}`)
	}
	content.Get("parts").ForEach(func(_, p gjson.Result) bool {
		if fc := p.Get("functionCall"); fc.IsObject() {
			t.ToolCalls = append(t.ToolCalls, adapters.ToolCall{ID: fc.Get("id").String(), Name: fc.Get("name").String()})
		}
		return true
	})
	t.Usage = geminiUsage(root.Get("usageMetadata"))
	t.FinishRaw = cand.Get("finishReason").String()
	if t.FinishRaw == "" {
		t.FinishRaw = root.Get("promptFeedback.blockReason").String()
		if t.FinishRaw != "" {
			t.Finish = adapters.FinishContentFilter
			return t, nil
		}
		if !cand.Exists() {
			return adapters.Turn{}, fmt.Errorf("parse response: %w", adapters.ErrNoAnswer)
		}
	}
	t.Finish = geminiFinish(t.FinishRaw, len(t.ToolCalls) > 0)
	return t, nil
}

// geminiUsage reads usageMetadata. Output counts thought tokens too.
func geminiUsage(u gjson.Result) adapters.Usage {
	if !u.IsObject() {
		return adapters.Usage{}
	}
	us := adapters.Usage{Present: true}
	var cand int64
	u.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "promptTokenCount":
			us.InputTokens = v.Int()
		case "candidatesTokenCount":
			cand = v.Int()
		case "thoughtsTokenCount":
			us.ReasoningTokens = v.Int()
		case "cachedContentTokenCount":
			us.CachedTokens = v.Int()
		}
		return true
	})
	us.OutputTokens = cand + us.ReasoningTokens
	return us
}

// geminiFinish maps a candidate finishReason.
func geminiFinish(raw string, hasCalls bool) adapters.FinishReason {
	switch raw {
	case "":
		return adapters.FinishNone
	case "STOP":
		if hasCalls {
			return adapters.FinishToolCalls
		}
		return adapters.FinishStop
	case "MAX_TOKENS":
		return adapters.FinishLength
	case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", "LANGUAGE",
		"IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION":
		return adapters.FinishContentFilter
	}
	return adapters.FinishError
}

// ShapeProblem implements adapters.Adapter.
func (g *Adapter) ShapeProblem(body []byte) string {
	return adapters.HistoryShapeProblem(body, "contents", `The request body must be a JSON object with a "contents" array.`)
}

// MissingModel implements adapters.Adapter: Gemini names the model in the path.
func (g *Adapter) MissingModel(model string) (int, []byte, bool) { return 0, nil, false }

// MessageText implements adapters.Adapter: the non-thought text parts.
func (g *Adapter) MessageText(msg []byte) string {
	var sb strings.Builder
	adapters.AppendPartsText(&sb, gjson.ParseBytes(msg).Get("parts"), true)
	return sb.String()
}

// ReplyMessages implements adapters.Adapter: the reply is one content.
func (g *Adapter) ReplyMessages(reply []byte) [][]byte { return [][]byte{reply} }

// Wire is the Gemini native format, as adapters/formats registers it. It
// has one dialect, "".
var Wire = adapters.Wire{Format: adapters.FormatGemini, New: newWire}

func newWire(dialect string, sessionHeaders []string) (adapters.Adapter, bool) {
	if dialect != "" {
		return nil, false
	}
	g := New()
	g.SessionHeaders = append([]string(nil), sessionHeaders...)
	return g, true
}
