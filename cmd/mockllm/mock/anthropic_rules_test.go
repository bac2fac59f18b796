package mock

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"
)

const (
	pathAnthropic      = "/v1/messages"
	pathAnthropicCount = "/v1/messages/count_tokens"
	anthModelID        = "claude-sonnet-4-5-20250929"
)

// anthMsgText is the error.message of an Anthropic error body.
func anthMsgText(body []byte) string { return gjson.GetBytes(body, "error.message").String() }

// TestAnthropicRules checks every Anthropic strictness rule: the repaired
// history is accepted, the broken one is rejected with the real API's status
// and text (the fixture byte for byte where one exists, else the exact
// error.message in the fixtures' envelope).
func TestAnthropicRules(t *testing.T) {
	s := startMock(t)
	tr := fx(t, "anthropic/request.tool-results.json") // thinking on, fixture signature
	paris, tokyo := "toolu_01TzKb9eUtnJodw30dXxCNFG", "toolu_016t3H0gpONSuLusGiIbIpCu"
	plain := []byte(`{"model":"` + anthModelID + `","max_tokens":1024,"messages":[{"role":"user","content":"hi"}]}`)
	// The same tool loop without thinking.
	loop := edit(t, tr, "thinking", nil, "messages.1.content.0", nil)
	thinkBlock := gjson.GetBytes(tr, "messages.1.content.0").Value()
	textBlock := map[string]any{"type": "text", "text": "I'll check both cities for you."}
	toolUse := func(id, city string) map[string]any {
		return map[string]any{"type": "tool_use", "id": id, "name": "get_weather", "input": map[string]any{"city": city}}
	}
	result := func(id string) map[string]any {
		return map[string]any{"type": "tool_result", "tool_use_id": id, "content": "ok"}
	}
	// A signed history the mock never emitted (so only the signature rules apply).
	ownSig := AnthropicThinkingSignature(anthModelID, "my own thoughts")
	own := edit(t, loop, "thinking", map[string]any{"type": "enabled", "budget_tokens": 2048},
		"messages.1.content", []any{
			map[string]any{"type": "redacted_thinking", "data": AnthropicRedactedThinkingData(anthModelID, "r")},
			map[string]any{"type": "thinking", "thinking": "my own thoughts", "signature": ownSig},
			toolUse(paris, "Paris"), toolUse(tokyo, "Tokyo"),
		})
	v2026 := []string{"anthropic-version", "2026-10-21"}
	sysCache := func(ttl1, ttl2 string) []byte {
		cc := func(ttl string) map[string]any { return map[string]any{"type": "ephemeral", "ttl": ttl} }
		return edit(t, plain, "system", []any{map[string]any{"type": "text", "text": "sys", "cache_control": cc(ttl1)}},
			"messages.0.content", []any{map[string]any{"type": "text", "text": "hi", "cache_control": cc(ttl2)}})
	}
	five := edit(t, plain, "messages.0.content", []any{
		map[string]any{"type": "text", "text": "a", "cache_control": map[string]any{"type": "ephemeral"}},
		map[string]any{"type": "text", "text": "b", "cache_control": map[string]any{"type": "ephemeral"}},
		map[string]any{"type": "text", "text": "c", "cache_control": map[string]any{"type": "ephemeral"}},
		map[string]any{"type": "text", "text": "d", "cache_control": map[string]any{"type": "ephemeral"}},
	})

	tests := []struct {
		name     string
		path     string
		header   []string
		valid    []byte
		broken   []byte
		wantBody []byte // exact; nil: check wantMsg
		wantRule string
		wantMsg  string
	}{
		// Tool pairing.
		{name: "tool_use without tool_result", valid: tr, broken: edit(t, tr, "messages.2.content.1", nil),
			wantBody: fx(t, "anthropic/error.tool-use-without-result.json"), wantRule: "anthropic-tool-use-without-result"},
		{name: "tool_result without tool_use", valid: tr, broken: edit(t, tr, "messages.1.content.2", nil),
			wantBody: fx(t, "anthropic/error.tool-result-without-use.json"), wantRule: "anthropic-tool-result-without-use"},
		{name: "text before the tool results", valid: tr, broken: edit(t, tr, "messages.2.content", []any{map[string]any{"type": "text", "text": "here"}, result(paris), result(tokyo)}),
			wantRule: "anthropic-tool-use-without-result",
			wantMsg:  "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: " + paris + ", " + tokyo + ". Each `tool_use` block must have a corresponding `tool_result` block in the next message."},
		{name: "history ends on tool_use", valid: tr, broken: edit(t, tr, "messages.2", nil),
			wantRule: "anthropic-tool-use-without-result",
			wantMsg:  "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: " + paris + ", " + tokyo + ". Each `tool_use` block must have a corresponding `tool_result` block in the next message."},
		{name: "results split over two user messages are merged",
			valid:    edit(t, tr, "messages.2.content.1", nil, "messages.-1", map[string]any{"role": "user", "content": []any{result(tokyo)}}),
			broken:   edit(t, tr, "messages.2.content.1", nil, "messages.-1", map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "and"}, result(tokyo)}}),
			wantRule: "anthropic-tool-use-without-result",
			wantMsg:  "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: " + tokyo + ". Each `tool_use` block must have a corresponding `tool_result` block in the next message."},
		{name: "tool_result in the first message", valid: plain, broken: edit(t, plain, "messages.0.content", []any{result("toolu_x")}),
			wantRule: "anthropic-tool-result-without-use",
			wantMsg:  "messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_x. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."},
		{name: "server_tool_use without its result", valid: plain,
			broken: edit(t, plain, "messages.-1", map[string]any{"role": "assistant", "content": []any{
				map[string]any{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": map[string]any{"query": "q"}},
				map[string]any{"type": "text", "text": "done"}}}),
			wantRule: "anthropic-tool-use-without-result",
			wantMsg:  "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: srvtoolu_1. Each `tool_use` block must have a corresponding `tool_result` block in the next message."},
		{name: "tool_result in an assistant message", valid: loop, broken: edit(t, loop, "messages.1.content.-1", result(paris)),
			wantRule: "anthropic-tool-result-in-assistant", wantMsg: "messages.1: `tool_result` blocks can only be in `user` messages"},
		{name: "duplicate tool_use ids", valid: tr, broken: edit(t, tr, "messages.1.content.3.id", paris),
			wantRule: "anthropic-duplicate-tool-use-id", wantMsg: "messages.1.content.3: `tool_use` ids must be unique"},
		{name: "tool_use input as a JSON string", valid: tr, broken: edit(t, tr, "messages.1.content.2.input", `{"city":"Paris"}`),
			wantRule: "anthropic-tool-use-input", wantMsg: "messages.1.content.2.tool_use.input: Input should be a valid dictionary"},

		// Request shape.
		{name: "max_tokens missing", valid: plain, broken: edit(t, plain, "max_tokens", nil),
			wantRule: "anthropic-field-required", wantMsg: "max_tokens: Field required"},
		{name: "messages empty", valid: plain, broken: edit(t, plain, "messages", []any{}),
			wantRule: "anthropic-empty-messages", wantMsg: "messages: at least one message is required"},
		{name: "system role in messages", valid: edit(t, plain, "system", "be brief"),
			broken:   edit(t, plain, "messages.-1", map[string]any{"role": "system", "content": "be brief"}),
			wantRule: "anthropic-unexpected-role",
			wantMsg:  "messages: Unexpected role \"system\". The Messages API accepts a top-level `system` parameter, not \"system\" as an input message role."},
		{name: "tool role in messages", valid: tr, broken: edit(t, tr, "messages.2.role", "tool"),
			wantRule: "anthropic-unexpected-role", wantMsg: `messages: Unexpected role "tool"`},
		{name: "consecutive user messages are merged; first must be user",
			valid:    edit(t, plain, "messages.-1", map[string]any{"role": "user", "content": "again"}),
			broken:   edit(t, plain, "messages.0.role", "assistant", "messages.-1", map[string]any{"role": "user", "content": "again"}),
			wantRule: "anthropic-first-message-role", wantMsg: `messages: first message must use the "user" role`},
		{name: "empty assistant content mid-history",
			valid:    edit(t, plain, "messages.-1", map[string]any{"role": "assistant", "content": ""}), // a final prefill may be empty
			broken:   edit(t, plain, "messages.-1", map[string]any{"role": "assistant", "content": []any{}}, "messages.-1", map[string]any{"role": "user", "content": "x"}),
			wantRule: "anthropic-empty-content",
			wantMsg:  "messages.1: all messages must have non-empty content except for the optional final assistant message"},
		{name: "empty text block", valid: plain, broken: edit(t, plain, "messages.0.content", []any{map[string]any{"type": "text", "text": ""}}),
			wantRule: "anthropic-empty-text", wantMsg: "messages: text content blocks must be non-empty"},
		{name: "whitespace-only text", valid: plain, broken: edit(t, plain, "messages.0.content", " \n"),
			wantRule: "anthropic-empty-text", wantMsg: "messages: text content blocks must contain non-whitespace text"},
		{name: "sampling parameters on 2026-10-21", header: v2026, valid: plain, broken: edit(t, plain, "temperature", 1),
			wantRule: "anthropic-extra-inputs", wantMsg: "temperature: Extra inputs are not permitted"},
		{name: "sampling parameters fine on 2023-06-01", valid: edit(t, plain, "temperature", 1), broken: edit(t, plain, "temperature", 1, "top_k", 5, "max_tokens", "many"),
			wantRule: "anthropic-field-required", wantMsg: "max_tokens: Input should be a valid integer"},

		// Prompt caching.
		{name: "more than 4 cache_control blocks", valid: five,
			broken:   edit(t, five, "cache_control", map[string]any{"type": "ephemeral"}),
			wantRule: "anthropic-cache-control", wantMsg: "A maximum of 4 blocks with cache_control may be provided. Found 5."},
		{name: "ttl 1h after 5m", valid: sysCache("1h", "5m"), broken: sysCache("5m", "1h"),
			wantRule: "anthropic-cache-control",
			wantMsg:  "messages.0.content.0.cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. Note that blocks are processed in the following order: `tools`, `system`, `messages`."},

		// Thinking configuration.
		{name: "budget below 1024", valid: tr, broken: edit(t, tr, "thinking.budget_tokens", 512),
			wantRule: "anthropic-thinking-config", wantMsg: "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"},
		{name: "budget above max_tokens with interleaved thinking", header: []string{"anthropic-beta", "interleaved-thinking-2025-05-14"},
			valid: edit(t, tr, "max_tokens", 2048, "thinking.budget_tokens", 4096), broken: edit(t, tr, "thinking.budget_tokens", 1000),
			wantRule: "anthropic-thinking-config", wantMsg: "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"},
		{name: "max_tokens not above the budget, no interleaved beta", valid: tr, broken: edit(t, tr, "max_tokens", 2048),
			wantRule: "anthropic-thinking-config", wantMsg: "`max_tokens` must be greater than `thinking.budget_tokens`."},
		{name: "thinking with forced tool_choice", valid: edit(t, tr, "tool_choice", map[string]any{"type": "auto"}),
			broken:   edit(t, tr, "tool_choice", map[string]any{"type": "any"}),
			wantRule: "anthropic-thinking-config", wantMsg: "Thinking may not be enabled when tool_choice forces tool use."},

		// Thinking blocks sent back.
		{name: "tool loop without the thinking block (text first)", valid: loop, broken: edit(t, tr, "messages.1.content.0", nil),
			wantRule: "anthropic-thinking-required",
			wantMsg:  "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"},
		{name: "tool loop without the thinking block (tool_use first)", valid: tr, broken: edit(t, tr, "messages.1.content.0", nil, "messages.1.content.0", nil),
			wantRule: "anthropic-thinking-required",
			wantMsg:  "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"},
		{name: "a later prompt ends the thinking requirement",
			valid: edit(t, tr, "messages.1.content.0", nil,
				"messages.-1", map[string]any{"role": "assistant", "content": "Paris 14°C, Tokyo 22°C."},
				"messages.-1", map[string]any{"role": "user", "content": "thanks"}),
			broken:   edit(t, tr, "messages.1.content.0", nil),
			wantRule: "anthropic-thinking-required",
			wantMsg:  "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"},
		{name: "tampered signature", valid: tr, broken: edit(t, tr, "messages.1.content.0.signature", "EqQDCkYICxgCKkAwrAy6pxme0D7zd7kIYEBqsuK9o7mEuvyc"),
			wantBody: fx(t, "anthropic/error.invalid-thinking-signature.json"), wantRule: "anthropic-invalid-thinking-signature"},
		{name: "edited thinking text", valid: tr, broken: edit(t, tr, "messages.1.content.0.thinking", "The user wants the weather in Paris and in Tokyo."),
			wantBody: fx(t, "anthropic/error.invalid-thinking-signature.json"), wantRule: "anthropic-invalid-thinking-signature"},
		{name: "empty signature", valid: tr, broken: edit(t, tr, "messages.1.content.0.signature", ""),
			wantBody: fx(t, "anthropic/error.invalid-thinking-signature.json"), wantRule: "anthropic-invalid-thinking-signature"},
		{name: "mock-signed blocks verify; tampered redacted data does not", valid: own, broken: edit(t, own, "messages.1.content.0.data", "bW9jaw=="),
			wantRule: "anthropic-invalid-thinking-signature", wantMsg: "messages.1.content.0: Invalid `data` in `redacted_thinking` block"},
		{name: "mock signature under another model", valid: own, broken: edit(t, own, "model", "claude-opus-4-5-20251101"),
			wantRule: "anthropic-invalid-thinking-signature", wantMsg: "messages.1.content.0: Invalid `data` in `redacted_thinking` block"},
		{name: "mock thinking signature on other text", valid: own, broken: edit(t, own, "messages.1.content.1.thinking", "my own thoughts."),
			wantRule: "anthropic-invalid-thinking-signature", wantMsg: "messages.1.content.1: Invalid `signature` in `thinking` block"},
		{name: "signature missing", valid: tr, broken: edit(t, tr, "messages.1.content.0.signature", nil),
			wantRule: "anthropic-thinking-block-shape", wantMsg: "messages.1.content.0.thinking.signature: Field required"},
		{name: "thinking not the first block", valid: tr,
			broken:   edit(t, tr, "messages.1.content", []any{textBlock, thinkBlock, toolUse(paris, "Paris"), toolUse(tokyo, "Tokyo")}),
			wantRule: "anthropic-thinking-block-shape",
			wantMsg:  "messages.1.content.0: If an assistant message contains any thinking blocks, the first block must be `thinking` or `redacted_thinking`. Found `text`."},
		{name: "thinking as the final block", valid: tr, broken: edit(t, tr, "messages.1.content", []any{thinkBlock}),
			wantRule: "anthropic-thinking-block-shape", wantMsg: "messages.1: The final block in an assistant message cannot be `thinking`."},
		{name: "thinking in a final assistant message with thinking off",
			valid:    edit(t, tr, "messages.2", nil, "messages.1.content", []any{thinkBlock, textBlock}),
			broken:   edit(t, tr, "thinking", nil, "messages.2", nil, "messages.1.content", []any{thinkBlock, textBlock}),
			wantRule: "anthropic-thinking-block-shape",
			wantMsg:  "messages.1.content.0: When thinking is disabled, an `assistant` message in the final position cannot contain `thinking`. To use thinking blocks, enable `thinking` in your request."},
		{name: "an extra thinking block in a known response", valid: tr,
			broken: edit(t, tr, "messages.1.content", []any{thinkBlock,
				map[string]any{"type": "thinking", "thinking": "my own thoughts", "signature": ownSig}, textBlock, toolUse(paris, "Paris"), toolUse(tokyo, "Tokyo")}),
			wantRule: "anthropic-thinking-modified",
			wantMsg:  "messages.1.content.1: `thinking` or `redacted_thinking` blocks in the latest assistant message cannot be modified. These blocks must remain as they were in the original response."},

		// count_tokens runs the same rules.
		{name: "count_tokens pairing", path: pathAnthropicCount, valid: edit(t, tr, "max_tokens", nil), broken: edit(t, tr, "max_tokens", nil, "messages.2.content.1", nil),
			wantBody: fx(t, "anthropic/error.tool-use-without-result.json"), wantRule: "anthropic-tool-use-without-result"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.path
			if path == "" {
				path = pathAnthropic
			}
			resp, body := post(t, s, path, tt.valid, tt.header...)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("valid history: status %d, rule %q, body %s", resp.StatusCode, resp.Header.Get("X-Mock-Rule"), body)
			}
			resp, body = post(t, s, path, tt.broken, tt.header...)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("broken history: status %d, want 400; body %s", resp.StatusCode, body)
			}
			if got := resp.Header.Get("X-Mock-Rule"); got != tt.wantRule {
				t.Errorf("rule %q, want %q (%s)", got, tt.wantRule, anthMsgText(body))
			}
			if gjson.GetBytes(body, "type").String() != "error" || gjson.GetBytes(body, "error.type").String() != "invalid_request_error" {
				t.Errorf("not an invalid_request_error envelope: %s", body)
			}
			if id := gjson.GetBytes(body, "request_id").String(); id == "" || resp.Header.Get("request-id") != id {
				t.Errorf("request-id header %q, body request_id %q", resp.Header.Get("request-id"), id)
			}
			if tt.wantBody != nil {
				if diff := cmp.Diff(string(tt.wantBody), string(body)); diff != "" {
					t.Errorf("body differs from fixture (-want +got):\n%s", diff)
				}
			} else if got := anthMsgText(body); got != tt.wantMsg {
				t.Errorf("message\n got %s\nwant %s", got, tt.wantMsg)
			}
		})
	}
}

func TestAnthropicAuth(t *testing.T) {
	s := startMock(t)
	plain := []byte(`{"model":"` + anthModelID + `","max_tokens":1024,"messages":[{"role":"user","content":"hi"}]}`)
	tests := []struct {
		name       string
		method     string
		path       string
		header     []string
		wantStatus int
		wantType   string
		wantMsg    string
	}{
		{"no credential", "", pathAnthropic, []string{"X-No-Key", "1"}, 401, "authentication_error", "x-api-key header is required"},
		{"bad x-api-key", "", pathAnthropic, []string{"x-api-key", "invalid"}, 401, "authentication_error", "invalid x-api-key"},
		{"bad bearer", "", pathAnthropic, []string{"Authorization", "Bearer invalid"}, 401, "authentication_error", "Invalid bearer token"},
		{"x-api-key wins over bearer", "", pathAnthropic, []string{"x-api-key", "k", "Authorization", "Bearer invalid"}, 200, "", ""},
		{"bearer (2026-10-21 SDKs)", "", pathAnthropic, []string{"Authorization", "Bearer k", "anthropic-version", "2026-10-21"}, 200, "", ""},
		{"no anthropic-version", "", pathAnthropic, []string{"x-api-key", "k", "X-No-Version", "1"}, 400, "invalid_request_error", "anthropic-version: header is required"},
		{"models need a key", http.MethodGet, "/v1/models", []string{"X-No-Key", "1"}, 401, "authentication_error", "x-api-key header is required"},
		{"count_tokens needs the version", "", pathAnthropicCount, []string{"X-No-Version", "1"}, 400, "invalid_request_error", "anthropic-version: header is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var resp *http.Response
			var body []byte
			if tt.method == http.MethodGet {
				resp, body = get(t, s, tt.path, tt.header...)
			} else {
				resp, body = post(t, s, tt.path, plain, tt.header...)
			}
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.wantStatus, body)
			}
			if tt.wantStatus == 200 {
				return
			}
			if got := gjson.GetBytes(body, "error.type").String(); got != tt.wantType {
				t.Errorf("error.type %q, want %q", got, tt.wantType)
			}
			if got := anthMsgText(body); got != tt.wantMsg {
				t.Errorf("message %q, want %q", got, tt.wantMsg)
			}
		})
	}
	resp, body := post(t, s, pathAnthropic, []byte(`{"model":`))
	if resp.StatusCode != 400 || resp.Header.Get("X-Mock-Rule") != "invalid-json" || gjson.GetBytes(body, "error.type").String() != "invalid_request_error" {
		t.Errorf("invalid JSON: %d %s", resp.StatusCode, body)
	}
}
