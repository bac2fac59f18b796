package gemini

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters/internal/formattest"
	"github.com/chronicle-proxy/chronicle/repair"
	"github.com/tidwall/gjson"
)

// checkGeminiValid is an independent validator of Gemini contents:
// consecutive model contents are one turn, whose calls the next content
// answers exactly (by id, or by name for calls without one).
func checkGeminiValid(b []byte) error {
	type fn struct {
		ID, Name string
	}
	type content struct {
		Role  string
		Parts []map[string]json.RawMessage
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(b, &elems); err != nil {
		return err
	}
	cs := make([]content, len(elems))
	for i, e := range elems {
		json.Unmarshal(e, &cs[i]) // what does not fit stays zero, as repair sees it
	}
	seen := map[string]bool{}
	var open []fn
	for i, c := range cs {
		if open != nil && c.Role != "model" {
			for _, p := range c.Parts {
				if p["functionResponse"] == nil {
					continue
				}
				var r fn
				json.Unmarshal(p["functionResponse"], &r)
				j := 0
				for ; j < len(open); j++ {
					if (r.ID != "" && open[j].ID == r.ID) || (r.ID == "" && open[j].ID == "" && open[j].Name == r.Name) {
						break
					}
				}
				if j == len(open) {
					return fmt.Errorf("content %d: response %v matches no pending call", i, r)
				}
				open = append(open[:j], open[j+1:]...)
			}
			if len(open) > 0 {
				return fmt.Errorf("content %d: calls %v unanswered", i, open)
			}
			open = nil
			continue
		}
		empty := true
		for _, p := range c.Parts {
			if p["functionResponse"] != nil {
				return fmt.Errorf("content %d: response without a pending call", i)
			}
			for k, v := range p {
				if k != "thought" && k != "thoughtSignature" && (k != "text" || string(v) != `""`) {
					empty = false
				}
			}
			if c.Role == "model" && p["functionCall"] != nil {
				var f fn
				json.Unmarshal(p["functionCall"], &f)
				if f.ID != "" {
					if seen[f.ID] {
						return fmt.Errorf("content %d: call id %q reused", i, f.ID)
					}
					seen[f.ID] = true
				}
				open = append(open, f)
			}
		}
		if c.Role == "model" && empty {
			return fmt.Errorf("content %d: empty model content", i)
		}
	}
	if len(open) > 0 {
		return fmt.Errorf("calls %v unanswered at the end", open)
	}
	return nil
}

// genGemini is genOpenAI for Gemini contents.
func genGemini(prog []byte) []byte {
	ids := []string{"", "f1", "f2", "f1_2", ""}
	names := []string{"get_weather", "get_time"}
	part := func(kind string, arg int) string {
		id := ids[arg%len(ids)]
		s := fmt.Sprintf(`{%q:{"name":%q`, kind, names[(arg/5)%2])
		if id != "" {
			s += fmt.Sprintf(`,"id":%q`, id)
		}
		if kind == "functionCall" {
			return s + `,"args":{}}}`
		}
		return s + `,"response":{"r":1}}}`
	}
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < len(prog); i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		op, arg := prog[i]%8, int(prog[i]/8)
		switch op {
		case 0:
			b.WriteString(`{"role":"user","parts":[{"text":"u"}]}`)
		case 1:
			b.WriteString(`{"role":"model","parts":[{"text":"t"}]}`)
		case 2:
			b.WriteString([]string{`{"role":"model","parts":[]}`, `{"role":"model"}`, `{"role":"model","parts":[{"text":""}]}`, `{"role":"model","parts":[{"text":"","thoughtSignature":"x"}]}`}[arg%4])
		case 3, 4:
			b.WriteString(`{"role":"model","parts":[`)
			for k := 0; k <= arg%3; k++ {
				if k > 0 {
					b.WriteByte(',')
				}
				b.WriteString(part("functionCall", arg/3+k))
			}
			b.WriteString(`]}`)
		case 5, 6:
			b.WriteString(`{"role":"user","parts":[`)
			for k := 0; k <= arg%2; k++ {
				if k > 0 {
					b.WriteByte(',')
				}
				b.WriteString(part("functionResponse", arg/2+k))
			}
			b.WriteString(`]}`)
		case 7:
			b.WriteString(`{"role":"user","parts":[{"text":"x"},` + part("functionResponse", arg) + `]}`)
		}
	}
	b.WriteByte(']')
	return []byte(b.String())
}

// gemini500 is history500 for Gemini contents.
func gemini500(defects bool) []byte {
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < 125; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role":"user","parts":[{"text":"What's the weather in city %d and its neighbour?"}]},`, i)
		fmt.Fprintf(&b, `{"role":"model","parts":[{"functionCall":{"id":"fc_%da","name":"get_weather","args":{"city":"c%d"}},"thoughtSignature":"c2lnbmF0dXJl"},{"functionCall":{"id":"fc_%db","name":"get_weather","args":{"city":"n%d"}}}]},`, i, i, i, i)
		if defects {
			fmt.Fprintf(&b, `{"role":"model","parts":[]},{"role":"user","parts":[{"functionResponse":{"id":"fc_%da","name":"get_weather","response":{"temp_c":%d}}}]}`, i, i%30)
		} else {
			fmt.Fprintf(&b, `{"role":"user","parts":[{"functionResponse":{"id":"fc_%da","name":"get_weather","response":{"temp_c":%d}}},{"functionResponse":{"id":"fc_%db","name":"get_weather","response":{"temp_c":%d}}}]},`, i, i%30, i, i%25)
			fmt.Fprintf(&b, `{"role":"model","parts":[{"text":"City %d is overcast and its neighbour is clear."}]}`, i)
		}
	}
	b.WriteByte(']')
	return []byte(b.String())
}

func BenchmarkGemini500Clean(b *testing.B) {
	formattest.BenchRepair(b, repairGemini, gemini500(false), false)
}

func BenchmarkGemini500Defects(b *testing.B) {
	formattest.BenchRepair(b, repairGemini, gemini500(true), true)
}

// repairGemini is the Gemini adapter's Repair.
var repairGemini formattest.RepairFunc = geminiAd.Repair

func TestRepairGolden(t *testing.T) {
	formattest.RepairGolden(t, "repair", repairGemini, checkGeminiValid)
}

func TestRepairNotArray(t *testing.T) { formattest.NotArray(t, "gemini", repairGemini) }

func TestRepairNoDefectReturnsInput(t *testing.T) {
	formattest.NoDefectReturnsInput(t, "repair", repairGemini)
}

func FuzzGemini(f *testing.F) {
	formattest.SeedCorpus(f, "repair")
	f.Fuzz(func(t *testing.T, data []byte) {
		formattest.FuzzBody(t, data, genGemini, repairGemini, checkGeminiValid)
	})
}

// TestGeneratedHistories runs the properties over every history of up
// to three steps the generator can make from a set of single-byte ops,
// then over random longer programs.
func TestGeneratedHistories(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for range 3000 {
		prog := make([]byte, r.Intn(24))
		r.Read(prog)
		formattest.CheckProperties(t, repairGemini, checkGeminiValid, genGemini(prog), repair.Options{})
	}
	ops := []byte{0, 1, 2, 3, 3 + 8, 3 + 8*5, 4 + 8*2, 5, 5 + 8*3, 6 + 8, 7, 7 + 8*4, 2 + 8, 4 + 8*7}
	var prog []byte
	var rec func(depth int)
	rec = func(depth int) {
		formattest.CheckProperties(t, repairGemini, checkGeminiValid, genGemini(prog), repair.Options{})
		if depth == 0 {
			return
		}
		for _, o := range ops {
			prog = append(prog, o)
			rec(depth - 1)
			prog = prog[:len(prog)-1]
		}
	}
	rec(3)
}

// TestCleanHistoryAllocs guards the fast path: a 500-content history with
// no defect is checked without a single allocation.
func TestCleanHistoryAllocs(t *testing.T) {
	formattest.CleanHistoryAllocs(t, "gemini", repairGemini, gemini500(false))
}

// TestDefectHistories checks the 500-content defect histories like any other.
func TestDefectHistories(t *testing.T) {
	formattest.CheckProperties(t, repairGemini, checkGeminiValid, gemini500(true), repair.Options{})
	formattest.CheckProperties(t, repairGemini, checkGeminiValid, gemini500(false), repair.Options{})
}

// skims are the Gemini adapter's skim, skim check and the scan repair runs.
var skims = formattest.Skims{
	Name:  "gemini",
	Skim:  geminiAd.Skim,
	Valid: repair.ValidSkims,
	Scan:  func(arr gjson.Result) bool { return repair.Valid(rules, []byte(arr.Raw)) },
}

func TestSkimsAgreeWithScan(t *testing.T) {
	for _, c := range formattest.LoadCases(t, "repair") {
		formattest.CheckSkims(t, skims, c.Input)
	}
	r := rand.New(rand.NewSource(2))
	for range 3000 {
		prog := make([]byte, r.Intn(32))
		r.Read(prog)
		formattest.CheckSkims(t, skims, genGemini(prog))
	}
}

func FuzzSkims(f *testing.F) {
	formattest.SeedCorpus(f, "repair")
	f.Fuzz(func(t *testing.T, data []byte) {
		in := data
		if !gjson.ValidBytes(in) {
			in = genGemini(data[:min(len(data), 96)])
		}
		formattest.CheckSkims(t, skims, in)
	})
}

// Plain is true exactly for the messages repair reads nothing from: no
// Gemini content is.
func TestSkimPlain(t *testing.T) {
	if msg := `{"role":"user","parts":[{"text":"hi"}]}`; geminiAd.Skim([]byte(msg)).Plain() {
		t.Errorf("Plain(%s) = true, want false", msg)
	}
}

// TestMockUpstream sends every golden case to the strict mock upstream:
// the raw broken history must be refused with 400 (unless the case says
// why the mock accepts it) and the repaired one accepted with 200.
func TestMockUpstream(t *testing.T) {
	formattest.MockUpstream(t, "repair", repairGemini, func(base string, c *formattest.Case, history []byte) *http.Request {
		req, err := http.NewRequest("POST", base+"/v1beta/models/"+c.Model+":generateContent", bytes.NewReader(formattest.MockBody(t, c, "contents", history, false)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("x-goog-api-key", "x")
		return req
	})
}
