package repair

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden want, edits and interrupted of testdata cases")

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

// goldenCase is one file of testdata/openai or testdata/gemini.
type goldenCase struct {
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

type repairFunc func([]byte, Options) (Result, error)

var formats = []struct {
	dir string
	fn  repairFunc
	chk func([]byte) error
}{
	{"responses", Responses, checkResponsesValid},
}

func loadCases(t testing.TB, dir string) map[string]*goldenCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases in testdata/%s: %v", dir, err)
	}
	cases := make(map[string]*goldenCase)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var c goldenCase
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

func TestGolden(t *testing.T) {
	for _, f := range formats {
		for name, c := range loadCases(t, f.dir) {
			t.Run(f.dir+"/"+name, func(t *testing.T) {
				opts := Options{ReadOnlyTools: c.ReadOnly}
				got, err := f.fn(c.Input, opts)
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
					if err := os.WriteFile(filepath.Join("testdata", f.dir, name+".json"), append(b, '\n'), 0o644); err != nil {
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
				checkProperties(t, f.fn, f.chk, c.Input, opts)
			})
		}
	}
}

func TestNotArray(t *testing.T) {
	for _, in := range []string{``, `{}`, `"x"`, `[`, `[{"role":"user"}`, `[1,]`, `null`, `12`, `[{"a":}]`} {
		for _, f := range formats {
			if _, err := f.fn([]byte(in), Options{}); err != ErrNotArray {
				t.Errorf("%s(%q) err = %v, want ErrNotArray", f.dir, in, err)
			}
		}
	}
}

func TestNoDefectReturnsInput(t *testing.T) {
	for _, f := range formats {
		for name, c := range loadCases(t, f.dir) {
			if !strings.HasPrefix(name, "valid_") {
				continue
			}
			got, err := f.fn(c.Input, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Changed || len(got.Messages) != len(c.Input) || &got.Messages[0] != &c.Input[0] {
				t.Errorf("%s/%s: want the input slice itself, unchanged", f.dir, name)
			}
		}
	}
}
