package responses

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

// checkResponsesValid is an independent validator of Responses input
// items: a run of function_call items (reasoning items among them) is
// answered exactly by the function_call_output items right after it;
// call ids are unique; no assistant message is empty.
func checkResponsesValid(b []byte) error {
	var elems []json.RawMessage
	if err := json.Unmarshal(b, &elems); err != nil {
		return err
	}
	seen := map[string]bool{}
	open := map[string]bool{}
	calls, inBlock := 0, false
	for i, e := range elems {
		var it struct{ Type, Role, CallID string }
		var m map[string]json.RawMessage
		json.Unmarshal(e, &m)
		json.Unmarshal(m["type"], &it.Type)
		json.Unmarshal(m["role"], &it.Role)
		json.Unmarshal(m["call_id"], &it.CallID)
		switch it.Type {
		case "function_call", "reasoning":
			if inBlock {
				if len(open) > 0 {
					return fmt.Errorf("item %d: calls %v unanswered", i, open)
				}
				calls, inBlock = 0, false
			}
			if it.Type == "function_call" {
				if seen[it.CallID] {
					return fmt.Errorf("item %d: call id %q reused", i, it.CallID)
				}
				seen[it.CallID], open[it.CallID] = true, true
				calls++
			}
		case "function_call_output":
			if calls == 0 || !open[it.CallID] {
				return fmt.Errorf("item %d: output %q without a pending call", i, it.CallID)
			}
			delete(open, it.CallID)
			inBlock = true
		default:
			if len(open) > 0 {
				return fmt.Errorf("item %d: calls %v unanswered", i, open)
			}
			calls, inBlock = 0, false
			c := string(m["content"])
			if (it.Type == "" || it.Type == "message") && it.Role == "assistant" && (c == "" || c == "null" || c == `""` || c == "[]") {
				return fmt.Errorf("item %d: empty assistant message", i)
			}
		}
	}
	if len(open) > 0 {
		return fmt.Errorf("calls %v unanswered at the end", open)
	}
	return nil
}

// genResponses is genOpenAI for Responses input items.
func genResponses(prog []byte) []byte {
	ids := []string{"a", "b", "c", "a_2", "b_3"}
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < len(prog); i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		op, arg := prog[i]%8, int(prog[i]/8)
		switch op {
		case 0:
			b.WriteString(`{"type":"message","role":"user","content":[{"type":"input_text","text":"u"}]}`)
		case 1:
			b.WriteString(`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"t"}]}`)
		case 2:
			b.WriteString([]string{`{"type":"message","role":"assistant","content":[]}`, `{"role":"assistant","content":""}`, `{"type":"reasoning","id":"rs_1","summary":[]}`, `{"role":"assistant"}`}[arg%4])
		case 3, 4:
			fmt.Fprintf(&b, `{"type":"function_call","call_id":%q,"name":"get_weather","arguments":"{}"}`, ids[arg%len(ids)])
		case 5, 6, 7:
			o := []string{`"r"`, `[{"type":"input_text","text":"p"}]`, `null`}[arg%3]
			fmt.Fprintf(&b, `{"type":"function_call_output","call_id":%q,"output":%s}`, ids[(arg/3)%len(ids)], o)
		}
	}
	b.WriteByte(']')
	return []byte(b.String())
}

// responses500 is history500 for Responses input items (reasoning, two
// calls, two outputs, a reply, a user message per exchange).
func responses500(defects bool) []byte {
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < 71; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"message","role":"user","content":[{"type":"input_text","text":"Weather in city %d and its neighbour?"}]},`, i)
		fmt.Fprintf(&b, `{"type":"reasoning","id":"rs_%d","encrypted_content":"gAAAAB","summary":[]},`, i)
		fmt.Fprintf(&b, `{"type":"function_call","call_id":"call_%da","name":"get_weather","arguments":"{\"city\":\"c%d\"}"},{"type":"function_call","call_id":"call_%db","name":"get_weather","arguments":"{\"city\":\"n%d\"}"},`, i, i, i, i)
		fmt.Fprintf(&b, `{"type":"function_call_output","call_id":"call_%da","output":"{\"temp_c\":%d}"},`, i, i%30)
		if defects {
			fmt.Fprintf(&b, `{"type":"message","role":"assistant","content":[]},{"type":"function_call_output","call_id":"orphan_%d","output":"late"}`, i)
		} else {
			fmt.Fprintf(&b, `{"type":"function_call_output","call_id":"call_%db","output":"{\"temp_c\":%d}"},`, i, i%25)
			fmt.Fprintf(&b, `{"type":"message","role":"assistant","content":[{"type":"output_text","text":"City %d is fine."}]}`, i)
		}
	}
	b.WriteByte(']')
	return []byte(b.String())
}

func BenchmarkResponses500Clean(b *testing.B) {
	formattest.BenchRepair(b, repairResponses, responses500(false), false)
}

func BenchmarkResponses500Defects(b *testing.B) {
	formattest.BenchRepair(b, repairResponses, responses500(true), true)
}

// repairResponses is the Responses adapter's Repair.
var repairResponses formattest.RepairFunc = respAd.Repair

func TestRepairGolden(t *testing.T) {
	formattest.RepairGolden(t, "repair", repairResponses, checkResponsesValid)
}

func TestRepairNotArray(t *testing.T) { formattest.NotArray(t, "responses", repairResponses) }

func TestRepairNoDefectReturnsInput(t *testing.T) {
	formattest.NoDefectReturnsInput(t, "repair", repairResponses)
}

func FuzzResponses(f *testing.F) {
	formattest.SeedCorpus(f, "repair")
	f.Fuzz(func(t *testing.T, data []byte) {
		formattest.FuzzBody(t, data, genResponses, repairResponses, checkResponsesValid)
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
		formattest.CheckProperties(t, repairResponses, checkResponsesValid, genResponses(prog), repair.Options{})
	}
	ops := []byte{0, 1, 2, 3, 3 + 8, 3 + 8*5, 4 + 8*2, 5, 5 + 8*3, 6 + 8, 7, 7 + 8*4, 2 + 8, 4 + 8*7}
	var prog []byte
	var rec func(depth int)
	rec = func(depth int) {
		formattest.CheckProperties(t, repairResponses, checkResponsesValid, genResponses(prog), repair.Options{})
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

// TestCleanHistoryAllocs guards the fast path: a 497-item history with no
// defect is checked without a single allocation.
func TestCleanHistoryAllocs(t *testing.T) {
	formattest.CleanHistoryAllocs(t, "responses", repairResponses, responses500(false))
}

// TestDefectHistories checks the 497-item defect histories like any other.
func TestDefectHistories(t *testing.T) {
	formattest.CheckProperties(t, repairResponses, checkResponsesValid, responses500(true), repair.Options{})
	formattest.CheckProperties(t, repairResponses, checkResponsesValid, responses500(false), repair.Options{})
}

// skims are the Responses adapter's skim, skim check and the scan repair
// runs.
var skims = formattest.Skims{
	Name:  "responses",
	Skim:  respAd.Skim,
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
		formattest.CheckSkims(t, skims, genResponses(prog))
	}
}

func FuzzSkims(f *testing.F) {
	formattest.SeedCorpus(f, "repair")
	f.Fuzz(func(t *testing.T, data []byte) {
		in := data
		if !gjson.ValidBytes(in) {
			in = genResponses(data[:min(len(data), 96)])
		}
		formattest.CheckSkims(t, skims, in)
	})
}

// Plain is true exactly for the messages repair reads nothing from.
func TestSkimPlain(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want bool
	}{
		{`{"type":"message","role":"user","content":"hi"}`, true},
		{`{"type":"function_call_output","call_id":"c1","output":"42"}`, false},
	} {
		if got := respAd.Skim([]byte(c.msg)).Plain(); got != c.want {
			t.Errorf("Plain(%s) = %v, want %v", c.msg, got, c.want)
		}
	}
}

// TestMockUpstream sends every golden case to the strict mock upstream:
// the raw broken history must be refused with 400 (unless the case says
// why the mock accepts it) and the repaired one accepted with 200.
func TestMockUpstream(t *testing.T) {
	formattest.MockUpstream(t, "repair", repairResponses, func(base string, c *formattest.Case, history []byte) *http.Request {
		req, err := http.NewRequest("POST", base+"/v1/responses", bytes.NewReader(formattest.MockBody(t, c, "input", history, true)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer x")
		return req
	})
}
