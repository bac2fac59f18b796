package adapters

import "github.com/tidwall/gjson"

// ShapeProblem says what is wrong with a generate request body, valid
// JSON, in which the format's history member (messages, contents, input)
// was not found as MessagesKnown reads it: "" when the body is a JSON
// object without that member (or with it null), which continues the
// stored thread; otherwise one sentence for the caller, naming the member
// the format expects. It reads only bodies the fast path refused, so it
// costs nothing on a request that has its history.
func ShapeProblem(f Format, body []byte) string {
	root := gjson.ParseBytes(body)
	member, want := "messages", `The request body must be a JSON object with a "messages" array.`
	switch f {
	case FormatGemini:
		member, want = "contents", `The request body must be a JSON object with a "contents" array.`
	case FormatOpenAIResponses:
		member, want = "input", `The request body must be a JSON object whose "input" is a string or an array of items.`
	}
	if !root.IsObject() {
		return want
	}
	switch v := root.Get(member); {
	case !v.Exists(), v.Type == gjson.Null:
		return ""
	default:
		return want
	}
}

// MissingModel is the provider's own refusal of a generate request that
// names no model, where the provider wants it in the body (OpenAI chat
// completions and the Responses API; Gemini names the model in the path,
// and other dialects are left to their upstream): its status and body,
// and ok=false when the provider accepts such a request.
func MissingModel(a Adapter, model string) (status int, body []byte, ok bool) {
	if model != "" {
		return 0, nil, false
	}
	switch a := a.(type) {
	case *OpenAIChat:
		if a.d.Name != OpenAI.Name {
			return 0, nil, false
		}
		// What api.openai.com answers (400), byte for byte.
		return 400, []byte(`{"error":{"message":"you must provide a model parameter","type":"invalid_request_error","param":null,"code":null}}`), true
	case *Responses:
		return 400, []byte(`{"error":{"message":"Missing required parameter: 'model'.","type":"invalid_request_error","param":"model","code":"missing_required_parameter"}}`), true
	}
	return 0, nil, false
}
