package repair

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// checkProperties asserts what holds for every repair: determinism,
// idempotence byte for byte, a valid result (checked by an independent
// validator), untouched messages kept byte for byte and in order, and the
// fast scan agreeing with the full repair.
func checkProperties(t testing.TB, fn repairFunc, valid func([]byte) error, in []byte, opts Options) {
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

func fuzzBody(t *testing.T, data []byte, gen func([]byte) []byte, fn repairFunc, valid func([]byte) error) {
	in := data
	if !gjson.ValidBytes(data) {
		if _, err := fn(data, Options{}); !errors.Is(err, ErrNotArray) {
			t.Fatalf("invalid JSON: err = %v", err)
		}
		in = gen(data[:min(len(data), 96)])
	} else if !gjson.ParseBytes(data).IsArray() {
		return
	}
	checkProperties(t, fn, valid, in, Options{ReadOnlyTools: []string{"get_weather"}})
}

// seedCorpus adds every golden input and a few generator programs.
func seedCorpus(f *testing.F, dir string) {
	files, _ := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
	for _, p := range files {
		b, _ := os.ReadFile(p)
		f.Add([]byte(gjson.GetBytes(b, "input").Raw))
	}
	for _, s := range []string{"\x00\x03\x05", "\x00\x0b\x05\x00\x03", "\x03\x02\x05\x05\x0d", "\x05\x00\x03\x01\x04\x06\x07"} {
		f.Add([]byte(s))
	}
}

// TestGeneratedHistories runs the properties over every history of up
// to three steps the generators can make from a set of single-byte ops,
// then over random longer programs.
func TestGeneratedHistories(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for range 3000 {
		prog := make([]byte, r.Intn(24))
		r.Read(prog)
		checkProperties(t, Responses, checkResponsesValid, genResponses(prog), Options{})
	}
	ops := []byte{0, 1, 2, 3, 3 + 8, 3 + 8*5, 4 + 8*2, 5, 5 + 8*3, 6 + 8, 7, 7 + 8*4, 2 + 8, 4 + 8*7}
	var prog []byte
	var rec func(depth int)
	rec = func(depth int) {
		checkProperties(t, Responses, checkResponsesValid, genResponses(prog), Options{})
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

func FuzzResponses(f *testing.F) {
	seedCorpus(f, "responses")
	f.Fuzz(func(t *testing.T, data []byte) { fuzzBody(t, data, genResponses, Responses, checkResponsesValid) })
}
