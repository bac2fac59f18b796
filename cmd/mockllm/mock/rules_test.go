package mock

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	pathChat     = "/v1/chat/completions"
	pathDeepSeek = "/chat/completions"
	pathGOAI     = "/v1beta/openai/chat/completions"
	pathGemini3  = "/v1beta/models/gemini-3-pro-preview:generateContent"
	pathGemini25 = "/v1beta/models/gemini-2.5-flash:generateContent"
	pathResp     = "/v1/responses"
)

// TestRules checks every strictness rule: the valid history is accepted, the
// broken variant is rejected with exactly the status and body the real
// provider answers (the fixture byte for byte where one exists; for composed
// bodies the rule and a distinctive substring).
func TestRules(t *testing.T) {
	s := startMock(t)
	oaTR := fx(t, "openai-chat/request.tool-results.json")
	dsTR := fx(t, "deepseek/request.tool-results.json")
	gTR := fx(t, "gemini/request.tool-results.json")
	goaTR := fx(t, "gemini-openai/request.tool-results.json")
	rTR := fx(t, "openai-responses/request.tool-results.json")
	firstOAID := "call_JMW1whyEaYG438VE1OIflxA2"
	firstDSID := "call_00_mZGagcs09JjCniu4IpalMdlM"
	r1 := []string{"X-Mock-DeepSeek-Generation", "r1"}
	dsText := []byte(`{"model":"deepseek-reasoner","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}`)

	tests := []struct {
		name       string
		path       string
		header     []string
		valid      []byte
		broken     []byte
		wantStatus int
		wantBody   []byte // exact; nil: check wantRule and wantSub
		wantRule   string
		wantSub    string
	}{
		// OpenAI chat.
		{name: "openai unanswered tool call", path: pathChat, valid: oaTR, broken: edit(t, oaTR, "messages.4", nil),
			wantStatus: 400, wantBody: fx(t, "openai-chat/error.unanswered-tool-calls.json"), wantRule: "chat-unanswered-tool-calls"},
		{name: "openai history ends with tool_calls", path: pathChat, valid: oaTR, broken: edit(t, oaTR, "messages.4", nil, "messages.3", nil),
			wantStatus: 400, wantRule: "chat-unanswered-tool-calls", wantSub: `did not have response messages: call_JMW1whyEaYG438VE1OIflxA2, call_DNYTawLBoN8fj3KN6qU9N1Ou",`},
		{name: "openai tool_calls followed by user", path: pathChat, valid: oaTR, broken: edit(t, oaTR, "messages.4", map[string]any{"role": "user", "content": "x"}),
			wantStatus: 400, wantRule: "chat-unanswered-tool-calls", wantSub: `"param": "messages.[4].role"`},
		{name: "openai orphan tool message", path: pathChat, valid: oaTR, broken: edit(t, oaTR, "messages.2", nil),
			wantStatus: 400, wantBody: fx(t, "openai-chat/error.orphan-tool-message.json"), wantRule: "chat-tool-without-call"},
		{name: "openai tool id not in tool_calls", path: pathChat, valid: oaTR, broken: edit(t, oaTR, "messages.4.tool_call_id", "call_other"),
			wantStatus: 400, wantRule: "chat-tool-without-call", wantSub: `'tool_call_id' of 'call_other' not found in 'tool_calls' of previous message.`},
		{name: "openai duplicate tool answer", path: pathChat, valid: oaTR, broken: edit(t, oaTR, "messages.4.tool_call_id", firstOAID),
			wantStatus: 400, wantRule: "chat-duplicate-tool-call-id", wantSub: `Duplicate value for 'tool_call_id' of '` + firstOAID + `', in messages[3] and messages[4].`},
		{name: "openai duplicate tool call id", path: pathChat, valid: oaTR, broken: edit(t, oaTR, "messages.2.tool_calls.1.id", firstOAID),
			wantStatus: 400, wantRule: "chat-duplicate-tool-call-id", wantSub: `Duplicate value for 'tool_calls.id'`},

		// DeepSeek (V4 model in the fixture).
		{name: "deepseek unanswered tool call", path: pathDeepSeek, valid: dsTR, broken: edit(t, dsTR, "messages.4", nil),
			wantStatus: 400, wantBody: fx(t, "deepseek/error.insufficient-tool-messages.json"), wantRule: "chat-unanswered-tool-calls"},
		{name: "deepseek tool without call", path: pathDeepSeek, valid: dsTR, broken: edit(t, dsTR, "messages.2", nil),
			wantStatus: 400, wantBody: fx(t, "deepseek/error.tool-without-call.json"), wantRule: "chat-tool-without-call"},
		{name: "deepseek duplicate tool call id", path: pathDeepSeek, valid: dsTR, broken: edit(t, dsTR, "messages.2.tool_calls.1.id", firstDSID),
			wantStatus: 400, wantRule: "chat-duplicate-tool-call-id", wantSub: `"code": "invalid_request_error"`},
		{name: "deepseek v4 reasoning_content missing on tool-call turn", path: pathDeepSeek, valid: dsTR, broken: edit(t, dsTR, "messages.2.reasoning_content", nil),
			wantStatus: 400, wantBody: fx(t, "deepseek/error.reasoning-content-not-passed-back.json"), wantRule: "deepseek-v4-reasoning-content"},
		{name: "deepseek v4 reasoning_content missing on a text turn", path: pathDeepSeek,
			valid:      edit(t, dsTR, "messages.-1", map[string]any{"role": "assistant", "content": "done", "reasoning_content": ""}),
			broken:     edit(t, dsTR, "messages.-1", map[string]any{"role": "assistant", "content": "done"}),
			wantStatus: 400, wantBody: fx(t, "deepseek/error.reasoning-content-not-passed-back.json"), wantRule: "deepseek-v4-reasoning-content"},
		{name: "deepseek v4 thinking disabled needs no reasoning", path: pathDeepSeek,
			valid:      edit(t, dsTR, "messages.2.reasoning_content", nil, "thinking.type", "disabled"),
			broken:     edit(t, dsTR, "messages.2.reasoning_content", nil),
			wantStatus: 400, wantBody: fx(t, "deepseek/error.reasoning-content-not-passed-back.json"), wantRule: "deepseek-v4-reasoning-content"},
		{name: "deepseek v3.2 reasoning_content missing", path: pathDeepSeek,
			valid:      edit(t, dsTR, "model", "deepseek-reasoner"),
			broken:     edit(t, dsTR, "model", "deepseek-reasoner", "messages.2.reasoning_content", nil),
			wantStatus: 400, wantBody: fx(t, "deepseek/error.missing-reasoning-content-v32.json"), wantRule: "deepseek-v32-reasoning-content"},
		{name: "deepseek v3.2 later request still needs it", path: pathDeepSeek,
			valid:      edit(t, dsTR, "model", "deepseek-reasoner", "messages.-1", map[string]any{"role": "user", "content": "next"}),
			broken:     edit(t, dsTR, "model", "deepseek-reasoner", "messages.2.reasoning_content", nil, "messages.-1", map[string]any{"role": "user", "content": "next"}),
			wantStatus: 400, wantBody: fx(t, "deepseek/error.missing-reasoning-content-v32.json"), wantRule: "deepseek-v32-reasoning-content"},
		{name: "deepseek v3.2 text exchange needs none", path: pathDeepSeek, valid: dsText,
			broken:     []byte(`{"model":"deepseek-reasoner","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"r"},{"role":"user","content":"c"}]}`),
			wantStatus: 400, wantRule: "deepseek-v32-reasoning-content", wantSub: "message index 1."},
		{name: "deepseek r1 rejects reasoning_content in input", path: pathDeepSeek, header: r1,
			valid: edit(t, dsTR, "messages.2.reasoning_content", nil), broken: dsTR,
			wantStatus: 400, wantRule: "deepseek-r1-reasoning-in-input", wantSub: "messages[2]"},
		{name: "deepseek r1 successive roles", path: pathDeepSeek, header: r1,
			valid: edit(t, dsText, "model", "deepseek-r1"), broken: edit(t, dsText, "model", "deepseek-r1", "messages.1.role", "user"),
			wantStatus: 400, wantRule: "deepseek-r1-successive-roles", wantSub: "(messages[0] and messages[1] in your input)"},

		// Gemini native.
		{name: "gemini missing thought signature", path: pathGemini3, valid: gTR, broken: edit(t, gTR, "contents.1.parts.1.thoughtSignature", nil),
			wantStatus: 400, wantBody: fx(t, "gemini/error.missing-thought-signature.json"), wantRule: "gemini-missing-thought-signature"},
		{name: "gemini placeholder signature accepted", path: pathGemini3,
			valid:      edit(t, gTR, "contents.1.parts.1.thoughtSignature", "skip_thought_signature_validator"),
			broken:     edit(t, gTR, "contents.1.parts.1.thoughtSignature", "bm90IGEgc2lnbmF0dXJl"),
			wantStatus: 400, wantBody: fx(t, "gemini/error.corrupted-thought-signature.json"), wantRule: "gemini-corrupted-thought-signature"},
		{name: "gemini 2.5 does not enforce signatures", path: pathGemini25,
			valid:      edit(t, gTR, "contents.1.parts.1.thoughtSignature", nil),
			broken:     edit(t, gTR, "contents.2.parts.1", nil),
			wantStatus: 400, wantRule: "gemini-call-without-response", wantSub: "number of function response parts"},
		{name: "gemini older turn not validated", path: pathGemini3,
			valid: edit(t, gTR, "contents.1.parts.1.thoughtSignature", nil,
				"contents.-1", map[string]any{"role": "model", "parts": []any{map[string]any{"text": "ok"}}},
				"contents.-1", map[string]any{"role": "user", "parts": []any{map[string]any{"text": "more"}}}),
			broken:     edit(t, gTR, "contents.1.parts.1.thoughtSignature", nil),
			wantStatus: 400, wantBody: fx(t, "gemini/error.missing-thought-signature.json"), wantRule: "gemini-missing-thought-signature"},
		{name: "gemini call without response", path: pathGemini3, valid: gTR, broken: edit(t, gTR, "contents.2.parts.1", nil),
			wantStatus: 400, wantRule: "gemini-call-without-response", wantSub: `"status": "INVALID_ARGUMENT"`},
		{name: "gemini response without call", path: pathGemini3, valid: gTR, broken: edit(t, gTR, "contents.1", nil),
			wantStatus: 400, wantRule: "gemini-response-without-call", wantSub: "function response turn comes immediately after a function call turn"},

		// Gemini OpenAI-compatible.
		{name: "gemini-openai missing thought signature", path: pathGOAI, valid: goaTR, broken: edit(t, goaTR, "messages.1.tool_calls.0.extra_content", nil),
			wantStatus: 400, wantBody: fx(t, "gemini-openai/error.missing-thought-signature.json"), wantRule: "gemini-missing-thought-signature"},
		{name: "gemini-openai on the plain chat path", path: pathChat, valid: goaTR, broken: edit(t, goaTR, "messages.1.tool_calls.0.extra_content", nil),
			wantStatus: 400, wantBody: fx(t, "gemini-openai/error.missing-thought-signature.json"), wantRule: "gemini-missing-thought-signature"},
		{name: "gemini-openai unanswered tool call", path: pathGOAI, valid: goaTR, broken: edit(t, goaTR, "messages.3", nil),
			wantStatus: 400, wantRule: "chat-unanswered-tool-calls", wantSub: "[\n  {\n    \"error\": {"},

		// OpenAI Responses.
		{name: "responses call without output", path: pathResp, valid: rTR, broken: edit(t, rTR, "input.5", nil),
			wantStatus: 400, wantBody: fx(t, "openai-responses/error.no-tool-output.json"), wantRule: "responses-call-without-output"},
		{name: "responses output without call", path: pathResp, valid: rTR, broken: edit(t, rTR, "input.3", nil),
			wantStatus: 400, wantBody: fx(t, "openai-responses/error.no-tool-call-for-output.json"), wantRule: "responses-output-without-call"},
		{name: "responses previous_response_id outputs", path: pathResp,
			valid:      fx(t, "openai-responses/request.previous-response-id.json"),
			broken:     edit(t, fx(t, "openai-responses/request.previous-response-id.json"), "previous_response_id", nil),
			wantStatus: 400, wantRule: "responses-output-without-call", wantSub: "call_dsSRzXOROrILG48hJaEy1JSR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, s, tt.path, tt.valid, tt.header...)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("valid history: status %d, rule %q, body %s", resp.StatusCode, resp.Header.Get("X-Mock-Rule"), body)
			}
			resp, body = post(t, s, tt.path, tt.broken, tt.header...)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("broken history: status %d, want %d; body %s", resp.StatusCode, tt.wantStatus, body)
			}
			if got := resp.Header.Get("X-Mock-Rule"); got != tt.wantRule {
				t.Errorf("rule %q, want %q", got, tt.wantRule)
			}
			if tt.wantBody != nil {
				if diff := cmp.Diff(string(tt.wantBody), string(body)); diff != "" {
					t.Errorf("body differs from fixture (-want +got):\n%s", diff)
				}
			} else if !bytes.Contains(body, []byte(tt.wantSub)) {
				t.Errorf("body lacks %q:\n%s", tt.wantSub, body)
			}
		})
	}
}

// TestRuleBodiesFilled checks that fixture-based bodies carry the request's
// own ids and positions when they differ from the fixture's.
func TestRuleBodiesFilled(t *testing.T) {
	s := startMock(t)
	oa := edit(t, fx(t, "openai-chat/request.tool-results.json"),
		"messages.2.tool_calls.1.id", `call_"q"`, "messages.4", nil)
	_, body := post(t, s, pathChat, oa)
	if want := `did not have response messages: call_\"q\"",`; !bytes.Contains(body, []byte(want)) {
		t.Errorf("body lacks %s:\n%s", want, body)
	}
	g := edit(t, fx(t, "gemini/request.tool-results.json"),
		"contents.0", map[string]any{"role": "model", "parts": []any{map[string]any{"text": "hi"}}},
		"contents.1.parts.1.thoughtSignature", nil, "contents.1.parts.1.functionCall.name", "lookup")
	// contents: model, model(calls), user(responses); the user text is gone,
	// so the whole history is the current turn.
	g = edit(t, g, "contents.2.parts.0.functionResponse.name", "lookup")
	_, body = post(t, s, pathGemini3, g)
	if want := "function call `default_api:lookup` , position 2."; !bytes.Contains(body, []byte(want)) {
		t.Errorf("body lacks %s:\n%s", want, body)
	}
}

func TestAuth(t *testing.T) {
	s := startMock(t)
	chat := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`)
	ds := []byte(`{"model":"deepseek-chat","messages":[{"role":"user","content":"hi"}]}`)
	gem := []byte(`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`)
	tests := []struct {
		name       string
		path       string
		body       []byte
		header     []string
		wantStatus int
		wantBody   []byte
		wantSub    string
	}{
		{name: "openai missing", path: pathChat, body: chat, header: []string{"X-No-Key", "1"}, wantStatus: 401, wantSub: "You didn't provide an API key."},
		{name: "openai invalid", path: pathChat, body: chat, header: []string{"Authorization", "Bearer invalid"}, wantStatus: 401, wantSub: `"code": "invalid_api_key"`},
		{name: "openai x-api-key ok", path: pathChat, body: chat, header: []string{"x-api-key", "k"}, wantStatus: 200},
		{name: "responses missing", path: pathResp, body: []byte(`{"model":"m","input":"hi"}`), header: []string{"X-No-Key", "1"}, wantStatus: 401, wantSub: "You didn't provide an API key."},
		{name: "deepseek missing", path: pathDeepSeek, body: ds, header: []string{"X-No-Key", "1"}, wantStatus: 401, wantBody: fx(t, "deepseek/error.auth.json")},
		{name: "deepseek invalid", path: pathDeepSeek, body: ds, header: []string{"Authorization", "Bearer invalid"}, wantStatus: 401, wantBody: fx(t, "deepseek/error.auth.json")},
		{name: "gemini missing", path: pathGemini3, body: gem, header: []string{"X-No-Key", "1"}, wantStatus: 400, wantBody: fx(t, "gemini/error.api-key-invalid.json")},
		{name: "gemini invalid", path: pathGemini3, body: gem, header: []string{"x-goog-api-key", "invalid"}, wantStatus: 400, wantBody: fx(t, "gemini/error.api-key-invalid.json")},
		{name: "gemini header ok", path: pathGemini3, body: gem, header: []string{"x-goog-api-key", "k"}, wantStatus: 200},
		{name: "gemini query ok", path: pathGemini3 + "?key=k", body: gem, header: []string{"X-No-Key", "1"}, wantStatus: 200},
		{name: "gemini-openai invalid", path: pathGOAI, body: []byte(`{"model":"gemini-3-flash-preview","messages":[]}`), header: []string{"Authorization", "Bearer invalid"}, wantStatus: 400, wantSub: "[\n  {\n    \"error\": {\n      \"code\": 400,\n      \"message\": \"API key not valid."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, s, tt.path, tt.body, tt.header...)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.wantStatus, body)
			}
			if tt.wantBody != nil {
				if diff := cmp.Diff(string(tt.wantBody), string(body)); diff != "" {
					t.Errorf("body (-want +got):\n%s", diff)
				}
			}
			if !bytes.Contains(body, []byte(tt.wantSub)) {
				t.Errorf("body lacks %q: %s", tt.wantSub, body)
			}
		})
	}
	found := false
	for _, r := range s.Requests() {
		found = found || r.RawQuery == "key=k" && r.Status == 200 && r.Header.Get("Authorization") == ""
	}
	if !found {
		t.Error("the ?key= request was not recorded with its query")
	}
}

func TestInvalidJSON(t *testing.T) {
	s := startMock(t)
	for _, tt := range []struct{ path, sub string }{
		{pathChat, "We could not parse the JSON body of your request."},
		{pathResp, "We could not parse the JSON body of your request."},
		{pathGemini3, `"status": "INVALID_ARGUMENT"`},
		{pathGOAI, "[\n  {"},
	} {
		resp, body := post(t, s, tt.path, []byte(`{"model":"gpt-4o","messages":[`))
		if resp.StatusCode != 400 || resp.Header.Get("X-Mock-Rule") != "invalid-json" || !bytes.Contains(body, []byte(tt.sub)) {
			t.Errorf("%s: status %d rule %q body %s", tt.path, resp.StatusCode, resp.Header.Get("X-Mock-Rule"), body)
		}
	}
	// On a chat path the model decides; a broken body still names deepseek.
	resp, body := post(t, s, pathDeepSeek, []byte(`{"model":"deepseek-chat","messages":[`))
	if resp.StatusCode != 400 || !bytes.Contains(body, []byte(`"code": "invalid_request_error"`)) {
		t.Errorf("deepseek: %d %s", resp.StatusCode, body)
	}
}
