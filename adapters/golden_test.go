package adapters

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"testing"
	"testing/iotest"

	"github.com/chronicle-proxy/chronicle/adapters/sse"
	"github.com/chronicle-proxy/chronicle/cmd/mockllm/fixtures"
	"github.com/google/go-cmp/cmp"
)

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := fs.ReadFile(fixtures.FS, "providers/"+name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// jsonValue decodes for a JSON-equality comparison in tests only.
func jsonValue(t testing.TB, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("invalid JSON %q: %v", b, err)
	}
	return v
}

type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := min(c.n, len(p), len(c.b))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

// assembleSSE feeds every data event of an SSE body to a fresh assembler.
func assembleSSE(t testing.TB, a Adapter, src io.Reader) Turn {
	t.Helper()
	r := sse.NewReader(src, 0)
	asm := a.NewAssembler()
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind != sse.KindEvent || !ev.HasData {
			continue
		}
		if err := asm.Feed(ev.Data); err != nil {
			t.Fatalf("feed %q: %v", ev.Data, err)
		}
	}
	return asm.Result()
}

type golden struct {
	dir, name string
	sse       string // stream file; "" = name.sse
	adapter   Adapter
	expected  string // "" = name.expected.json; "-" = none
	usage     Usage
	finish    FinishReason
	calls     []ToolCall
	// jsonExtra is JSON merged into the expected message for the
	// non-stream body (fields the non-stream answer has and the stream
	// does not).
	jsonExtra string
	noJSON    bool
}

var (
	openAIAd   = NewOpenAIChat(OpenAI)
	deepSeekAd = NewOpenAIChat(DeepSeek)
	gemOAIAd   = NewOpenAIChat(GeminiOpenAI)
	geminiAd   = NewGemini()
)

var goldens = []golden{
	{dir: "openai-chat", name: "text", adapter: openAIAd,
		usage: Usage{Present: true, InputTokens: 16, OutputTokens: 300}, finish: FinishStop},
	{dir: "openai-chat", name: "parallel-tools", adapter: openAIAd,
		usage:  Usage{Present: true, InputTokens: 149, OutputTokens: 60},
		finish: FinishToolCalls,
		calls:  []ToolCall{{"call_JMW1whyEaYG438VE1OIflxA2", "GetWeatherArgs"}, {"call_DNYTawLBoN8fj3KN6qU9N1Ou", "get_stock_price"}}},
	{dir: "openai-chat", name: "parallel-tools", sse: "parallel-tools.modern.sse", adapter: openAIAd, noJSON: true,
		usage:  Usage{Present: true, InputTokens: 149, OutputTokens: 60},
		finish: FinishToolCalls,
		calls:  []ToolCall{{"call_JMW1whyEaYG438VE1OIflxA2", "GetWeatherArgs"}, {"call_DNYTawLBoN8fj3KN6qU9N1Ou", "get_stock_price"}}},
	{dir: "openai-chat", name: "text-2024", adapter: openAIAd, expected: "-", noJSON: true,
		usage: Usage{Present: true, InputTokens: 14, OutputTokens: 30}, finish: FinishStop},
	{dir: "deepseek", name: "text", adapter: deepSeekAd,
		usage: Usage{Present: true, InputTokens: 18, OutputTokens: 219, ReasoningTokens: 205}, finish: FinishStop},
	{dir: "deepseek", name: "text", sse: "text.keepalive.sse", adapter: deepSeekAd, noJSON: true,
		usage: Usage{Present: true, InputTokens: 18, OutputTokens: 219, ReasoningTokens: 205}, finish: FinishStop},
	{dir: "deepseek", name: "tool-call", adapter: deepSeekAd,
		usage:  Usage{Present: true, InputTokens: 339, OutputTokens: 83, CachedTokens: 320, ReasoningTokens: 39},
		finish: FinishToolCalls, calls: []ToolCall{{"call_00_ioIn7yN9p1ZOMNpDLwd4MgAF", "weather"}}},
	{dir: "deepseek", name: "parallel-tools", adapter: deepSeekAd,
		usage:  Usage{Present: true, InputTokens: 412, OutputTokens: 97, CachedTokens: 384, ReasoningTokens: 44},
		finish: FinishToolCalls,
		calls:  []ToolCall{{"call_00_mZGagcs09JjCniu4IpalMdlM", "get_weather"}, {"call_01_BkHb2Q3UzGZIX5OX85BBQUIg", "get_weather"}}},
	{dir: "gemini-openai", name: "text", adapter: gemOAIAd,
		usage: Usage{Present: true, InputTokens: 9, OutputTokens: 23}, finish: FinishStop,
		jsonExtra: `{"extra_content":{"google":{"thought_signature":"EjQKMgG+Pvb7jTIE4vjqfoGPCWFlBXybj9GGeZH0PyF/VwCKWplgsjvPQ0CgKW/C4SIZNBTB4JIilBSFFE19L2lhz82M3IXpmLLhiuoLof58QeerZVLv/Duz73bPyqFWxjk9BTnrReirhPWxcov/cI/NfcPEixWhsSXmYQJIkKhn"}}}`},
	{dir: "gemini-openai", name: "parallel-tools", adapter: gemOAIAd,
		usage: Usage{Present: true, InputTokens: 2114, OutputTokens: 38}, finish: FinishToolCalls,
		calls: []ToolCall{{"call_291130", "get_weather"}, {"call_995178", "get_weather"}}},
	{dir: "gemini", name: "text", adapter: geminiAd,
		usage: Usage{Present: true, InputTokens: 9, OutputTokens: 23 + 185, ReasoningTokens: 185}, finish: FinishStop},
	{dir: "gemini", name: "tool-call", adapter: geminiAd,
		usage: Usage{Present: true, InputTokens: 29, OutputTokens: 15 + 45, ReasoningTokens: 45}, finish: FinishToolCalls,
		calls: []ToolCall{{"", "weather"}}},
	{dir: "gemini", name: "parallel-tools", adapter: geminiAd,
		usage:  Usage{Present: true, InputTokens: 2114, OutputTokens: 38 + 196, CachedTokens: 1812, ReasoningTokens: 196},
		finish: FinishToolCalls, calls: []ToolCall{{"", "get_weather"}, {"", "get_weather"}}},
	{dir: "gemini", name: "thoughts-maxtokens", adapter: geminiAd, expected: "-", noJSON: true,
		usage: Usage{Present: true, InputTokens: 29, OutputTokens: 59, ReasoningTokens: 59}, finish: FinishLength},
}

func (g golden) id() string {
	if g.sse != "" {
		return g.dir + "/" + g.sse
	}
	return g.dir + "/" + g.name
}

func checkTurn(t *testing.T, g golden, how string, turn Turn, want any, wantTerminal bool) {
	t.Helper()
	if want != nil {
		if diff := cmp.Diff(want, jsonValue(t, turn.Message)); diff != "" {
			t.Errorf("%s %s: message (-want +got)\n%s", g.id(), how, diff)
		}
	} else {
		jsonValue(t, turn.Message) // at least valid
	}
	if diff := cmp.Diff(g.usage, turn.Usage); diff != "" {
		t.Errorf("%s %s: usage (-want +got)\n%s", g.id(), how, diff)
	}
	if turn.Finish != g.finish {
		t.Errorf("%s %s: finish %q (raw %q), want %q", g.id(), how, turn.Finish, turn.FinishRaw, g.finish)
	}
	if diff := cmp.Diff(g.calls, turn.ToolCalls); diff != "" {
		t.Errorf("%s %s: calls (-want +got)\n%s", g.id(), how, diff)
	}
	if turn.Terminal != wantTerminal {
		t.Errorf("%s %s: terminal %v, want %v", g.id(), how, turn.Terminal, wantTerminal)
	}
	if turn.Error != nil {
		t.Errorf("%s %s: error %s", g.id(), how, turn.Error)
	}
}

func TestGoldenStreams(t *testing.T) {
	for _, g := range goldens {
		sseName := g.sse
		if sseName == "" {
			sseName = g.name + ".sse"
		}
		body := fixture(t, g.dir+"/"+sseName)
		var want any
		if g.expected != "-" {
			want = jsonValue(t, fixture(t, g.dir+"/"+g.name+".expected.json"))
		}
		for _, src := range []struct {
			how string
			r   io.Reader
		}{
			{"whole", bytes.NewReader(body)},
			{"97-byte chunks", &chunked{body, 97}},
			{"5-byte chunks", &chunked{body, 5}},
			{"one byte at a time", iotest.OneByteReader(bytes.NewReader(body))},
		} {
			checkTurn(t, g, src.how, assembleSSE(t, g.adapter, src.r), want, true)
		}
		// The assembler is reusable after Reset.
		asm := g.adapter.NewAssembler()
		for range 2 {
			r := sse.NewReader(bytes.NewReader(body), 0)
			for ev, err := r.Next(); err == nil; ev, err = r.Next() {
				if ev.HasData {
					_ = asm.Feed(ev.Data)
				}
			}
			checkTurn(t, g, "reused", asm.Result(), want, true)
			asm.Reset()
		}
	}
}

func TestGoldenNonStream(t *testing.T) {
	for _, g := range goldens {
		if g.noJSON {
			continue
		}
		want := jsonValue(t, fixture(t, g.dir+"/"+g.name+".expected.json"))
		if g.jsonExtra != "" {
			for k, v := range jsonValue(t, []byte(g.jsonExtra)).(map[string]any) {
				want.(map[string]any)[k] = v
			}
		}
		turn, err := g.adapter.ParseResponse(fixture(t, g.dir+"/"+g.name+".json"))
		if err != nil {
			t.Fatalf("%s: %v", g.id(), err)
		}
		gj := g
		if g.dir == "gemini" {
			// Non-stream usage has the same numbers as the stream's last chunk.
		}
		checkTurn(t, gj, "non-stream", turn, want, true)
	}
}

// TestGeminiJSONArray streams the Gemini fixtures as the JSON array that
// streamGenerateContent without alt=sse sends, and checks the ArrayReader
// splits it losslessly and the assembly is the same.
func TestGeminiJSONArray(t *testing.T) {
	for _, g := range goldens {
		if g.dir != "gemini" {
			continue
		}
		sseBody := fixture(t, g.dir+"/"+g.name+".sse")
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
		if g.expected != "-" {
			want = jsonValue(t, fixture(t, g.dir+"/"+g.name+".expected.json"))
		}
		for _, chunk := range []int{1, 7, 1 << 20} {
			ar := NewArrayReader(&chunked{input, chunk}, 0)
			asm := g.adapter.NewAssembler()
			var cat []byte
			elems := 0
			for {
				raw, val, err := ar.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("%s: %v", g.id(), err)
				}
				cat = append(cat, raw...)
				if err := asm.Feed(val); err != nil {
					t.Fatal(err)
				}
				elems++
			}
			cat = append(cat, ar.Tail()...)
			if !bytes.Equal(cat, input) {
				t.Errorf("%s: Raw+Tail != input:\n%q\n%q", g.id(), cat, input)
			}
			if elems != n {
				t.Errorf("%s: %d elements, want %d", g.id(), elems, n)
			}
			checkTurn(t, g, "json array", asm.Result(), want, true)
		}
		// A whole buffered array also parses as a response.
		turn, err := g.adapter.ParseResponse(input)
		if err != nil {
			t.Fatal(err)
		}
		checkTurn(t, g, "buffered array", turn, want, true)
	}
}

func jsonValueOK(b []byte) bool { return json.Valid(b) }
