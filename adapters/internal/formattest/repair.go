package formattest

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/cmd/mockllm/mock"
	"github.com/chronicle-proxy/chronicle/repair"
)

var update = flag.Bool("update", false, "rewrite the golden want, edits and interrupted of testdata cases")

// RepairFunc is a format's repair.
type RepairFunc func([]byte, repair.Options) (repair.Result, error)

// Validator is an independent validator of a format's histories, written
// with encoding/json: nil when the history needs no repair.
type Validator func([]byte) error

// goldenEdit and goldenCall are Edit and Call as written in testdata.
type goldenEdit struct {
	Kind   string `json:"kind"`
	CallID string `json:"call_id"`
	Name   string `json:"name,omitempty"`
}

type goldenCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// Case is one golden repair case, a file of a format's testdata/repair.
type Case struct {
	Description string          `json:"description"`
	Model       string          `json:"model"`
	ReadOnly    []string        `json:"read_only"`
	Request     json.RawMessage `json:"request,omitempty"`
	// MockAcceptsRaw, when set, says why the mock upstream accepts the
	// broken history although the real provider may not.
	MockAcceptsRaw string          `json:"mock_accepts_raw,omitempty"`
	Input          json.RawMessage `json:"input"`
	Want           json.RawMessage `json:"want"`
	Edits          []goldenEdit    `json:"edits"`
	Interrupted    []goldenCall    `json:"interrupted"`
}

// LoadCases reads the cases of testdata/dir.
func LoadCases(t testing.TB, dir string) map[string]*Case {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases in testdata/%s: %v", dir, err)
	}
	cases := make(map[string]*Case)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var c Case
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		cases[strings.TrimSuffix(filepath.Base(f), ".json")] = &c
	}
	return cases
}

func compact(t testing.TB, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("compact %q: %v", b, err)
	}
	return buf.String()
}

// RepairGolden checks every case of testdata/dir (with -update, rewrites
// their want, edits and interrupted), then its properties.
func RepairGolden(t *testing.T, dir string, fn RepairFunc, chk Validator) {
	for name, c := range LoadCases(t, dir) {
		t.Run(dir+"/"+name, func(t *testing.T) {
			opts := repair.Options{ReadOnlyTools: c.ReadOnly}
			got, err := fn(c.Input, opts)
			if err != nil {
				t.Fatal(err)
			}
			edits := []goldenEdit{}
			for _, e := range got.Edits {
				edits = append(edits, goldenEdit{e.Kind, e.CallID, e.Name})
			}
			intr := []goldenCall{}
			for _, c := range got.Interrupted {
				intr = append(intr, goldenCall(c))
			}
			if *update {
				c.Want, c.Edits, c.Interrupted = json.RawMessage(got.Messages), edits, intr
				b, err := json.MarshalIndent(c, "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join("testdata", dir, name+".json"), append(b, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if d := cmp.Diff(compact(t, c.Want), compact(t, got.Messages)); d != "" {
				t.Errorf("messages (-want +got):\n%s", d)
			}
			if d := cmp.Diff(c.Edits, edits); d != "" {
				t.Errorf("edits (-want +got):\n%s", d)
			}
			if d := cmp.Diff(c.Interrupted, intr); d != "" {
				t.Errorf("interrupted (-want +got):\n%s", d)
			}
			if got.Changed != (len(edits) > 0) {
				t.Errorf("Changed = %v with %d edits", got.Changed, len(edits))
			}
			if strings.HasPrefix(name, "valid_") != !got.Changed {
				t.Errorf("valid_ cases must need no edit, others must need one; Changed = %v", got.Changed)
			}
			CheckProperties(t, fn, chk, c.Input, opts)
		})
	}
}

// NotArray checks that what is not a JSON array gives ErrNotArray.
func NotArray(t *testing.T, name string, fn RepairFunc) {
	for _, in := range []string{``, `{}`, `"x"`, `[`, `[{"role":"user"}`, `[1,]`, `null`, `12`, `[{"a":}]`} {
		if _, err := fn([]byte(in), repair.Options{}); err != repair.ErrNotArray {
			t.Errorf("%s(%q) err = %v, want ErrNotArray", name, in, err)
		}
	}
}

// NoDefectReturnsInput checks that the valid_ cases of testdata/dir come
// back as the input slice itself.
func NoDefectReturnsInput(t *testing.T, dir string, fn RepairFunc) {
	for name, c := range LoadCases(t, dir) {
		if !strings.HasPrefix(name, "valid_") {
			continue
		}
		got, err := fn(c.Input, repair.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Changed || len(got.Messages) != len(c.Input) || &got.Messages[0] != &c.Input[0] {
			t.Errorf("%s/%s: want the input slice itself, unchanged", dir, name)
		}
	}
}

// CheckProperties asserts what holds for every repair: determinism,
// idempotence byte for byte, a valid result (checked by an independent
// validator), untouched messages kept byte for byte and in order, and the
// fast scan agreeing with the full repair.
func CheckProperties(t testing.TB, fn RepairFunc, valid Validator, in []byte, opts repair.Options) {
	t.Helper()
	a, err := fn(in, opts)
	if err != nil {
		t.Fatalf("repair: %v", err)
	}
	b, _ := fn(in, opts)
	if !bytes.Equal(a.Messages, b.Messages) {
		t.Fatalf("not deterministic:\n%s\n%s", a.Messages, b.Messages)
	}
	if a.Changed != (len(a.Edits) > 0) {
		t.Fatalf("Changed = %v with edits %v", a.Changed, a.Edits)
	}
	if !a.Changed && !bytes.Equal(a.Messages, in) {
		t.Fatalf("unchanged but different bytes")
	}
	if !json.Valid(a.Messages) {
		t.Fatalf("output is not JSON: %s", a.Messages)
	}
	again, err := fn(a.Messages, opts)
	if err != nil {
		t.Fatalf("repair of repaired: %v", err)
	}
	if again.Changed || !bytes.Equal(again.Messages, a.Messages) {
		t.Fatalf("not idempotent: edits %v\nfirst:  %s\nsecond: %s", again.Edits, a.Messages, again.Messages)
	}
	if err := valid(a.Messages); err != nil {
		t.Fatalf("repaired history invalid: %v\ninput:  %s\noutput: %s", err, in, a.Messages)
	}
	if err := valid(in); (err == nil) == a.Changed {
		t.Fatalf("validator says %v but Changed = %v (edits %v) for %s", err, a.Changed, a.Edits, in)
	}
	// Untouched messages (no tool call, no result, not empty) keep their
	// bytes and their order.
	var keep []string
	gjson.ParseBytes(in).ForEach(func(_, v gjson.Result) bool {
		if plainMessage(v) {
			keep = append(keep, v.Raw)
		}
		return true
	})
	i := 0
	gjson.ParseBytes(a.Messages).ForEach(func(_, v gjson.Result) bool {
		if i < len(keep) && v.Raw == keep[i] {
			i++
		}
		return true
	})
	if i != len(keep) {
		t.Fatalf("untouched message %q lost or changed in %s", keep[i], a.Messages)
	}
}

// plainMessage reports whether v has nothing repair could change: no
// tool call, no result, and it is not an empty assistant or model turn.
func plainMessage(v gjson.Result) bool {
	role := v.Get("role").Str
	if t := v.Get("type").Str; t == "function_call" || t == "function_call_output" {
		return false
	}
	if v.Get("tool_calls").Exists() || role == "tool" || v.Get("parts.#.functionCall|#").Int() > 0 ||
		v.Get("parts.#.functionResponse|#").Int() > 0 {
		return false
	}
	if c := v.Get("content"); c.IsArray() {
		// Anthropic content blocks.
		hasText := false
		for _, b := range c.Array() {
			switch b.Get("type").Str {
			case "tool_use", "tool_result":
				return false
			case "thinking", "redacted_thinking":
			case "text":
				hasText = hasText || b.Get("text").Str != ""
			default:
				hasText = true
			}
		}
		if role == "assistant" && !hasText && !v.Get("refusal").Exists() {
			return false
		}
	}
	if role == "assistant" {
		c := v.Get("content")
		return !(!c.Exists() || c.Type == gjson.Null || c.Str == "" && c.Type == gjson.String || c.IsArray() && len(c.Array()) == 0) || v.Get("refusal").Str != ""
	}
	if role == "model" {
		for _, p := range v.Get("parts").Array() {
			if len(p.Map()) == 0 {
				return true
			}
			for k, x := range p.Map() {
				if k != "thought" && k != "thoughtSignature" && (k != "text" || x.Str != "") {
					return true
				}
			}
		}
		return false
	}
	return true
}

// FuzzBody is the body of a format's repair fuzz target: invalid JSON is
// ErrNotArray (and, with Options.Valid set, ends without a panic) and
// stands for a generated history instead; any array has the properties.
func FuzzBody(t *testing.T, data []byte, gen func([]byte) []byte, fn RepairFunc, valid Validator) {
	in := data
	if !gjson.ValidBytes(data) {
		if _, err := fn(data, repair.Options{}); !errors.Is(err, repair.ErrNotArray) {
			t.Fatalf("invalid JSON: err = %v", err)
		}
		// Undefined, but it must end and not panic: the proxy repairs
		// with Options.Valid set.
		_, _ = fn(data, repair.Options{Valid: true})
		in = gen(data[:min(len(data), 96)])
	} else if !gjson.ParseBytes(data).IsArray() {
		return
	}
	CheckProperties(t, fn, valid, in, repair.Options{ReadOnlyTools: []string{"get_weather"}})
}

// SeedCorpus adds every golden input of testdata/dir and a few generator
// programs.
func SeedCorpus(f *testing.F, dir string) {
	files, _ := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
	for _, p := range files {
		b, _ := os.ReadFile(p)
		f.Add([]byte(gjson.GetBytes(b, "input").Raw))
	}
	for _, s := range []string{"\x00\x03\x05", "\x00\x0b\x05\x00\x03", "\x03\x02\x05\x05\x0d", "\x05\x00\x03\x01\x04\x06\x07"} {
		f.Add([]byte(s))
	}
}

// Skims is one format's skim, skim check and scan.
type Skims struct {
	Name  string
	Skim  func([]byte) repair.Skim
	Valid func([]repair.Skim) bool
	Scan  func(gjson.Result) bool
}

// CheckSkims asserts that the skim check agrees with the scan repair
// runs, on the whole history and on every prefix of it (a stored thread
// is checked again as a prefix of the next request).
func CheckSkims(t *testing.T, f Skims, history []byte) {
	t.Helper()
	arr := gjson.ParseBytes(history)
	if !gjson.ValidBytes(history) || !arr.IsArray() {
		return
	}
	var skims []repair.Skim
	var prefix []byte
	check := func() {
		t.Helper()
		p := append(append([]byte{'['}, prefix...), ']')
		if got, want := f.Valid(skims), f.Scan(gjson.ParseBytes(p)); got != want {
			t.Fatalf("%s: skims say valid=%v, the scan says %v, for %s", f.Name, got, want, p)
		}
	}
	check()
	arr.ForEach(func(_, m gjson.Result) bool {
		skims = append(skims, f.Skim([]byte(m.Raw)))
		if len(prefix) > 0 {
			prefix = append(prefix, ',')
		}
		prefix = append(prefix, m.Raw...)
		check()
		return true
	})
}

// MockRequest builds the request that sends history, in a case's
// request, to the mock upstream at base.
type MockRequest func(base string, c *Case, history []byte) *http.Request

// MockUpstream sends every golden case of testdata/dir to the strict mock
// upstream: the raw broken history must be refused with 400 (unless the
// case says why the mock accepts it) and the repaired one accepted with
// 200.
func MockUpstream(t *testing.T, dir string, fn RepairFunc, request MockRequest) {
	srv, err := mock.Start("127.0.0.1:0", mock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	client := &http.Client{}
	send := func(t *testing.T, c *Case, history []byte) (int, string) {
		t.Helper()
		req := request(srv.URL(), c, history)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		rb, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(rb)
	}
	for name, c := range LoadCases(t, dir) {
		t.Run(dir+"/"+name, func(t *testing.T) {
			got, err := fn(c.Input, repair.Options{ReadOnlyTools: c.ReadOnly})
			if err != nil {
				t.Fatal(err)
			}
			wantRaw := http.StatusBadRequest
			if strings.HasPrefix(name, "valid_") || c.MockAcceptsRaw != "" {
				wantRaw = http.StatusOK
			}
			if st, body := send(t, c, c.Input); st != wantRaw {
				t.Errorf("raw history: status %d, want %d: %s", st, wantRaw, body)
			}
			if st, body := send(t, c, got.Messages); st != http.StatusOK {
				t.Errorf("repaired history: status %d, want 200: %s\n%s", st, body, got.Messages)
			}
		})
	}
}

// MockBody is a case's request with the history (and, when model is
// true, its model) set: the body MockRequest sends.
func MockBody(t testing.TB, c *Case, historyKey string, history []byte, model bool) []byte {
	body := map[string]json.RawMessage{}
	if len(c.Request) > 0 {
		if err := json.Unmarshal(c.Request, &body); err != nil {
			t.Fatal(err)
		}
	}
	if model {
		body["model"], _ = json.Marshal(c.Model)
	}
	body[historyKey] = history
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatalf("marshal request: %v", err)
	}
	return b
}

// BenchRepair benchmarks fn on in, which it must change or not as said.
func BenchRepair(b *testing.B, fn RepairFunc, in []byte, wantChanged bool) {
	opts := repair.Options{ReadOnlyTools: []string{"get_weather"}}
	r, err := fn(in, opts)
	if err != nil || r.Changed != wantChanged {
		b.Fatalf("Changed = %v, err %v", r.Changed, err)
	}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		fn(in, opts)
	}
}

// CleanHistoryAllocs guards the fast path: in, a 500-message history (497
// where the format's exchange does not divide 500) with no defect, is
// checked without a single allocation.
func CleanHistoryAllocs(t *testing.T, name string, fn RepairFunc, in []byte) {
	if n := strings.Count(string(in), `"role"`) + strings.Count(string(in), `"type":"function_call`) + strings.Count(string(in), `"type":"reasoning"`); n != 500 && n != 497 {
		t.Fatalf("%s: %d messages, want 500", name, n)
	}
	var r repair.Result
	allocs := testing.AllocsPerRun(20, func() { r, _ = fn(in, repair.Options{}) })
	if r.Changed || allocs != 0 {
		t.Errorf("%s: Changed = %v, %v allocs per run, want unchanged and 0", name, r.Changed, allocs)
	}
}
