package proxy

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

const anthropicConfig = `
leases: {ttl: 3s}
connections:
  - {name: claude, provider: anthropic, base_url: "${MOCK}"}
`

// anthropicHeaders are what an Anthropic SDK of the 2023-06-01 API sends.
func anthropicHeaders(thread string, more ...string) []string {
	h := []string{"X-Api-Key", "ak-test", "Anthropic-Version", "2023-06-01", "Content-Type", "application/json"}
	if thread != "" {
		h = append(h, "X-Thread-Id", thread)
	}
	return append(h, more...)
}

// forEachAnthropicBackend runs fn on each store with a chronicle whose
// connection "claude" speaks Anthropic Messages to the mock.
func forEachAnthropicBackend(t *testing.T, fn func(t *testing.T, p *testProxy, m *testMock)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			p := startProxyWith(t, m, anthropicConfig, b.open(t))
			fn(t, p, &testMock{m})
		})
	}
}

// TestAnthropicFixturesByteIdentical: each Anthropic fixture, stream and
// non-stream, reaches the client through chronicle byte for byte as the
// upstream sent it (event lines, pings and all), and the thread holds the
// assembled answer.
func TestAnthropicFixturesByteIdentical(t *testing.T) {
	forEachAnthropicBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		for _, scenario := range []string{"text", "thinking", "parallel-tools"} {
			for _, stream := range []bool{false, true} {
				name := fmt.Sprintf("%s stream=%v", scenario, stream)
				t.Run(name, func(t *testing.T) {
					thread := fmt.Sprintf("t-fix-%s-%v", scenario, stream)
					body := fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":2048,"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
					direct, dbody := do(t, "POST", m.URL()+"/v1/messages", body, anthropicHeaders("", "X-Mock-Scenario", scenario)...)
					via, vbody := do(t, "POST", p.URL+"/claude/v1/messages", body, anthropicHeaders(thread, "X-Mock-Scenario", scenario)...)
					if direct.StatusCode != 200 || via.StatusCode != 200 {
						t.Fatalf("direct %d, via chronicle %d: %s", direct.StatusCode, via.StatusCode, vbody)
					}
					if !bytes.Equal(dbody, vbody) {
						t.Fatalf("the body changed on the way:\ndirect %q\nvia    %q", dbody, vbody)
					}
					if stream && !bytes.Contains(vbody, []byte("event: message_stop")) {
						t.Fatalf("no event lines: %q", vbody)
					}
					th := apiThread(t, p, "ak-test", thread)
					if th.Get("format").String() != "anthropic-messages" {
						t.Fatalf("thread format %q", th.Get("format").String())
					}
					msgs := th.Get("messages").Array()
					if len(msgs) != 2 || msgs[1].Get("role").String() != "assistant" {
						t.Fatalf("thread messages %s", th.Get("messages").Raw)
					}
					if !stream {
						// A non-stream answer's content is kept as sent,
						// only compacted.
						if got, want := msgs[1].Get("content").Raw, gjson.GetBytes(dbody, "content|@ugly").Raw; got != want {
							t.Fatalf("stored content %s\nanswer content %s", got, want)
						}
					}
					if scenario == "thinking" && msgs[1].Get(`content.#(type=="thinking").signature`).String() == "" {
						t.Fatalf("the stored answer lost its signed thinking: %s", msgs[1].Raw)
					}
				})
			}
		}
	})
}

// anthropicSDK is anthropic-sdk-go pointed at chronicle's connection, as an
// app configures it: only the base URL changes.
func anthropicSDK(p *testProxy, opts ...option.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]option.RequestOption{
		option.WithBaseURL(p.URL + "/claude"),
		option.WithAPIKey("ak-test"),
		option.WithMaxRetries(0),
		option.WithHeader("X-Mock-Scenario", "synthetic"),
	}, opts...)...)
}

func weatherToolParam() []anthropic.ToolUnionParam {
	return []anthropic.ToolUnionParam{anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{
		Properties: map[string]any{"city": map[string]any{"type": "string"}},
	}, "get_weather")}
}

// TestAnthropicSDKThinkingToolLoop: anthropic-sdk-go, streaming with
// thinking on, in a tool loop. The client sends the tool result back with
// the assistant turn stripped of its signed thinking (as gateways and
// SDK helpers do): the mock refuses that history itself, and through
// chronicle the thinking block is restored from the store (X-Restored)
// and the loop goes on. A non-stream turn follows on the same thread.
func TestAnthropicSDKThinkingToolLoop(t *testing.T) {
	forEachAnthropicBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		ctx := context.Background()
		var captured *http.Response
		c := anthropicSDK(p, option.WithHeader("X-Thread-Id", "t-sdk-loop"), option.WithResponseInto(&captured))
		params := anthropic.MessageNewParams{
			Model:     "claude-sonnet-4-5",
			MaxTokens: 4096,
			Thinking:  anthropic.ThinkingConfigParamOfEnabled(2048),
			Tools:     weatherToolParam(),
			Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("weather in Paris?"))},
		}
		stream := c.Messages.NewStreaming(ctx, params)
		var answer anthropic.Message
		for stream.Next() {
			if err := answer.Accumulate(stream.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		var toolID string
		var dropped []anthropic.ContentBlockParamUnion
		sawThinking := false
		for _, b := range answer.Content {
			switch b.Type {
			case "thinking":
				sawThinking = b.Signature != ""
				continue // the client drops it
			case "tool_use":
				toolID = b.ID
			}
			dropped = append(dropped, b.ToParam())
		}
		if !sawThinking || toolID == "" || answer.StopReason != "tool_use" {
			t.Fatalf("turn 1: thinking %v, tool %q, stop %q", sawThinking, toolID, answer.StopReason)
		}
		params.Messages = append(params.Messages,
			anthropic.NewAssistantMessage(dropped...),
			anthropic.NewUserMessage(anthropic.NewToolResultBlock(toolID, "sunny, 21°C", false)))

		// Straight to the mock, the stripped history is refused.
		direct := anthropic.NewClient(option.WithBaseURL(m.URL()), option.WithAPIKey("ak-test"), option.WithMaxRetries(0),
			option.WithHeader("X-Mock-Scenario", "synthetic"))
		if _, err := direct.Messages.New(ctx, params); err == nil || !strings.Contains(err.Error(), "400") {
			t.Fatalf("the mock accepted a tool loop without its thinking: %v", err)
		}

		// Through chronicle it goes on.
		msg, err := c.Messages.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if captured.Header.Get("X-Restored") == "" {
			t.Fatalf("no X-Restored on the restored turn: %v", captured.Header)
		}
		if len(msg.Content) == 0 {
			t.Fatal("empty answer")
		}
		sent := m.Requests()[len(m.Requests())-1].Body
		if gjson.GetBytes(sent, "messages.1.content.0.type").String() != "thinking" {
			t.Fatalf("upstream got %s", gjson.GetBytes(sent, "messages.1").Raw)
		}
		th := apiThread(t, p, "ak-test", "t-sdk-loop")
		if n := len(th.Get("messages").Array()); n != 4 {
			t.Fatalf("thread has %d messages: %s", n, th.Get("messages").Raw)
		}
	})
}

// TestAnthropicRepairsUnansweredToolUse: a history whose tool_use never got
// its tool_result is refused by the mock as Anthropic does, and through
// chronicle it is repaired (X-Repaired) and accepted.
func TestAnthropicRepairsUnansweredToolUse(t *testing.T) {
	forEachAnthropicBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		body := `{"model":"claude-sonnet-4-5","max_tokens":1024,"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"messages":[` +
			`{"role":"user","content":"weather in Paris?"},` +
			`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_01A","name":"get_weather","input":{"city":"Paris"}}]},` +
			`{"role":"user","content":"never mind, say hi"}]}`
		direct, dbody := do(t, "POST", m.URL()+"/v1/messages", body, anthropicHeaders("", "X-Mock-Scenario", "synthetic")...)
		if direct.StatusCode != 400 {
			t.Fatalf("the mock accepted an unanswered tool_use: %d %s", direct.StatusCode, dbody)
		}
		via, vbody := do(t, "POST", p.URL+"/claude/v1/messages", body, anthropicHeaders("t-repair", "X-Mock-Scenario", "synthetic")...)
		if via.StatusCode != 200 || via.Header.Get("X-Repaired") == "" {
			t.Fatalf("via chronicle: %d X-Repaired=%q %s", via.StatusCode, via.Header.Get("X-Repaired"), vbody)
		}
		sent := m.Requests()[len(m.Requests())-1].Body
		if got := gjson.GetBytes(sent, "messages.2.content.0"); got.Get("type").String() != "tool_result" || got.Get("tool_use_id").String() != "toolu_01A" || !got.Get("is_error").Bool() {
			t.Fatalf("upstream got %s", gjson.GetBytes(sent, "messages").Raw)
		}
	})
}

// TestAnthropicPrefixStaysByteIdentical: two turns on one thread in append
// mode; the second request chronicle sends upstream starts with the bytes
// of the first (system, tools and messages, cache_control markers where
// the client put them), so the provider's prompt cache hits; the mock's
// cache simulation reports the read.
func TestAnthropicPrefixStaysByteIdentical(t *testing.T) {
	forEachAnthropicBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		hdr := anthropicHeaders("t-cache", "X-Thread-Mode", "append", "X-Mock-Scenario", "synthetic", "X-Mock-Cache-Min-Tokens", "0")
		system := `"system":[{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}}]`
		turn := func(text string) (*http.Response, []byte) {
			return do(t, "POST", p.URL+"/claude/v1/messages",
				`{"model":"claude-sonnet-4-5","max_tokens":1024,`+system+`,"messages":[{"role":"user","content":[{"type":"text","text":"`+text+`","cache_control":{"type":"ephemeral"}}]}]}`, hdr...)
		}
		if resp, body := turn("one"); resp.StatusCode != 200 {
			t.Fatalf("turn 1: %d %s", resp.StatusCode, body)
		}
		first := append([]byte(nil), m.Requests()[0].Body...)
		resp, body := turn("two")
		if resp.StatusCode != 200 {
			t.Fatalf("turn 2: %d %s", resp.StatusCode, body)
		}
		second := m.Requests()[1].Body
		// The first request up to the end of its last message.
		end := bytes.LastIndex(first, []byte("]"))
		if end < 0 || !bytes.HasPrefix(second, first[:end]) {
			t.Fatalf("turn 2 does not start with turn 1's bytes:\n1 %s\n2 %s", first, second)
		}
		if gjson.GetBytes(body, "usage.cache_read_input_tokens").Int() == 0 {
			t.Fatalf("turn 2 read nothing from the prompt cache: %s", gjson.GetBytes(body, "usage").Raw)
		}
		msgs := gjson.GetBytes(second, "messages").Array()
		if len(msgs) != 3 || msgs[1].Get("role").String() != "assistant" {
			t.Fatalf("upstream got %s", gjson.GetBytes(second, "messages").Raw)
		}
	})
}

// TestAnthropicErrorsInAnthropicShape: chronicle's own refusals on an
// Anthropic connection come in Anthropic's error envelope, with
// chronicle's code beside the type.
func TestAnthropicErrorsInAnthropicShape(t *testing.T) {
	m := startMock(t)
	p := startProxy(t, m, anthropicConfig)
	resp, body := do(t, "POST", p.URL+"/claude/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`,
		"Anthropic-Version", "2023-06-01")
	if resp.StatusCode != 401 || gjson.GetBytes(body, "type").String() != "error" || gjson.GetBytes(body, "error.type").String() != "authentication_error" {
		t.Fatalf("no key: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, "POST", p.URL+"/claude/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}`,
		anthropicHeaders("t-bad")...)
	if resp.StatusCode != 400 || gjson.GetBytes(body, "error.type").String() != "invalid_request_error" {
		t.Fatalf("bad JSON: %d %s", resp.StatusCode, body)
	}
	// Before a connection is known, the path says the format.
	resp, body = do(t, "POST", p.URL+"/nope/v1/messages", `{}`, anthropicHeaders("")...)
	if resp.StatusCode != 404 || gjson.GetBytes(body, "error.type").String() != "not_found_error" || gjson.GetBytes(body, "error.code").String() != "unknown_connection" {
		t.Fatalf("unknown connection: %d %s", resp.StatusCode, body)
	}
}

// TestAnthropicPoolKeyPlacement: with a pool key, the client's key (in
// x-api-key or as a Bearer token) never goes upstream, and the pool key
// goes where the client's API version takes it; anthropic-version,
// anthropic-beta and ?beta=true reach the upstream as the client sent
// them.
func TestAnthropicPoolKeyPlacement(t *testing.T) {
	m := startMock(t)
	p := startProxy(t, m, `
connections:
  - {name: claude, provider: anthropic, base_url: "${MOCK}", keys: [pool-key]}
clients:
  - {key: client-key, tenant: acme}
`)
	for _, tc := range []struct {
		version, clientHeader, clientValue, wantHeader, wantValue string
	}{
		{"2023-06-01", "X-Api-Key", "client-key", "X-Api-Key", "pool-key"},
		{"2023-06-01", "Authorization", "Bearer client-key", "X-Api-Key", "pool-key"},
		{"2026-10-21", "Authorization", "Bearer client-key", "Authorization", "Bearer pool-key"},
	} {
		m.Reset()
		body, _ := sjson.Set(`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`, "stream", false)
		resp, rb := do(t, "POST", p.URL+"/claude/v1/messages?beta=true", body, tc.clientHeader, tc.clientValue, "Anthropic-Version", tc.version,
			"Anthropic-Beta", "interleaved-thinking-2025-05-14,context-1m-2025-08-07", "X-Mock-Scenario", "synthetic")
		if resp.StatusCode != 200 {
			t.Fatalf("%+v: %d %s", tc, resp.StatusCode, rb)
		}
		got := m.Requests()[0].Header
		if got.Get(tc.wantHeader) != tc.wantValue {
			t.Fatalf("%+v: upstream %s = %q", tc, tc.wantHeader, got.Get(tc.wantHeader))
		}
		for _, h := range []string{"X-Api-Key", "Authorization"} {
			if strings.Contains(got.Get(h), "client-key") {
				t.Fatalf("%+v: the client's key went upstream in %s", tc, h)
			}
		}
		if got.Get("Anthropic-Version") != tc.version || got.Get("Anthropic-Beta") != "interleaved-thinking-2025-05-14,context-1m-2025-08-07" ||
			m.Requests()[0].RawQuery != "beta=true" {
			t.Fatalf("not forwarded as sent: version %q, beta %q, query %q", got.Get("Anthropic-Version"), got.Get("Anthropic-Beta"), m.Requests()[0].RawQuery)
		}
	}
}

// TestAnthropicPassThrough: count_tokens and the model list pass through
// unchanged and create no run.
func TestAnthropicPassThrough(t *testing.T) {
	m := startMock(t)
	p := startProxy(t, m, anthropicConfig)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/messages/count_tokens", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`},
		{"GET", "/v1/models", ""},
	} {
		direct, dbody := do(t, c.method, m.URL()+c.path, c.body, anthropicHeaders("")...)
		via, vbody := do(t, c.method, p.URL+"/claude"+c.path, c.body, anthropicHeaders("t-pass")...)
		if direct.StatusCode != 200 || via.StatusCode != 200 || !bytes.Equal(dbody, vbody) || via.Header.Get("X-Run-Id") != "" {
			t.Fatalf("%s %s: direct %d %s\nvia %d %s (run %q)", c.method, c.path, direct.StatusCode, dbody, via.StatusCode, vbody, via.Header.Get("X-Run-Id"))
		}
	}
}
