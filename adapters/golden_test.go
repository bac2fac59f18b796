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

var geminiAd = NewGemini()

var goldens = []golden{
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
