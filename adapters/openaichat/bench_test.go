package openaichat

import (
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/internal/formattest"
)

func TestStripNoAllocs(t *testing.T) {
	ev := []byte("data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}],\"usage\":null,\"obfuscation\":\"q\"}\n\n")
	buf := make([]byte, len(ev))
	plain := []byte("data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
	if a := testing.AllocsPerRun(1000, func() {
		copy(buf, ev)
		openAIAd.StripAddedUsage(buf)
		openAIAd.StripAddedUsage(plain)
	}); a != 0 {
		t.Errorf("%v allocs per StripAddedUsage, want 0", a)
	}
}

// hot per-event payloads, one per dialect and delta kind.
var hotPayloads = []struct {
	name string
	ad   adapters.Adapter
	data string
}{
	{"openai/text", openAIAd, `{"id":"chatcmpl-D8Z5oo6uDh67AD85p73ksdT1KxhE0","object":"chat.completion.chunk","created":1770933892,"model":"gpt-4.1-nano-2025-04-14","service_tier":"default","system_fingerprint":"fp_de604bd877","choices":[{"index":0,"delta":{"content":" Holiday"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"dTh"}`},
	{"openai/args", openAIAd, `{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Edinb"}}]},"logprobs":null,"finish_reason":null}]}`},
	{"deepseek/reasoning", deepSeekAd, `{"id":"cca85624","object":"chat.completion.chunk","created":1764664568,"model":"deepseek-reasoner","system_fingerprint":"fp_eaab8d114b_prod0820_fp8_kvcache","choices":[{"index":0,"delta":{"content":null,"reasoning_content":" user"},"logprobs":null,"finish_reason":null}],"usage":null}`},
}

// TestFeedNoAllocs guards the per-event hot path: feeding text, argument
// and reasoning deltas allocates nothing once buffers have grown.
func TestFeedNoAllocs(t *testing.T) {
	for _, hp := range hotPayloads {
		asm := hp.ad.NewAssembler()
		data := []byte(hp.data)
		if hp.name == "openai/args" {
			_ = asm.Feed([]byte(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":""}}]}}]}`))
		}
		// Grow the buffers past what the measured runs need.
		for range 3000 {
			_ = asm.Feed(data)
		}
		asm.Reset()
		if hp.name == "openai/args" {
			_ = asm.Feed([]byte(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":""}}]}}]}`))
		}
		if a := testing.AllocsPerRun(1000, func() {
			if err := asm.Feed(data); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("%s: %v allocs per Feed, want 0", hp.name, a)
		}
	}
}

// BenchmarkAssemble reads and assembles a 2,000-event stream per dialect
// (SSE reader + Feed per event + Result) and reports per-event figures.
func BenchmarkAssemble(b *testing.B) {
	const n = 2000
	cases := []struct {
		name string
		ad   adapters.Adapter
		body []byte
	}{
		{"openai", openAIAd, formattest.Stream([]string{`{"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null}}],"usage":null}`},
			hotPayloads[0].data, n-3,
			[]string{`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`, `{"choices":[],"usage":{"prompt_tokens":16,"completion_tokens":300}}`, `[DONE]`}, "\n\n")},
		{"deepseek", deepSeekAd, formattest.Stream([]string{`{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":""}}],"usage":null}`},
			hotPayloads[2].data, n-3,
			[]string{`{"choices":[{"index":0,"delta":{"content":"","reasoning_content":null},"finish_reason":"stop"}],"usage":{"prompt_tokens":1}}`, `[DONE]`}, "\n\n")},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			formattest.BenchAssemble(b, c.ad, c.body, 0, func(t adapters.Turn) bool { return t.Terminal })
		})
	}
}

// BenchmarkParseResponse reads real non-stream answers: OpenAI's text
// (pretty-printed, refusal and annotations present) and a parallel tool
// call.
func BenchmarkParseResponse(b *testing.B) {
	for _, c := range []struct {
		name string
		ad   adapters.Adapter
	}{
		{"openai-chat/text.json", openAIAd}, {"openai-chat/parallel-tools.json", openAIAd},
	} {
		body, ad := formattest.Fixture(b, c.name), c.ad
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ad.ParseResponse(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
