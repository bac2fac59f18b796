package mock

import (
	"testing"
)

// FuzzRules feeds arbitrary bodies to every provider's parser and rules:
// they must never panic, whatever the JSON.
func FuzzRules(f *testing.F) {
	if err := load(); err != nil {
		f.Fatal(err)
	}
	for _, p := range []string{
		"openai-chat/request.tool-results.json", "deepseek/request.tool-results.json",
		"gemini/request.tool-results.json", "gemini-openai/request.tool-results.json",
		"openai-responses/request.tool-results.json", "openai-responses/request.previous-response-id.json",
	} {
		f.Add(fx(f, p))
	}
	f.Add([]byte(`{"messages":[{"role":"tool"},{"role":"assistant","tool_calls":[{}]}],"contents":[{"role":"model","parts":[{"functionCall":{}}]}],"input":[{"type":"function_call_output"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		cr := parseChat(body)
		for _, d := range []chatDialect{openAIDialect, deepSeekDialect, geminiOpenAIDialect} {
			for _, rule := range chatPairingRules {
				_ = rule(cr, d)
			}
		}
		for _, gen := range []string{"r1", "v3.2", "v4"} {
			for _, rule := range deepSeekThinkingRules {
				_ = rule(cr, gen)
			}
		}
		cr.model = "gemini-3-pro"
		_ = ruleGeminiOpenAIThoughtSignature(cr)
		gr := parseGemini("gemini-3-pro-preview", body)
		for _, rule := range geminiRules {
			_ = rule(gr)
		}
		rr := parseResponses(body)
		for _, rule := range responsesRules {
			_ = rule(rr)
		}
	})
}
