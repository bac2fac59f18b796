package adapters

import "github.com/chronicle-proxy/chronicle/adapters/rawjson"

// MaxOutputTokens returns the output-token cap a request body sets, in any
// of the wire formats (OpenAI chat max_completion_tokens or max_tokens,
// Responses max_output_tokens, Gemini generationConfig.maxOutputTokens), or
// 0 when it sets none. Rate limiting reserves it at admission.
func MaxOutputTokens(body []byte) int64 {
	for _, path := range []string{"max_completion_tokens", "max_tokens", "max_output_tokens", "generationConfig.maxOutputTokens"} {
		if v := rawjson.Get(body, path); v.Exists() && v.Int() > 0 {
			return v.Int()
		}
	}
	return 0
}
