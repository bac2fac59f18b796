package gemini

import (
	"bytes"
	"io"
	"runtime"
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/internal/formattest"
	"github.com/chronicle-proxy/chronicle/adapters/sse"
)

// hot per-event payloads, one per adapter and delta kind.
var hotPayloads = []struct {
	name string
	ad   adapters.Adapter
	data string
}{
	{"gemini/text", geminiAd, `{"candidates": [{"content": {"parts": [{"text": " \"r\"s in strawberry."}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 9,"candidatesTokenCount": 23,"totalTokenCount": 217,"promptTokensDetails": [{"modality": "TEXT","tokenCount": 9}],"thoughtsTokenCount": 185},"modelVersion": "gemini-3-pro-preview","responseId": "bH6LaZW8Fp_3nsEPqtaSwQ4"}`},
	{"gemini/thought", geminiAd, `{"candidates": [{"content": {"parts": [{"text": "more thinking","thought": true}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 9}}`},
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

// BenchmarkAssemble reads and assembles a 2,000-event stream per adapter
// (SSE reader + Feed per event + Result) and reports per-event figures.
func BenchmarkAssemble(b *testing.B) {
	const n = 2000
	cases := []struct {
		name string
		ad   adapters.Adapter
		body []byte
	}{
		{"gemini", geminiAd, formattest.Stream(nil, hotPayloads[0].data, n-1,
			[]string{`{"candidates": [{"content": {"parts": [{"text": "","thoughtSignature": "c2ln"}],"role": "model"},"finishReason": "STOP","index": 0}]}`}, "\r\n\r\n")},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			br := bytes.NewReader(c.body)
			r := sse.NewReader(br, 0)
			asm := c.ad.NewAssembler()
			events := 0
			var before, after runtime.MemStats
			b.ReportAllocs()
			b.SetBytes(int64(len(c.body)))
			runtime.ReadMemStats(&before)
			for b.Loop() {
				br.Reset(c.body)
				r.Reset(br)
				asm.Reset()
				for {
					ev, err := r.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					if err := asm.Feed(ev.Data); err != nil {
						b.Fatal(err)
					}
					events++
				}
				if t := asm.Result(); !t.Terminal {
					b.Fatal("not terminal")
				}
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(events), "allocs/event")
		})
	}
}

// BenchmarkParseResponse reads a real non-stream answer.
func BenchmarkParseResponse(b *testing.B) {
	body := formattest.Fixture(b, "gemini/text.json")
	b.Run("gemini/text.json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := geminiAd.ParseResponse(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
