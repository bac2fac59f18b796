package openaichat

import (
	"strconv"

	"github.com/chronicle-proxy/chronicle/repair"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// oaMsg is the part of an OpenAI chat message repair looks at; the
// fields other than raw hold raw JSON values ("" when absent).
type oaMsg struct {
	raw        string
	role       string
	content    string
	toolCalls  string
	toolCallID string
	other      bool // a non-empty refusal, function_call or audio
}

func parseOA(v gjson.Result) oaMsg {
	m := oaMsg{raw: v.Raw}
	repair.Members(v.Raw, func(k, val string) bool {
		switch k {
		case "role":
			m.role = repair.StringValue(val)
		case "content":
			m.content = val
		case "tool_calls":
			m.toolCalls = val
		case "tool_call_id":
			m.toolCallID = val
		case "refusal", "function_call", "audio":
			if !repair.Blank(val) {
				m.other = true
			}
		}
		return true
	})
	return m
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

func (m *oaMsg) hasCalls() bool {
	return m.role == "assistant" && len(m.toolCalls) > 0 && m.toolCalls[0] == '[' && !repair.EmptyContainer(m.toolCalls)
}

func (m *oaMsg) empty() bool {
	return m.role == "assistant" && !m.hasCalls() && repair.Blank(m.content) && !m.other
}

// Repair implements adapters.Adapter: an OpenAI chat messages array (also
// DeepSeek and other OpenAI-compatible endpoints) repaired with chatRules.
func (a *Adapter) Repair(messages []byte, opts repair.Options) (repair.Result, error) {
	return repair.Flat(rules, messages, opts)
}

// Skim implements adapters.Adapter.
func (a *Adapter) Skim(msg []byte) repair.Skim { return repair.SkimOf(rules, msg) }

// ValidSkimsAt implements adapters.Adapter.
func (a *Adapter) ValidSkimsAt(n int, at func(int) *repair.Skim) bool {
	return repair.ValidSkimsAt(n, at)
}

// chatRules are the repair rules of OpenAI chat messages: a tool message
// is a result, an assistant message with tool_calls a turn of its own.
type chatRules struct{}

// rules is the value handed to repair.
var rules chatRules

// Scan implements repair.Rules.
func (chatRules) Scan(v gjson.Result, s *repair.Scanner) {
	m := parseOA(v)
	switch {
	case m.role == "tool":
		s.Element(repair.RoleResult)
		s.Result(repair.StringValue(m.toolCallID), "", true)
	case m.hasCalls():
		s.Element(repair.RoleTurn)
		gjson.Parse(m.toolCalls).ForEach(func(_, c gjson.Result) bool {
			name := ""
			if s.Names() {
				name = c.Get("function.name").Str
			}
			s.Call(repair.StringValue(c.Get("id").Raw), name, true)
			return s.OK()
		})
	default:
		s.Element(repair.RoleOther)
		if m.empty() {
			s.Empty()
		}
	}
}

// RenameCall implements repair.FlatRules.
func (chatRules) RenameCall(el string, call int, id string) string {
	out, _ := sjson.Set(el, "tool_calls."+strconv.Itoa(call)+".id", id)
	return out
}

// RenameResult implements repair.FlatRules.
func (chatRules) RenameResult(el string, id string) string {
	out, _ := sjson.Set(el, "tool_call_id", id)
	return out
}

// AppendSynthetic implements repair.FlatRules: {"role":"tool","tool_call_id":ID,"content":TEXT}.
func (chatRules) AppendSynthetic(dst []byte, id, text string) []byte {
	dst = append(dst, `{"role":"tool","tool_call_id":`...)
	dst = repair.AppendString(dst, id)
	dst = append(dst, `,"content":`...)
	dst = repair.AppendString(dst, text)
	return append(dst, '}')
}

// AppendOrphan implements repair.FlatRules: {"role":"user","content":…},
// where a string content is appended after a newline, an array content
// keeps its parts after a first text part holding the header, and a null
// or absent content leaves the header alone.
func (chatRules) AppendOrphan(dst []byte, el, header string) []byte {
	return oaOrphan(dst, gjson.Parse(parseOA(gjson.Parse(el)).content), header)
}

// oaOrphan builds the user note that replaces a tool message whose call is
// missing, carrying its content.
func oaOrphan(dst []byte, content gjson.Result, h string) []byte {
	b := append(dst, `{"role":"user","content":`...)
	switch {
	case content.Type == gjson.String:
		b = repair.AppendString(b, h+"\n"+content.Str)
	case content.IsArray() && !repair.EmptyContainer(content.Raw):
		b = append(b, `[{"type":"text","text":`...)
		b = repair.AppendString(b, h)
		b = append(b, `},`...)
		b = append(b, content.Raw[1:]...) // the original parts, then ']'
	case blank(content):
		b = repair.AppendString(b, h)
	default:
		b = repair.AppendString(b, h+"\n"+content.Raw)
	}
	return append(b, '}')
}
