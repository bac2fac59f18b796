package adapters

import (
	"bytes"
	"fmt"
	"testing"
)

// stream builds an SSE body: head events, n copies of the hot event, tail.
func stream(head []string, hot string, n int, tail []string, sep string) []byte {
	var b bytes.Buffer
	for _, h := range head {
		fmt.Fprintf(&b, "data: %s%s", h, sep)
	}
	for range n {
		fmt.Fprintf(&b, "data: %s%s", hot, sep)
	}
	for _, h := range tail {
		fmt.Fprintf(&b, "data: %s%s", h, sep)
	}
	return b.Bytes()
}

// BenchmarkParseResponse reads real non-stream answers: OpenAI's text
// (pretty-printed, refusal and annotations present) and a parallel tool
// call.
func BenchmarkParseResponse(b *testing.B) {
	for _, c := range []struct {
		name string
		ad   Adapter
	}{
		{"openai-responses/text.json", respAd},
	} {
		body, ad := fixture(b, c.name), c.ad
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
