package responses

import (
	"github.com/chronicle-proxy/chronicle/repair"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Responses item kinds.
const (
	riOther = iota
	riCall
	riOutput
	riReasoning
)

// repairItem is the part of an input item repair looks at.
type repairItem struct {
	raw     string
	kind    int
	callID  string
	name    string
	output  string // raw function_call_output.output
	empty   bool   // an assistant message with no content
	content string
}

func parseRS(v gjson.Result) repairItem {
	it := repairItem{raw: v.Raw}
	var typ, role string
	repair.Members(v.Raw, func(k, val string) bool {
		switch k {
		case "type":
			typ = repair.StringValue(val)
		case "role":
			role = repair.StringValue(val)
		case "call_id":
			it.callID = repair.StringValue(val)
		case "name":
			it.name = repair.StringValue(val)
		case "output":
			it.output = val
		case "content":
			it.content = val
		}
		return true
	})
	switch typ {
	case "function_call":
		it.kind = riCall
	case "function_call_output":
		it.kind = riOutput
	case "reasoning":
		it.kind = riReasoning
	case "", "message":
		it.empty = role == "assistant" && repair.Blank(it.content)
	}
	return it
}

// inRun reports whether the item belongs to a call run: consecutive
// function_call items, with the reasoning items among them.
func (it *repairItem) inRun() bool { return it.kind == riCall || it.kind == riReasoning }

// Repair implements adapters.Adapter: an input item array repaired with
// responsesRules. function_call items are calls, function_call_output
// items their results (matched by call_id); a call turn is a run of
// consecutive function_call items (with the reasoning items among them),
// its block the run of function_call_output items right after it.
func (a *Adapter) Repair(items []byte, opts repair.Options) (repair.Result, error) {
	return repair.Flat(rules, items, opts)
}

// Skim implements Adapter.
func (a *Adapter) Skim(item []byte) repair.Skim { return repair.SkimOf(rules, item) }

// ValidSkimsAt implements Adapter.
func (a *Adapter) ValidSkimsAt(n int, at func(int) *repair.Skim) bool {
	return repair.ValidSkimsAt(n, at)
}

// responsesRules are the repair rules of Responses input items.
type responsesRules struct{}

// rules is the value handed to repair.
var rules responsesRules

// Scan implements repair.Rules: function_call and reasoning items are parts of a
// turn (consecutive ones form one), function_call_output items results.
func (responsesRules) Scan(v gjson.Result, s *repair.Scanner) {
	it := parseRS(v)
	switch {
	case it.inRun():
		s.Element(repair.RoleTurnPart)
		if it.kind == riCall {
			s.Call(it.callID, it.name, true)
		}
	case it.kind == riOutput:
		s.Element(repair.RoleResult)
		s.Result(it.callID, "", true)
	default:
		s.Element(repair.RoleOther)
		if it.empty {
			s.Empty()
		}
	}
}

// RenameCall implements repair.FlatRules.
func (responsesRules) RenameCall(el string, call int, id string) string {
	out, _ := sjson.Set(el, "call_id", id)
	return out
}

// RenameResult implements repair.FlatRules.
func (responsesRules) RenameResult(el string, id string) string {
	out, _ := sjson.Set(el, "call_id", id)
	return out
}

// AppendSynthetic implements repair.FlatRules:
// {"type":"function_call_output","call_id":ID,"output":TEXT}.
func (responsesRules) AppendSynthetic(dst []byte, id, text string) []byte {
	dst = append(dst, `{"type":"function_call_output","call_id":`...)
	dst = repair.AppendString(dst, id)
	dst = append(dst, `,"output":`...)
	dst = repair.AppendString(dst, text)
	return append(dst, '}')
}

// AppendOrphan implements repair.FlatRules:
// {"type":"message","role":"user","content":[{"type":"input_text","text":…},…]},
// following OpenAI chat's rules for a string or array output.
func (responsesRules) AppendOrphan(dst []byte, el, header string) []byte {
	return rsOrphan(dst, gjson.Parse(parseRS(gjson.Parse(el)).output), header)
}

// rsOrphan builds the user message that replaces a function_call_output
// whose call is missing, carrying its output.
func rsOrphan(dst []byte, output gjson.Result, h string) []byte {
	b := append(dst, `{"type":"message","role":"user","content":`...)
	switch {
	case output.Type == gjson.String:
		b = append(b, `[{"type":"input_text","text":`...)
		b = repair.AppendString(b, h+"\n"+output.Str)
		b = append(b, `}]`...)
	case output.IsArray() && !repair.EmptyContainer(output.Raw):
		b = append(b, `[{"type":"input_text","text":`...)
		b = repair.AppendString(b, h)
		b = append(b, `},`...)
		b = append(b, output.Raw[1:]...)
	case blank(output):
		b = append(b, `[{"type":"input_text","text":`...)
		b = repair.AppendString(b, h)
		b = append(b, `}]`...)
	default:
		b = append(b, `[{"type":"input_text","text":`...)
		b = repair.AppendString(b, h+"\n"+output.Raw)
		b = append(b, `}]`...)
	}
	return append(b, '}')
}

// blank reports whether v is absent, null, "" or an empty array or object.
func blank(v gjson.Result) bool {
	switch v.Type {
	case gjson.Null:
		return true
	case gjson.String:
		return v.Str == ""
	case gjson.JSON:
		return repair.EmptyContainer(v.Raw)
	}
	return false
}
