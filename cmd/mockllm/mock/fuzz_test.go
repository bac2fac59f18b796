package mock

import (
	"net/http"
	"testing"
)

// FuzzRules feeds arbitrary bodies to every provider's parser and rules
// (and to the Anthropic prompt-cache segmentation and synthetic tool input):
// they must never panic, whatever the JSON.
func FuzzRules(f *testing.F) {
	if err := load(); err != nil {
		f.Fatal(err)
	}
	for _, p := range []string{
		"openai-chat/request.tool-results.json", "deepseek/request.tool-results.json",
		"gemini/request.tool-results.json", "gemini-openai/request.tool-results.json",
		"openai-responses/request.tool-results.json", "openai-responses/request.previous-response-id.json",
		"anthropic/request.parallel-tools.json", "anthropic/request.tool-results.json",
	} {
		f.Add(fx(f, p))
	}
	f.Add([]byte(`{"messages":[{"role":"tool"},{"role":"assistant","tool_calls":[{}]}],"contents":[{"role":"model","parts":[{"functionCall":{}}]}],"input":[{"type":"function_call_output"}]}`))
	f.Add([]byte(`{"thinking":{"type":"enabled"},"cache_control":{"ttl":"1h"},"messages":[{"role":"user","content":[{"type":"tool_result"}]},{"role":"assistant","content":[{"type":"thinking"},{"type":"server_tool_use","id":"a"},{"type":"tool_use","id":"a","input":"x"}]},{"role":"assistant","content":""},{"role":"user","content":[{"type":"text","text":" ","cache_control":{"ttl":"2h"}}]}]}`))
	mem := newAnthropicState()
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
		for _, h := range []http.Header{{"Anthropic-Version": {"2026-10-21"}}, {"Anthropic-Beta": {"interleaved-thinking-2025-05-14"}}} {
			for _, count := range []bool{false, true} {
				ar := parseAnthropic(body, h, count)
				ar.mem = mem
				for _, rule := range anthropicRules {
					_ = rule(ar)
				}
				_ = anthropicPrompt(ar)
				_ = ar.defaultScenario()
				for _, tool := range ar.callableTools() {
					_ = synthToolInput(tool)
				}
			}
		}
	})
}
