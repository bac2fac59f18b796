// Package formattest is what every wire-format package's tests share: the
// recorded provider fixtures, the golden stream and non-stream checks of an
// adapter, the assembler fuzz body and benchmark loop, and (repair.go) the
// golden cases, properties, skim check and mock-upstream run of a format's
// repair rules. Only tests import it.
package formattest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"runtime"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/adapters/sse"
	"github.com/chronicle-proxy/chronicle/cmd/mockllm/fixtures"
)

// Fixture is a recorded provider file (cmd/mockllm/fixtures/providers).
func Fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := fs.ReadFile(fixtures.FS, "providers/"+name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// JSONValue decodes for a JSON-equality comparison in tests only.
func JSONValue(t testing.TB, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("invalid JSON %q: %v", b, err)
	}
	return v
}

// MustEqualJSON reports an error unless got is the JSON value want.
func MustEqualJSON(t *testing.T, want string, got []byte) {
	t.Helper()
	if diff := cmp.Diff(JSONValue(t, []byte(want)), JSONValue(t, got)); diff != "" {
		t.Errorf("(-want +got)\n%s\ngot %s", diff, got)
	}
}

// Chunked reads B at most N bytes at a time.
type Chunked struct {
	B []byte
	N int
}

func (c *Chunked) Read(p []byte) (int, error) {
	if len(c.B) == 0 {
		return 0, io.EOF
	}
	n := min(c.N, len(p), len(c.B))
	copy(p, c.B[:n])
	c.B = c.B[n:]
	return n, nil
}

// FeedAll feeds payloads to a fresh assembler of a and returns its turn.
func FeedAll(t *testing.T, a adapters.Adapter, payloads ...string) adapters.Turn {
	t.Helper()
	asm := a.NewAssembler()
	for _, p := range payloads {
		if err := asm.Feed([]byte(p)); err != nil {
			t.Fatalf("feed %s: %v", p, err)
		}
	}
	return asm.Result()
}

// AssembleSSE feeds every data event of an SSE body to a fresh assembler.
func AssembleSSE(t testing.TB, a adapters.Adapter, src io.Reader) adapters.Turn {
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

// Golden is one recorded answer (a stream, and unless NoJSON its
// non-stream body) and the turn it assembles to.
type Golden struct {
	Dir, Name string
	SSE       string // stream file; "" = Name.sse
	Adapter   adapters.Adapter
	Expected  string // "" = Name.expected.json; "-" = none
	Usage     adapters.Usage
	Finish    adapters.FinishReason
	Calls     []adapters.ToolCall
	// Model is the model the answer names (Turn.Model), the same in the
	// stream and the non-stream fixture.
	Model string
	// JSONExtra is JSON merged into the expected message for the
	// non-stream body (fields the non-stream answer has and the stream
	// does not).
	JSONExtra string
	NoJSON    bool
}

// ID names the golden in failures.
func (g Golden) ID() string {
	if g.SSE != "" {
		return g.Dir + "/" + g.SSE
	}
	return g.Dir + "/" + g.Name
}

// CheckTurn checks turn against the golden: its message equals want (nil:
// any valid JSON), and its usage, finish, calls and terminal marker.
func CheckTurn(t *testing.T, g Golden, how string, turn adapters.Turn, want any, wantTerminal bool) {
	t.Helper()
	if want != nil {
		if diff := cmp.Diff(want, JSONValue(t, turn.Message)); diff != "" {
			t.Errorf("%s %s: message (-want +got)\n%s", g.ID(), how, diff)
		}
	} else {
		JSONValue(t, turn.Message) // at least valid
	}
	if diff := cmp.Diff(g.Usage, turn.Usage); diff != "" {
		t.Errorf("%s %s: usage (-want +got)\n%s", g.ID(), how, diff)
	}
	if turn.Finish != g.Finish {
		t.Errorf("%s %s: finish %q (raw %q), want %q", g.ID(), how, turn.Finish, turn.FinishRaw, g.Finish)
	}
	if diff := cmp.Diff(g.Calls, turn.ToolCalls); diff != "" {
		t.Errorf("%s %s: calls (-want +got)\n%s", g.ID(), how, diff)
	}
	if turn.Model != g.Model {
		t.Errorf("%s %s: model %q, want %q", g.ID(), how, turn.Model, g.Model)
	}
	if turn.Terminal != wantTerminal {
		t.Errorf("%s %s: terminal %v, want %v", g.ID(), how, turn.Terminal, wantTerminal)
	}
	if turn.Error != nil {
		t.Errorf("%s %s: error %s", g.ID(), how, turn.Error)
	}
}

// GoldenStreams feeds every golden's stream whole, in chunks and one byte
// at a time through adapters/sse, and through a reused assembler.
func GoldenStreams(t *testing.T, goldens []Golden) {
	for _, g := range goldens {
		sseName := g.SSE
		if sseName == "" {
			sseName = g.Name + ".sse"
		}
		body := Fixture(t, g.Dir+"/"+sseName)
		var want any
		if g.Expected != "-" {
			want = JSONValue(t, Fixture(t, g.Dir+"/"+g.Name+".expected.json"))
		}
		for _, src := range []struct {
			how string
			r   io.Reader
		}{
			{"whole", bytes.NewReader(body)},
			{"97-byte chunks", &Chunked{body, 97}},
			{"5-byte chunks", &Chunked{body, 5}},
			{"one byte at a time", iotest.OneByteReader(bytes.NewReader(body))},
		} {
			CheckTurn(t, g, src.how, AssembleSSE(t, g.Adapter, src.r), want, true)
		}
		// The assembler is reusable after Reset.
		asm := g.Adapter.NewAssembler()
		for range 2 {
			r := sse.NewReader(bytes.NewReader(body), 0)
			for ev, err := r.Next(); err == nil; ev, err = r.Next() {
				if ev.HasData {
					_ = asm.Feed(ev.Data)
				}
			}
			CheckTurn(t, g, "reused", asm.Result(), want, true)
			asm.Reset()
		}
	}
}

// GoldenNonStream parses every golden's non-stream body.
func GoldenNonStream(t *testing.T, goldens []Golden) {
	for _, g := range goldens {
		if g.NoJSON {
			continue
		}
		want := JSONValue(t, Fixture(t, g.Dir+"/"+g.Name+".expected.json"))
		if g.JSONExtra != "" {
			for k, v := range JSONValue(t, []byte(g.JSONExtra)).(map[string]any) {
				want.(map[string]any)[k] = v
			}
		}
		turn, err := g.Adapter.ParseResponse(Fixture(t, g.Dir+"/"+g.Name+".json"))
		if err != nil {
			t.Fatalf("%s: %v", g.ID(), err)
		}
		CheckTurn(t, g, "non-stream", turn, want, true)
	}
}

// FuzzAssembler fuzzes an adapter with payloads, one per line: the
// assembled message and error are valid JSON, Reset forgets everything,
// and parsing, stripping, walking, restoring and hashing never fail
// badly.
func FuzzAssembler(f *testing.F, ad adapters.Adapter, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		asm := ad.NewAssembler()
		for _, p := range bytes.Split(in, []byte("\n")) {
			_ = asm.Feed(p)
		}
		turn := asm.Result()
		if !json.Valid(turn.Message) {
			t.Fatalf("invalid message %q", turn.Message)
		}
		if turn.Error != nil && !json.Valid(turn.Error) {
			t.Fatalf("invalid error %q", turn.Error)
		}
		asm.Reset()
		if got := asm.Result(); !json.Valid(got.Message) || len(got.ToolCalls) != 0 {
			t.Fatalf("reset left state: %s", got.Message)
		}
		_, _ = ad.ParseResponse(in)
		_, _ = ad.StripAddedUsage(append([]byte(nil), in...))
		if msgs, ok := ad.Messages(in); ok {
			_ = ad.WalkMessages(msgs, func(adapters.Message) bool { return true })
			out, _, err := ad.Restore(msgs, msgs, "deepseek-v4-flash")
			if err == nil && !json.Valid(out) {
				t.Fatalf("restore made invalid JSON %q", out)
			}
		}
		h := adapters.HashMessage(in)
		if jsonscan.Valid(in) && adapters.HashValidMessage(in) != h {
			t.Fatalf("HashValidMessage(%q) differs from HashMessage", in)
		}
	})
}

// Stream builds an SSE body: head events, n copies of the hot event, tail.
func Stream(head []string, hot string, n int, tail []string, sep string) []byte {
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

// BenchAssemble reads and assembles the SSE body with ad (SSE reader +
// Feed per event + Result) and reports per-event figures; ok checks each
// result. events, when not 0, is how many events the body has.
func BenchAssemble(b *testing.B, ad adapters.Adapter, body []byte, events int, ok func(adapters.Turn) bool) {
	br := bytes.NewReader(body)
	r := sse.NewReader(br, 0)
	asm := ad.NewAssembler()
	fed := 0
	var before, after runtime.MemStats
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	runtime.ReadMemStats(&before)
	for b.Loop() {
		br.Reset(body)
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
			fed++
		}
		if t := asm.Result(); !ok(t) {
			b.Fatal("not terminal")
		}
	}
	runtime.ReadMemStats(&after)
	if events > 0 && fed != b.N*events {
		b.Fatalf("%d events for %d loops", fed, b.N)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(fed), "ns/event")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(fed), "allocs/event")
}
