package anthropic

import (
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/internal/formattest"
)

// hot per-event payloads, one per delta kind.
var hotPayloads = []struct {
	name string
	data string
}{
	{"text", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" \"quoted\" text, as it streams"}}`},
	{"thinking", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" more thinking on it"}}`},
	{"input", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Par"}}`},
	{"ping", `{"type":"ping"}`},
}

// starts are the content_block_start each hot payload's block needs.
var starts = map[string]string{
	"text":     `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	"thinking": `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
	"input":    `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}`,
	"ping":     `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
}

// TestFeedNoAllocs guards the per-event hot path: feeding text, thinking
// and tool-input deltas allocates nothing once buffers have grown.
func TestFeedNoAllocs(t *testing.T) {
	for _, hp := range hotPayloads {
		asm := ad.NewAssembler()
		data := []byte(hp.data)
		_ = asm.Feed([]byte(starts[hp.name]))
		for range 3000 {
			_ = asm.Feed(data)
		}
		asm.Reset()
		_ = asm.Feed([]byte(starts[hp.name]))
		if a := testing.AllocsPerRun(1000, func() {
			if err := asm.Feed(data); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("%s: %v allocs per Feed, want 0", hp.name, a)
		}
	}
}

// BenchmarkAssemble reads and assembles a 2,000-event stream (SSE reader +
// Feed per event + Result), as the other formats' BenchmarkAssemble do.
func BenchmarkAssemble(b *testing.B) {
	const n = 2000
	head := []string{`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","usage":{"input_tokens":12,"output_tokens":1}}}`, starts["text"]}
	tail := []string{`{"type":"content_block_stop","index":0}`, `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2000}}`, `{"type":"message_stop"}`}
	body := formattest.Stream(head, hotPayloads[0].data, n-len(head)-len(tail), tail, "\n\n")
	formattest.BenchAssemble(b, ad, body, n, func(t adapters.Turn) bool { return t.Terminal && t.Finish == adapters.FinishStop })
}

func BenchmarkParseResponse(b *testing.B) {
	body := formattest.Fixture(b, "anthropic/parallel-tools.json")
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := ad.ParseResponse(body); err != nil {
			b.Fatal(err)
		}
	}
}
