package sse

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/chronicle-proxy/chronicle/cmd/mockllm/fixtures"
	"github.com/google/go-cmp/cmp"
)

// got is a copy of an Event that outlives the Reader's buffers.
type got struct {
	Raw, Data, Event, ID string
	Kind                 Kind
	HasData, Partial     bool
}

func readAll(t testing.TB, src io.Reader, max int) ([]got, error) {
	t.Helper()
	r := NewReader(src, max)
	var out []got
	for {
		ev, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		out = append(out, got{string(ev.Raw), string(ev.Data), string(ev.Event), string(ev.ID), ev.Kind, ev.HasData, ev.Partial})
	}
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := min(c.n, len(p), len(c.b))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

func TestReaderCases(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []got
	}{
		{"lf", "data: a\n\ndata: b\n\n", []got{
			{Raw: "data: a\n\n", Data: "a", HasData: true},
			{Raw: "data: b\n\n", Data: "b", HasData: true},
		}},
		{"crlf", "data: {\"x\": 1}\r\n\r\n", []got{{Raw: "data: {\"x\": 1}\r\n\r\n", Data: "{\"x\": 1}", HasData: true}}},
		{"cr", "data: a\r\rdata: b\r\r", []got{
			{Raw: "data: a\r\r", Data: "a", HasData: true},
			{Raw: "data: b\r\r", Data: "b", HasData: true},
		}},
		{"multiline data", "data: a\ndata:b\ndata:  c\n\n", []got{{Raw: "data: a\ndata:b\ndata:  c\n\n", Data: "a\nb\n c", HasData: true}}},
		{"event and id", "event: response.created\nid: 7\ndata: {}\n\n", []got{{Raw: "event: response.created\nid: 7\ndata: {}\n\n", Data: "{}", Event: "response.created", ID: "7", HasData: true}}},
		{"comment block", ": keep-alive\n\ndata: x\n\n", []got{
			{Raw: ": keep-alive\n\n", Kind: KindComment},
			{Raw: "data: x\n\n", Data: "x", HasData: true},
		}},
		{"comment inside event", ": note\ndata: x\n\n", []got{{Raw: ": note\ndata: x\n\n", Data: "x", HasData: true}}},
		{"stray blank line", "\ndata: x\n\n", []got{
			{Raw: "\n", Kind: KindComment},
			{Raw: "data: x\n\n", Data: "x", HasData: true},
		}},
		{"empty data", "data\n\ndata:\n\n", []got{
			{Raw: "data\n\n", HasData: true},
			{Raw: "data:\n\n", HasData: true},
		}},
		{"no data field", "event: ping\n\n", []got{{Raw: "event: ping\n\n", Event: "ping"}}},
		{"partial at end", "data: a\n\ndata: b", []got{
			{Raw: "data: a\n\n", Data: "a", HasData: true},
			{Raw: "data: b", Data: "b", HasData: true, Partial: true},
		}},
		{"partial after line", "data: a\n", []got{{Raw: "data: a\n", Data: "a", HasData: true, Partial: true}}},
		{"id with NUL ignored", "id: a\x00b\ndata: x\n\n", []got{{Raw: "id: a\x00b\ndata: x\n\n", Data: "x", HasData: true}}},
		{"done", "data: [DONE]\n\n", []got{{Raw: "data: [DONE]\n\n", Data: "[DONE]", HasData: true}}},
		{"empty input", "", nil},
	}
	for _, tc := range tests {
		for _, n := range []int{1, 2, 3, 7, 1 << 20} {
			evs, err := readAll(t, &chunkReader{[]byte(tc.in), n}, 0)
			if err != nil {
				t.Fatalf("%s/chunk %d: %v", tc.name, n, err)
			}
			if diff := cmp.Diff(tc.want, evs); diff != "" {
				t.Errorf("%s/chunk %d: (-want +got)\n%s", tc.name, n, diff)
			}
		}
	}
}

func TestReaderTooLong(t *testing.T) {
	in := "data: " + strings.Repeat("x", 10000) + "\n\ndata: y\n\n"
	_, err := readAll(t, strings.NewReader(in), 5000)
	if !errors.Is(err, ErrEventTooLong) {
		t.Fatalf("err = %v, want ErrEventTooLong", err)
	}
	r := NewReader(strings.NewReader(in), 5000)
	for range 3 {
		if _, err := r.Next(); !errors.Is(err, ErrEventTooLong) {
			t.Fatalf("error not sticky: %v", err)
		}
	}
	// Exactly at the limit is fine.
	evs, err := readAll(t, strings.NewReader("data: abc\n\n"), len("data: abc\n\n"))
	if err != nil || len(evs) != 1 {
		t.Fatalf("at limit: %v %v", evs, err)
	}
}

func TestReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	src := io.MultiReader(strings.NewReader("data: a\n\ndata: b"), iotest.ErrReader(boom))
	evs, err := readAll(t, src, 0)
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	want := []got{{Raw: "data: a\n\n", Data: "a", HasData: true}, {Raw: "data: b", Data: "b", HasData: true, Partial: true}}
	if diff := cmp.Diff(want, evs); diff != "" {
		t.Error(diff)
	}
}

// TestReaderFixtures reads every provider stream one byte at a time and in
// odd chunks, and checks the events reproduce the input exactly.
func TestReaderFixtures(t *testing.T) {
	paths, err := fs.Glob(fixtures.FS, "providers/*/*.sse")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, p := range paths {
		body, _ := fs.ReadFile(fixtures.FS, p)
		var ref []got
		for i, src := range []io.Reader{iotest.OneByteReader(bytes.NewReader(body)), &chunkReader{body, 97}, bytes.NewReader(body)} {
			evs, err := readAll(t, src, 0)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			var cat strings.Builder
			events := 0
			for _, e := range evs {
				cat.WriteString(e.Raw)
				if e.Partial {
					t.Errorf("%s: partial event %q", p, e.Raw)
				}
				if e.Kind == KindEvent {
					events++
					if !e.HasData {
						t.Errorf("%s: event without data %q", p, e.Raw)
					}
				}
			}
			if cat.String() != string(body) {
				t.Fatalf("%s: concatenated Raw differs from input", p)
			}
			if want := bytes.Count(body, []byte("data:")); events != want {
				t.Errorf("%s: %d events, want %d", p, events, want)
			}
			if i == 0 {
				ref = evs
			} else if diff := cmp.Diff(ref, evs); diff != "" {
				t.Errorf("%s: chunking changed the events:\n%s", p, diff)
			}
		}
	}
}

// loopReader serves the same bytes forever.
type loopReader struct {
	b   []byte
	off int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := copy(p, l.b[l.off:])
	l.off = (l.off + n) % len(l.b)
	return n, nil
}

func TestReaderNoAllocs(t *testing.T) {
	for _, in := range []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"hello\"}}]}\n\n",
		"data: {\"candidates\": []}\r\n\r\n",
		"event: response.output_text.delta\ndata: {\"delta\":\"x\"}\n\n",
		"data: a\ndata: b\n\n: keep-alive\n\n",
	} {
		r := NewReader(&loopReader{b: []byte(in)}, 0)
		for range 100 {
			if _, err := r.Next(); err != nil {
				t.Fatal(err)
			}
		}
		if a := testing.AllocsPerRun(1000, func() {
			if _, err := r.Next(); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("%q: %v allocs per Next, want 0", in, a)
		}
	}
}

func BenchmarkReader(b *testing.B) {
	body, _ := fs.ReadFile(fixtures.FS, "providers/openai-chat/text.sse")
	br := bytes.NewReader(body)
	r := NewReader(br, 0)
	events := 0
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		br.Reset(body)
		r.Reset(br)
		for {
			if _, err := r.Next(); err != nil {
				break
			}
			events++
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("data: a\n\ndata: b\r\n\r\n: c\n\n"), uint8(3), uint16(64))
	f.Add([]byte("data: x\r\rid: 1\nevent: e\ndata: y\ndata: z\n\n"), uint8(1), uint16(0))
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8, max uint16) {
		limit := int(max)
		evs, err := readAll(t, &chunkReader{in, int(chunk%16) + 1}, limit)
		if err != nil {
			if !errors.Is(err, ErrEventTooLong) || limit == 0 {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		var cat []byte
		for i, e := range evs {
			cat = append(cat, e.Raw...)
			if e.Partial && i != len(evs)-1 {
				t.Fatal("partial event before the end")
			}
			if e.Kind == KindComment && (e.HasData || e.Event != "" || e.ID != "") {
				t.Fatal("comment block with fields")
			}
			if len(e.Raw) == 0 {
				t.Fatal("empty Raw")
			}
		}
		if !bytes.Equal(cat, in) {
			t.Fatalf("concatenated Raw %q != input %q", cat, in)
		}
		// Chunking never changes the events.
		whole, err := readAll(t, bytes.NewReader(in), limit)
		if err == nil {
			if diff := cmp.Diff(whole, evs); diff != "" {
				t.Fatalf("chunking changed events: %s", diff)
			}
		}
	})
}

func TestBuffered(t *testing.T) {
	r := NewReader(strings.NewReader("data: a\n\ndata: b\n\ndata: c"), 0)
	want := []bool{true, false}
	for i, w := range want {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
		if got := r.Buffered(); got != w {
			t.Fatalf("after event %d Buffered() = %v, want %v", i+1, got, w)
		}
	}
}
