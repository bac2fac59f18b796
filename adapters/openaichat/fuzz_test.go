package openaichat

import (
	"bytes"
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters/internal/formattest"
	"github.com/tidwall/gjson"
)

func FuzzOpenAIAssembler(f *testing.F) {
	formattest.FuzzAssembler(f, deepSeekAd,
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":"a\"b"}}],"usage":null}`+"\n"+
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":"{\"x"}}]}}]}`+"\n"+
			`{"choices":[{"delta":{"tool_calls":[{"id":"d","function":{"arguments":"{}","name":"g"},"extra_content":{"google":{"thought_signature":"s"}}}]}}]}`+"\n"+
			`{"choices":[],"usage":{"prompt_tokens":1,"prompt_tokens_details":{"cached_tokens":1}}}`+"\n[DONE]",
		`{"messages":[{"role":"assistant","content":"","reasoning_content":"r","tool_calls":[{"id":"c","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"x"}]}`,
		`{"choices":[{"message":{"role":"assistant","content":null,"refusal":null,"annotations":[],"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3}}`,
		`{"error":{"message":"x"}}`,
	)
}

// FuzzOpenAIParseResponse checks ParseResponse's fast path against the
// gjson path on every body the fast path takes.
func FuzzOpenAIParseResponse(f *testing.F) {
	for _, name := range []string{"openai-chat/text.json", "openai-chat/parallel-tools.json", "deepseek/text.json", "deepseek/tool-call.json"} {
		f.Add(formattest.Fixture(f, name))
	}
	f.Add([]byte(`{"choices":[{"message":{"role":"assistant","refusal":null,"refusal":null,"content":"x"}}]}`))
	f.Add([]byte(`{"choices":[{"message":{"annotations":[ ],"role":"assistant"},"finish_reason":"length"}],"usage":{"prompt_tokens":3}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if !gjson.ValidBytes(body) {
			return
		}
		fast, ok := parseOpenAIAnswer(body)
		if !ok {
			return
		}
		slow, err := parseOpenAIResponse(body)
		if err != nil {
			t.Fatalf("fast path took %s, gjson path: %v", body, err)
		}
		if !bytes.Equal(fast.Message, slow.Message) || fast.Usage != slow.Usage || fast.FinishRaw != slow.FinishRaw ||
			fast.Finish != slow.Finish || fast.Terminal != slow.Terminal || len(fast.ToolCalls) != len(slow.ToolCalls) || fast.Error != nil {
			t.Fatalf("%s:\nfast %+v\nslow %+v", body, fast, slow)
		}
	})
}
