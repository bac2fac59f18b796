package mock

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Anthropic Messages (wire-formats.md 6): POST /v1/messages (stream and
// not), POST /v1/messages/count_tokens, GET /v1/models and
// GET /v1/models/{id}. This file holds the endpoints, the auth and header
// checks, the error envelope and the reply (fixture replay or synthetic).

// Anthropic endpoints, the value of handling.endpoint.
const (
	anthMessages    = "messages"
	anthCountTokens = "count_tokens"
	anthModels      = "models"
	anthModel       = "model"
)

// anthropicEndpoint names the Anthropic endpoint of path, or "".
func anthropicEndpoint(path string) string {
	switch path {
	case "/v1/messages":
		return anthMessages
	case "/v1/messages/count_tokens":
		return anthCountTokens
	case "/v1/models":
		return anthModels
	}
	// Gemini's /v1/models/{model}:generateContent always has a colon.
	if rest, ok := strings.CutPrefix(path, "/v1/models/"); ok && rest != "" && !strings.ContainsAny(rest, ":/") {
		return anthModel
	}
	return ""
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// anthropicID returns prefix followed by n base62 characters derived from
// seed: deterministic ids in the shape of msg_01…, toolu_01…, req_011C….
func anthropicID(prefix, seed string, n int) string {
	var b strings.Builder
	b.WriteString(prefix)
	for ctr := 0; b.Len() < len(prefix)+n; ctr++ {
		h := sha256.Sum256([]byte(seed + "\x00" + strconv.Itoa(ctr)))
		for _, c := range h {
			if b.Len() == len(prefix)+n {
				break
			}
			b.WriteByte(base62[int(c)%len(base62)])
		}
	}
	return b.String()
}

type anthErr struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// anthropicErrorBody composes the Anthropic envelope (6.8) laid out like the
// error fixtures: {"type":"error","error":{"type","message"},"request_id"}.
// The request id is derived from the message, so equal errors are equal.
func anthropicErrorBody(typ, message string) []byte {
	return marshalPretty(struct {
		Type      string  `json:"type"`
		Error     anthErr `json:"error"`
		RequestID string  `json:"request_id"`
	}{"error", anthErr{typ, message}, anthropicID("req_011C", typ+"\x00"+message, 20)})
}

// anthropicAuthRejection: 401 authentication_error. The texts for a wrong
// key are captured; the one for no key is from third-party mocks (6.8).
func anthropicAuthRejection(missing, bearer bool) *rejection {
	msg := "invalid x-api-key"
	switch {
	case missing:
		msg = "x-api-key header is required"
	case bearer:
		msg = "Invalid bearer token"
	}
	return &rejection{status: http.StatusUnauthorized, body: anthropicErrorBody("authentication_error", msg), rule: "auth"}
}

// anthropicHeaderRejection checks the credential and anthropic-version. The
// key comes from x-api-key, else Authorization: Bearer (the API uses
// x-api-key when both arrive, 6.1); "invalid" is refused.
func anthropicHeaderRejection(r *http.Request) *rejection {
	key, bearer := r.Header.Get("x-api-key"), false
	if key == "" {
		if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && v != "" {
			key, bearer = v, true
		}
	}
	if key == "" || key == "invalid" {
		return anthropicAuthRejection(key == "", bearer)
	}
	if r.Header.Get("anthropic-version") == "" {
		return anthInvalid("anthropic-version: header is required", "anthropic-version")
	}
	return nil
}

// anthropicStatusRejection is the X-Mock-Status body: the status's error
// type of 6.8 with its captured message where one exists (529 is the
// error.overloaded fixture).
func anthropicStatusRejection(status int) *rejection {
	const rule = "knob-status"
	if status == 529 {
		return fixtureRejection(provAnthropic, "error.overloaded", status, rule)
	}
	typ, msg := "invalid_request_error", http.StatusText(status)
	switch status {
	case 401:
		typ, msg = "authentication_error", "invalid x-api-key"
	case 402:
		typ = "billing_error"
	case 403:
		typ, msg = "permission_error", "Your API key does not have permission to use the specified resource."
	case 404:
		typ = "not_found_error"
	case 409:
		typ = "conflict_error"
	case 413:
		typ, msg = "request_too_large", "Request exceeds the maximum allowed number of bytes."
	case 429:
		typ, msg = "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit (https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later. You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase."
	case 500:
		typ, msg = "api_error", "Internal server error"
	case 504:
		typ = "timeout_error"
	default:
		if status >= 500 {
			typ = "api_error"
		}
	}
	if msg == "" {
		msg = "Status " + strconv.Itoa(status)
	}
	return &rejection{status: status, body: anthropicErrorBody(typ, msg), rule: rule}
}

// anthropicModelList is what GET /v1/models answers, newest first.
var anthropicModelList = []struct {
	id, name, created string
	maxTokens         int
}{
	{"claude-opus-4-5-20251101", "Claude Opus 4.5", "2025-11-24T00:00:00Z", 64000},
	{"claude-haiku-4-5-20251001", "Claude Haiku 4.5", "2025-10-15T00:00:00Z", 64000},
	{"claude-sonnet-4-5-20250929", "Claude Sonnet 4.5", "2025-09-29T00:00:00Z", 64000},
	{"claude-opus-4-1-20250805", "Claude Opus 4.1", "2025-08-05T00:00:00Z", 32000},
}

func anthropicModelJSON(i int) string {
	m := anthropicModelList[i]
	return fmt.Sprintf(`{"type":"model","id":%q,"display_name":%q,"created_at":%q,"max_input_tokens":200000,"max_tokens":%d}`, m.id, m.name, m.created, m.maxTokens)
}

// anthropicModels answers GET /v1/models (limit, after_id, before_id) and
// GET /v1/models/{id} (404 not_found_error for an unknown id).
func (h *handling) anthropicModels() {
	if h.endpoint == anthModel {
		id := strings.TrimPrefix(h.r.URL.Path, "/v1/models/")
		for i, m := range anthropicModelList {
			if m.id == id {
				h.whole(http.StatusOK, "application/json", []byte(anthropicModelJSON(i)), "")
				return
			}
		}
		h.reject(&rejection{http.StatusNotFound, anthropicErrorBody("not_found_error", "model: "+id), "anthropic-unknown-model"})
		return
	}
	q := h.r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			h.reject(anthInvalid("limit: Input should be between 1 and 1000", "anthropic-models-limit")) // composed
			return
		}
		limit = n
	}
	idx := func(id string) int {
		for i, m := range anthropicModelList {
			if m.id == id {
				return i
			}
		}
		return -1
	}
	n := len(anthropicModelList)
	var lo, hi int
	var hasMore bool
	if b := idx(q.Get("before_id")); b >= 0 && q.Get("after_id") == "" {
		hi = b
		lo = max(0, hi-limit)
		hasMore = lo > 0
	} else {
		lo = idx(q.Get("after_id")) + 1 // 0 without after_id
		hi = min(lo+limit, n)
		hasMore = hi < n
	}
	var b bytes.Buffer
	b.WriteString(`{"data":[`)
	for i := lo; i < hi; i++ {
		if i > lo {
			b.WriteByte(',')
		}
		b.WriteString(anthropicModelJSON(i))
	}
	first, last := "null", "null"
	if hi > lo {
		first, last = strconv.Quote(anthropicModelList[lo].id), strconv.Quote(anthropicModelList[hi-1].id)
	}
	fmt.Fprintf(&b, `],"has_more":%t,"first_id":%s,"last_id":%s}`, hasMore, first, last)
	h.whole(http.StatusOK, "application/json", b.Bytes(), "")
}

// anthropicCountTokens answers POST /v1/messages/count_tokens after the same
// validation as /v1/messages (max_tokens not required).
func (h *handling) anthropicCountTokens() {
	segs := anthropicPrompt(h.anth)
	n := 0
	if len(segs) > 0 {
		n = segs[len(segs)-1].tokens
	}
	h.whole(http.StatusOK, "application/json", fmt.Appendf(nil, `{"input_tokens":%d}`, max(n, 1)), "")
}

// defaultAnthropicScenario: parallel-tools when the request declares client
// tools and ends with a prompt, else thinking when thinking is on, else text.
func (r *anthReq) defaultScenario() string {
	switch {
	case len(r.callableTools()) > 0 && r.lastIsPrompt():
		return "parallel-tools"
	case r.thinkingOn():
		return "thinking"
	}
	return "text"
}

// replyAnthropic answers a valid Messages request: the synthetic answer
// (X-Mock-Scenario: synthetic) or a fixture replayed byte for byte.
func (h *handling) replyAnthropic() {
	stream := gjson.GetBytes(h.body, "stream").Bool()
	name := h.k.scenario
	if name == "" {
		name = h.anth.defaultScenario()
	}
	h.s.update(h.e, func(q *Request) { q.Scenario = name })
	if h.k.streamError >= 0 {
		if !stream {
			h.mockError(http.StatusBadRequest, "X-Mock-Stream-Error: needs \"stream\": true")
			return
		}
		if b := h.k.errorBody; b != "" && errorFixture(provAnthropic, "error."+strings.TrimPrefix(b, "error.")) == nil {
			h.mockError(http.StatusBadRequest, fmt.Sprintf("X-Mock-Error-Body: no fixture %s/error.%s.json", provAnthropic, strings.TrimPrefix(b, "error.")))
			return
		}
	}
	if name == "synthetic" {
		a := h.anthropicSynthetic()
		h.s.anth.remember(a.refs())
		if stream {
			h.stream(h.withStreamError(a.events()), "text/event-stream")
		} else {
			h.whole(http.StatusOK, "application/json", a.json(), "")
		}
		return
	}
	sc := loaded[provAnthropic].scenarios[name]
	switch {
	case sc == nil:
		h.mockError(http.StatusBadRequest, fmt.Sprintf("X-Mock-Scenario: no fixture %q in %s", name, provAnthropic))
	case stream && sc.events == nil:
		h.mockError(http.StatusBadRequest, fmt.Sprintf("X-Mock-Scenario: %s/%s has no .sse (stream) body", provAnthropic, name))
	case stream:
		h.stream(h.withStreamError(fixedEvents(sc.events)), "text/event-stream")
	case sc.json == nil:
		h.mockError(http.StatusBadRequest, fmt.Sprintf("X-Mock-Scenario: %s/%s has no .json (non-stream) body", provAnthropic, name))
	default:
		h.whole(http.StatusOK, "application/json", sc.json, "")
	}
}

// errorAfter is a stream cut after n events by an `event: error` event.
type errorAfter struct {
	src eventSource
	n   int
	ev  []byte
}

func (e *errorAfter) Len() int { return min(e.n, e.src.Len()) + 1 }

func (e *errorAfter) Event(i int, buf []byte) []byte {
	if i < min(e.n, e.src.Len()) {
		return e.src.Event(i, buf)
	}
	return e.ev
}

// withStreamError applies X-Mock-Stream-Error: N events, then an
// `event: error` carrying overloaded_error (6.7: 2026 captures add
// "details":null and the request id), or the X-Mock-Error-Body fixture.
func (h *handling) withStreamError(src eventSource) eventSource {
	if h.k.streamError < 0 {
		return src
	}
	data := []byte(`{"type":"error","error":{"details":null,"type":"overloaded_error","message":"Overloaded"},"request_id":"` + h.w.Header().Get("request-id") + `"}`)
	if h.k.errorBody != "" {
		var buf bytes.Buffer
		if json.Compact(&buf, errorFixture(provAnthropic, "error."+strings.TrimPrefix(h.k.errorBody, "error."))) == nil {
			data = buf.Bytes()
		}
	}
	return &errorAfter{src: src, n: h.k.streamError, ev: respEvent("error", string(data))}
}
