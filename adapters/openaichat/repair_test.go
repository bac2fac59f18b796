package openaichat

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

// checkOpenAIValid is an independent validator of an OpenAI chat history,
// written with encoding/json: every call id is unique, every call is
// answered exactly once by the tool messages right after its turn, no
// tool message stands elsewhere, and no assistant message is empty.
func checkOpenAIValid(b []byte) error {
	var elems []json.RawMessage
	if err := json.Unmarshal(b, &elems); err != nil {
		return err
	}
	msgs := make([]map[string]json.RawMessage, len(elems))
	for i, e := range elems {
		json.Unmarshal(e, &msgs[i]) // a non-object stays nil: a message of no role
	}
	seen := map[string]bool{}
	var open map[string]bool
	inBlock := false
	for i, m := range msgs {
		var role string
		json.Unmarshal(m["role"], &role)
		if role == "tool" {
			var id string
			json.Unmarshal(m["tool_call_id"], &id)
			if !inBlock || !open[id] {
				return fmt.Errorf("message %d: tool result %q without a pending call", i, id)
			}
			delete(open, id)
			continue
		}
		if len(open) > 0 {
			return fmt.Errorf("message %d: calls %v unanswered", i, open)
		}
		inBlock = false
		if role != "assistant" {
			continue
		}
		var calls []struct{ ID string }
		json.Unmarshal(m["tool_calls"], &calls)
		if len(calls) == 0 {
			var c any
			json.Unmarshal(m["content"], &c)
			var r string
			json.Unmarshal(m["refusal"], &r)
			if (c == nil || c == "" || fmt.Sprint(c) == "[]") && r == "" && m["function_call"] == nil && m["audio"] == nil {
				return fmt.Errorf("message %d: empty assistant", i)
			}
			continue
		}
		open, inBlock = map[string]bool{}, true
		for _, c := range calls {
			if seen[c.ID] {
				return fmt.Errorf("message %d: call id %q reused", i, c.ID)
			}
			seen[c.ID], open[c.ID] = true, true
		}
	}
	if len(open) > 0 {
		return fmt.Errorf("calls %v unanswered at the end", open)
	}
	return nil
}

// genOpenAI turns arbitrary bytes into an OpenAI chat history drawn from
// a small vocabulary, so fuzzing explores histories rather than syntax.
func genOpenAI(prog []byte) []byte {
	ids := []string{"a", "b", "c", "a_2", "b_3"}
	names := []string{"get_weather", "delete_file"}
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < len(prog); i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		op, arg := prog[i]%8, int(prog[i]/8)
		switch op {
		case 0:
			b.WriteString(`{"role":"user","content":"u` + fmt.Sprint(i) + `"}`)
		case 1:
			b.WriteString(`{"role":"assistant","content":"t` + fmt.Sprint(i) + `"}`)
		case 2: // empty assistant
			b.WriteString([]string{`{"role":"assistant","content":null}`, `{"role":"assistant","content":""}`, `{"role":"assistant"}`, `{"role":"assistant","content":[]}`}[arg%4])
		case 3, 4: // assistant with 1..3 calls
			b.WriteString(`{"role":"assistant","content":null,"tool_calls":[`)
			for k := 0; k <= arg%3; k++ {
				if k > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `{"id":%q,"type":"function","function":{"name":%q,"arguments":"{}"}}`, ids[(arg/3+k)%len(ids)], names[(arg+k)%2])
			}
			b.WriteString(`]}`)
		case 5, 6, 7:
			c := []string{`"r"`, `null`, `[{"type":"text","text":"p"}]`}[arg%3]
			fmt.Fprintf(&b, `{"role":"tool","tool_call_id":%q,"content":%s}`, ids[(arg/3)%len(ids)], c)
		}
	}
	b.WriteByte(']')
	return []byte(b.String())
}

// history500 builds a 500-message OpenAI chat history of 100 exchanges
// (user, assistant with two calls, two results, assistant text). With
// defects, every exchange loses a result, gains an empty assistant and an
// orphan result.
func history500(defects bool) []byte {
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < 100; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role":"user","content":"What's the weather in city %d and its neighbour?"},`, i)
		fmt.Fprintf(&b, `{"role":"assistant","content":null,"tool_calls":[{"id":"call_%da","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"c%d\"}"}},{"id":"call_%db","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"n%d\"}"}}]},`, i, i, i, i)
		fmt.Fprintf(&b, `{"role":"tool","tool_call_id":"call_%da","content":"{\"temp_c\":%d,\"conditions\":\"overcast\"}"},`, i, i%30)
		if defects {
			fmt.Fprintf(&b, `{"role":"assistant","content":""},{"role":"tool","tool_call_id":"orphan_%d","content":"late"}`, i)
		} else {
			fmt.Fprintf(&b, `{"role":"tool","tool_call_id":"call_%db","content":"{\"temp_c\":%d,\"conditions\":\"clear\"}"},`, i, i%25)
			fmt.Fprintf(&b, `{"role":"assistant","content":"City %d is overcast and its neighbour is clear."}`, i)
		}
	}
	b.WriteByte(']')
	return []byte(b.String())
}

func BenchmarkOpenAIChat500Clean(b *testing.B) {
	formattest.BenchRepair(b, repairChat, history500(false), false)
}

func BenchmarkOpenAIChat500Defects(b *testing.B) {
	formattest.BenchRepair(b, repairChat, history500(true), true)
}

// repairChat is the chat adapter's Repair.
var repairChat formattest.RepairFunc = openAIAd.Repair

func TestRepairGolden(t *testing.T) {
	formattest.RepairGolden(t, "repair", repairChat, checkOpenAIValid)
}

func TestRepairNotArray(t *testing.T) { formattest.NotArray(t, "openai", repairChat) }

func TestRepairNoDefectReturnsInput(t *testing.T) {
	formattest.NoDefectReturnsInput(t, "repair", repairChat)
}

func FuzzOpenAIChat(f *testing.F) {
	formattest.SeedCorpus(f, "repair")
	f.Fuzz(func(t *testing.T, data []byte) { formattest.FuzzBody(t, data, genOpenAI, repairChat, checkOpenAIValid) })
}

// TestGeneratedHistories runs the properties over every history of up
// to three steps the generator can make from a set of single-byte ops,
// then over random longer programs.
func TestGeneratedHistories(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for range 3000 {
		prog := make([]byte, r.Intn(24))
		r.Read(prog)
		formattest.CheckProperties(t, repairChat, checkOpenAIValid, genOpenAI(prog), repair.Options{ReadOnlyTools: []string{"get_weather"}})
	}
	ops := []byte{0, 1, 2, 3, 3 + 8, 3 + 8*5, 4 + 8*2, 5, 5 + 8*3, 6 + 8, 7, 7 + 8*4, 2 + 8, 4 + 8*7}
	var prog []byte
	var rec func(depth int)
	rec = func(depth int) {
		formattest.CheckProperties(t, repairChat, checkOpenAIValid, genOpenAI(prog), repair.Options{ReadOnlyTools: []string{"get_weather"}})
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

// TestCleanHistoryAllocs guards the fast path: a 500-message history with
// no defect is checked without a single allocation.
func TestCleanHistoryAllocs(t *testing.T) {
	formattest.CleanHistoryAllocs(t, "openai", repairChat, history500(false))
}

// TestDefectHistories checks the 500-message defect histories like any other.
func TestDefectHistories(t *testing.T) {
	formattest.CheckProperties(t, repairChat, checkOpenAIValid, history500(true), repair.Options{})
	formattest.CheckProperties(t, repairChat, checkOpenAIValid, history500(false), repair.Options{})
}

// skims are the chat adapter's skim, skim check and the scan repair runs.
var skims = formattest.Skims{
	Name:  "openai",
	Skim:  openAIAd.Skim,
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
		formattest.CheckSkims(t, skims, genOpenAI(prog))
	}
	for _, h := range []string{
		`[{"role":"assistant","content":"","tool_calls":[]}]`,
		`[{"role":"assistant","tool_calls":[{"id":"a"},{"id":"a"}]},{"role":"tool","tool_call_id":"a"},{"role":"tool","tool_call_id":"a"}]`,
		`[{"role":"tool","tool_call_id":"x"}]`,
		`["text",{"role":"assistant","content":null,"refusal":"no"}]`,
		`[{"role":"assistant","tool_calls":[{"id":"a\u0062"}]},{"role":"tool","tool_call_id":"ab"}]`,
	} {
		formattest.CheckSkims(t, skims, []byte(h))
	}
}

func FuzzSkims(f *testing.F) {
	formattest.SeedCorpus(f, "repair")
	f.Fuzz(func(t *testing.T, data []byte) {
		in := data
		if !gjson.ValidBytes(in) {
			in = genOpenAI(data[:min(len(data), 96)])
		}
		formattest.CheckSkims(t, skims, in)
	})
}

// A skim does not alias the message it was made from.
func TestSkimOwnsItsIDs(t *testing.T) {
	msg := []byte(`{"role":"assistant","tool_calls":[{"id":"call_1"}]}`)
	s := openAIAd.Skim(msg)
	copy(msg, make([]byte, len(msg)))
	answer := openAIAd.Skim([]byte(`{"role":"tool","tool_call_id":"call_1"}`))
	if !s.HasCalls() || !repair.ValidSkims([]repair.Skim{s, answer}) {
		t.Fatalf("skim after the message was overwritten: %+v", s)
	}
}

// Plain is true exactly for the messages repair reads nothing from.
func TestSkimPlain(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want bool
	}{
		{`{"role":"user","content":"hi"}`, true},
		{`{"role":"assistant","content":"hello"}`, true},
		{`{"role":"system","content":"be brief"}`, true},
		{`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`, false},
		{`{"role":"tool","tool_call_id":"c1","content":"42"}`, false},
		{`{"role":"assistant","content":""}`, false},
	} {
		if got := openAIAd.Skim([]byte(c.msg)).Plain(); got != c.want {
			t.Errorf("Plain(%s) = %v, want %v", c.msg, got, c.want)
		}
	}
}

// TestMockUpstream sends every golden case to the strict mock upstream:
// the raw broken history must be refused with 400 (unless the case says
// why the mock accepts it) and the repaired one accepted with 200.
func TestMockUpstream(t *testing.T) {
	formattest.MockUpstream(t, "repair", repairChat, func(base string, c *formattest.Case, history []byte) *http.Request {
		req, err := http.NewRequest("POST", base+"/v1/chat/completions", bytes.NewReader(formattest.MockBody(t, c, "messages", history, true)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer x")
		return req
	})
}
