package repair

import (
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/tidwall/gjson"
)

// skimFormat is one format's skim, skim check and scan.
type skimFormat struct {
	name  string
	skim  func([]byte) Skim
	valid func([]Skim) bool
	scan  func(gjson.Result) bool
	gen   func([]byte) []byte
	dir   string
}

var skimFormats = []skimFormat{
	{"responses", SkimResponses, ValidResponsesSkims, rsValid, genResponses, "responses"},
}

// checkSkims asserts that the skim check agrees with the scan repair
// runs, on the whole history and on every prefix of it (a stored thread
// is checked again as a prefix of the next request).
func checkSkims(t *testing.T, f skimFormat, history []byte) {
	t.Helper()
	arr := gjson.ParseBytes(history)
	if !gjson.ValidBytes(history) || !arr.IsArray() {
		return
	}
	var skims []Skim
	var prefix []byte
	check := func() {
		t.Helper()
		p := append(append([]byte{'['}, prefix...), ']')
		if got, want := f.valid(skims), f.scan(gjson.ParseBytes(p)); got != want {
			t.Fatalf("%s: skims say valid=%v, the scan says %v, for %s", f.name, got, want, p)
		}
	}
	check()
	arr.ForEach(func(_, m gjson.Result) bool {
		skims = append(skims, f.skim([]byte(m.Raw)))
		if len(prefix) > 0 {
			prefix = append(prefix, ',')
		}
		prefix = append(prefix, m.Raw...)
		check()
		return true
	})
}

func TestSkimsAgreeWithScan(t *testing.T) {
	for _, f := range skimFormats {
		files, _ := filepath.Glob(filepath.Join("testdata", f.dir, "*.json"))
		if len(files) == 0 {
			t.Fatalf("no golden inputs for %s", f.name)
		}
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			checkSkims(t, f, []byte(gjson.GetBytes(b, "input").Raw))
		}
		r := rand.New(rand.NewSource(2))
		for range 3000 {
			prog := make([]byte, r.Intn(32))
			r.Read(prog)
			checkSkims(t, f, f.gen(prog))
		}
	}
}

func FuzzSkims(f *testing.F) {
	for _, sf := range skimFormats {
		seedCorpus(f, sf.dir)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, sf := range skimFormats {
			in := data
			if !gjson.ValidBytes(in) {
				in = sf.gen(data[:min(len(data), 96)])
			}
			checkSkims(t, sf, in)
		}
	})
}

// Plain is true exactly for the messages repair reads nothing from.
func TestSkimPlain(t *testing.T) {
	for _, c := range []struct {
		skim func([]byte) Skim
		msg  string
		want bool
	}{
		{SkimResponses, `{"type":"message","role":"user","content":"hi"}`, true},
		{SkimResponses, `{"type":"function_call_output","call_id":"c1","output":"42"}`, false},
	} {
		if got := c.skim([]byte(c.msg)).Plain(); got != c.want {
			t.Errorf("Plain(%s) = %v, want %v", c.msg, got, c.want)
		}
	}
}
