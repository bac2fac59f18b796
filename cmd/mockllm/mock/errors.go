package mock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// rejection is an answer the mock gives instead of a completion: the status,
// the provider-shaped body and the name of the rule (or knob) that chose it.
type rejection struct {
	status int
	body   []byte
	rule   string
}

// A template is an error fixture whose fixture-specific values (ids, message
// indices, function names) are replaced by the values of the request at
// hand. With the fixture's own values the body is the fixture byte for byte.
type template struct {
	prov   provider
	name   string
	values []string // the substrings of the fixture that fill replaces, in order
}

var (
	tmplOpenAIUnanswered = template{provOpenAI, "error.unanswered-tool-calls", []string{"call_DNYTawLBoN8fj3KN6qU9N1Ou", "messages.[3].role"}}
	tmplOpenAIOrphan     = template{provOpenAI, "error.orphan-tool-message", []string{"messages.[2].role"}}
	tmplDeepSeekV32      = template{provDeepSeek, "error.missing-reasoning-content-v32", []string{"message index 2."}}
	tmplGeminiMissingSig = template{provGemini, "error.missing-thought-signature", []string{"`default_api:get_weather` , position 2."}}
	tmplGOAIMissingSig   = template{provGeminiOpenAI, "error.missing-thought-signature", []string{"`default_api:get_weather` , position 2."}}
	tmplRespNoOutput     = template{provResponses, "error.no-tool-output", []string{"call_XAS6JGzqCNWmO52wVwD9kh8w"}}
	tmplRespNoCall       = template{provResponses, "error.no-tool-call-for-output", []string{"call_XAS6JGzqCNWmO52wVwD9kh8w"}}
	tmplAnthUnanswered   = template{provAnthropic, "error.tool-use-without-result", []string{"messages.1:", "immediately after: toolu_016t3H0gpONSuLusGiIbIpCu."}}
	tmplAnthUnexpected   = template{provAnthropic, "error.tool-result-without-use", []string{"messages.2.content.0:", "blocks: toolu_01TzKb9eUtnJodw30dXxCNFG."}}
	tmplAnthBadSignature = template{provAnthropic, "error.invalid-thinking-signature", []string{"messages.1.content.0:"}}
	allTemplates         = []template{tmplOpenAIUnanswered, tmplOpenAIOrphan, tmplDeepSeekV32, tmplGeminiMissingSig, tmplGOAIMissingSig, tmplRespNoOutput, tmplRespNoCall,
		tmplAnthUnanswered, tmplAnthUnexpected, tmplAnthBadSignature}
)

// checkTemplates fails the load when a fixture no longer holds a value that a
// template replaces, so a changed fixture cannot silently stop being filled.
func checkTemplates() error {
	for _, t := range allTemplates {
		b := errorFixture(t.prov, t.name)
		if b == nil {
			return fmt.Errorf("mock: fixture %s/%s.json missing", t.prov, t.name)
		}
		for _, v := range t.values {
			if !bytes.Contains(b, []byte(v)) {
				return fmt.Errorf("mock: fixture %s/%s.json no longer contains %q", t.prov, t.name, v)
			}
		}
	}
	return nil
}

// fill returns the fixture with each template value replaced by the matching
// replacement (raw text, JSON-escaped here).
func (t template) fill(repl ...string) []byte {
	b := errorFixture(t.prov, t.name)
	for i, v := range t.values {
		if i < len(repl) && repl[i] != v {
			b = bytes.Replace(b, []byte(v), []byte(jsonEscape(repl[i])), 1)
		}
	}
	return b
}

// jsonEscape returns s escaped for use inside a JSON string, without quotes.
func jsonEscape(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	out := bytes.TrimSpace(buf.Bytes())
	return string(out[1 : len(out)-1])
}

func fixtureRejection(p provider, name string, status int, rule string) *rejection {
	return &rejection{status: status, body: errorFixture(p, name), rule: rule}
}

// marshalPretty renders v like the fixtures: two-space indent, no HTML escaping, trailing newline.
func marshalPretty(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
	return buf.Bytes()
}

type openAIErr struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func strp(s string) *string { return &s }

// openAIErrorBody composes the {"error":{message,type,param,code}} envelope
// that OpenAI (chat and Responses) and DeepSeek use.
func openAIErrorBody(message, typ string, param, code *string) []byte {
	return marshalPretty(struct {
		Error openAIErr `json:"error"`
	}{openAIErr{message, typ, param, code}})
}

type googleErr struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Status  string `json:"status"`
}

// googleErrorBody composes the Google envelope {"error":{code,message,status}}.
func googleErrorBody(code int, message, status string) []byte {
	return marshalPretty(struct {
		Error googleErr `json:"error"`
	}{googleErr{code, message, status}})
}

// wrapArray turns a Google error body into the form Gemini's OpenAI-compatible
// endpoint answers: the same object inside a JSON array (wire-formats.md 4.5).
func wrapArray(body []byte) []byte {
	var buf bytes.Buffer
	buf.WriteString("[\n")
	lines := strings.Split(strings.TrimRight(string(body), "\n"), "\n")
	for i, l := range lines {
		buf.WriteString("  ")
		buf.WriteString(l)
		if i < len(lines)-1 {
			buf.WriteByte('\n')
		}
	}
	buf.WriteString("\n]\n")
	return buf.Bytes()
}

// googleRejection answers a Google-shaped error, array-wrapped for gemini-openai.
func googleRejection(p provider, status int, message, grpc, rule string) *rejection {
	body := googleErrorBody(status, message, grpc)
	if p == provGeminiOpenAI {
		body = wrapArray(body)
	}
	return &rejection{status: status, body: body, rule: rule}
}

// authRejection answers a missing or rejected credential. OpenAI's bodies are
// composed from wire-formats.md 1.4 (401, invalid_request_error,
// invalid_api_key); DeepSeek's and Gemini's are the fixtures (Gemini answers
// 400 API_KEY_INVALID, array-wrapped on its OpenAI-compatible endpoint).
func authRejection(p provider, missing bool) *rejection {
	switch p {
	case provAnthropic:
		return anthropicAuthRejection(missing, false)
	case provDeepSeek:
		return fixtureRejection(p, "error.auth", http.StatusUnauthorized, "auth")
	case provGemini:
		return fixtureRejection(p, "error.api-key-invalid", http.StatusBadRequest, "auth")
	case provGeminiOpenAI:
		return &rejection{status: http.StatusBadRequest, body: wrapArray(errorFixture(provGemini, "error.api-key-invalid")), rule: "auth"}
	}
	if missing {
		return &rejection{status: http.StatusUnauthorized, rule: "auth", body: openAIErrorBody(
			"You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're accessing the API from your browser and are prompted for a username. You can obtain an API key from https://platform.openai.com/account/api-keys.",
			"invalid_request_error", nil, nil)}
	}
	return &rejection{status: http.StatusUnauthorized, rule: "auth", body: openAIErrorBody(
		"Incorrect API key provided: invalid. You can find your API key at https://platform.openai.com/account/api-keys.",
		"invalid_request_error", nil, strp("invalid_api_key"))}
}

// invalidJSONRejection answers a body that is not JSON. All composed: OpenAI's
// text is its well-known parse error; DeepSeek's envelope follows 3.4 with the
// "Invalid Format" status text of its error-code docs; Google's follows 4.4.
func invalidJSONRejection(p provider) *rejection {
	const rule = "invalid-json"
	switch p {
	case provAnthropic:
		// Composed: the envelope of 6.8, wording not captured.
		return &rejection{status: 400, rule: rule, body: anthropicErrorBody("invalid_request_error", "The request body is not valid JSON.")}
	case provOpenAI, provResponses:
		return &rejection{status: 400, rule: rule, body: openAIErrorBody(
			"We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, please contact us through our help center at help.openai.com.)",
			"invalid_request_error", nil, nil)}
	case provDeepSeek:
		return &rejection{status: 400, rule: rule, body: openAIErrorBody(
			"Invalid Format: the request body is not valid JSON", "invalid_request_error", nil, strp("invalid_request_error"))}
	default:
		return googleRejection(p, 400, "Invalid JSON payload received. Unexpected token.", "INVALID_ARGUMENT", rule)
	}
}

var grpcStatus = map[int]string{
	400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
	409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL", 501: "NOT_IMPLEMENTED",
	503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED",
}

// statusRejection builds the answer of the X-Mock-Status knob: the named error
// fixture of the provider folder when given, else a composed provider-shaped
// body for that status (real fixtures are used where one matches the status).
func statusRejection(p provider, status int, bodyName string) (*rejection, error) {
	if bodyName != "" {
		if !strings.HasPrefix(bodyName, "error.") {
			bodyName = "error." + bodyName
		}
		b := errorFixture(p, bodyName)
		if b == nil {
			return nil, fmt.Errorf("no fixture %s/%s.json", p, bodyName)
		}
		return &rejection{status: status, body: b, rule: "knob-status"}, nil
	}
	const rule = "knob-status"
	text := http.StatusText(status)
	if text == "" {
		text = "Status " + strconv.Itoa(status)
	}
	switch p {
	case provAnthropic:
		return anthropicStatusRejection(status), nil
	case provOpenAI, provResponses:
		switch status {
		case 401:
			r := authRejection(p, false)
			r.rule = rule
			return r, nil
		case 429:
			return &rejection{status: status, rule: rule, body: openAIErrorBody(
				"Rate limit reached for requests. Please try again later.", "requests", nil, strp("rate_limit_exceeded"))}, nil
		case 500:
			return &rejection{status: status, rule: rule, body: openAIErrorBody(
				"The server had an error while processing your request. Sorry about that!", "server_error", nil, nil)}, nil
		case 503:
			return &rejection{status: status, rule: rule, body: openAIErrorBody(
				"The engine is currently overloaded, please try again later", "server_error", nil, nil)}, nil
		}
		typ := "invalid_request_error"
		if status >= 500 {
			typ = "server_error"
		}
		return &rejection{status: status, rule: rule, body: openAIErrorBody(text, typ, nil, nil)}, nil
	case provDeepSeek:
		switch status {
		case 401:
			return fixtureRejection(p, "error.auth", status, rule), nil
		case 402:
			return fixtureRejection(p, "error.insufficient-balance", status, rule), nil
		}
		// Status texts of api-docs.deepseek.com "Error Codes".
		msg := map[int]string{400: "Invalid Format", 422: "Invalid Parameters", 429: "Rate Limit Reached",
			500: "Server Error", 503: "Server Overloaded"}[status]
		if msg == "" {
			msg = text
		}
		typ := "invalid_request_error"
		if status >= 500 {
			typ = "server_error"
		}
		return &rejection{status: status, rule: rule, body: openAIErrorBody(msg, typ, nil, strp("invalid_request_error"))}, nil
	default:
		if status == 429 && p == provGemini {
			return fixtureRejection(p, "error.rate-limit", status, rule), nil
		}
		grpc := grpcStatus[status]
		if grpc == "" {
			grpc = "UNKNOWN"
		}
		msg := text
		switch status {
		case 429:
			msg = "You exceeded your current quota, please check your plan."
		case 500:
			msg = "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting"
		case 503:
			msg = "The model is overloaded. Please try again later."
		}
		return googleRejection(p, status, msg, grpc, rule), nil
	}
}
