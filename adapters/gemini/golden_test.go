package gemini

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/internal/formattest"
	"github.com/chronicle-proxy/chronicle/adapters/sse"
)

var geminiAd = New()

var goldens = []formattest.Golden{
	{Dir: "gemini", Name: "text", Adapter: geminiAd, Model: "gemini-3-pro-preview",
		Usage: adapters.Usage{Present: true, InputTokens: 9, OutputTokens: 23 + 185, ReasoningTokens: 185}, Finish: adapters.FinishStop},
	{Dir: "gemini", Name: "tool-call", Adapter: geminiAd, Model: "gemini-3-pro-preview",
		Usage: adapters.Usage{Present: true, InputTokens: 29, OutputTokens: 15 + 45, ReasoningTokens: 45}, Finish: adapters.FinishToolCalls,
		Calls: []adapters.ToolCall{{ID: "", Name: "weather"}}},
	{Dir: "gemini", Name: "parallel-tools", Adapter: geminiAd, Model: "gemini-3-pro-preview",
		Usage:  adapters.Usage{Present: true, InputTokens: 2114, OutputTokens: 38 + 196, CachedTokens: 1812, ReasoningTokens: 196},
		Finish: adapters.FinishToolCalls, Calls: []adapters.ToolCall{{ID: "", Name: "get_weather"}, {ID: "", Name: "get_weather"}}},
	{Dir: "gemini", Name: "thoughts-maxtokens", Adapter: geminiAd, Expected: "-", NoJSON: true, Model: "gemini-2.5-flash",
		Usage: adapters.Usage{Present: true, InputTokens: 29, OutputTokens: 59, ReasoningTokens: 59}, Finish: adapters.FinishLength},
}

func TestGoldenStreams(t *testing.T) { formattest.GoldenStreams(t, goldens) }

func TestGoldenNonStream(t *testing.T) { formattest.GoldenNonStream(t, goldens) }

// TestGeminiJSONArray streams the Gemini fixtures as the JSON array that
// streamGenerateContent without alt=sse sends, and checks the ArrayReader
// splits it losslessly and the assembly is the same.
func TestGeminiJSONArray(t *testing.T) {
	for _, g := range goldens {
		if g.Dir != "gemini" {
			continue
		}
		sseBody := formattest.Fixture(t, g.Dir+"/"+g.Name+".sse")
		var arr bytes.Buffer
		arr.WriteString("[")
		r := sse.NewReader(bytes.NewReader(sseBody), 0)
		n := 0
		for ev, err := r.Next(); err == nil; ev, err = r.Next() {
			if n > 0 {
				arr.WriteString(",\r\n")
			}
			arr.Write(ev.Data)
			n++
		}
		arr.WriteString("]")
		input := arr.Bytes()
		var want any
		if g.Expected != "-" {
			want = formattest.JSONValue(t, formattest.Fixture(t, g.Dir+"/"+g.Name+".expected.json"))
		}
		for _, chunk := range []int{1, 7, 1 << 20} {
			ar := adapters.NewArrayReader(&formattest.Chunked{B: input, N: chunk}, 0)
			asm := g.Adapter.NewAssembler()
			var cat []byte
			elems := 0
			for {
				raw, val, err := ar.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("%s: %v", g.ID(), err)
				}
				cat = append(cat, raw...)
				if err := asm.Feed(val); err != nil {
					t.Fatal(err)
				}
				elems++
			}
			cat = append(cat, ar.Tail()...)
			if !bytes.Equal(cat, input) {
				t.Errorf("%s: Raw+Tail != input:\n%q\n%q", g.ID(), cat, input)
			}
			if elems != n {
				t.Errorf("%s: %d elements, want %d", g.ID(), elems, n)
			}
			formattest.CheckTurn(t, g, "json array", asm.Result(), want, true)
		}
		// A whole buffered array also parses as a response.
		turn, err := g.Adapter.ParseResponse(input)
		if err != nil {
			t.Fatal(err)
		}
		formattest.CheckTurn(t, g, "buffered array", turn, want, true)
	}
}
