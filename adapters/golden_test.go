package adapters

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"testing"

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

func jsonValueOK(b []byte) bool { return json.Valid(b) }
