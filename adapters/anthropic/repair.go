package anthropic

import (
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
	"github.com/chronicle-proxy/chronicle/repair"
)

// Repair implements adapters.Adapter: a messages array repaired with
// rules. An assistant message is part of a call turn (consecutive ones
// form one, as the API combines them); a user message is the block that
// answers the turn before it, with tool_result blocks matched to tool_use
// blocks by id. A tool_use with no result gets an is_error tool_result in
// a user message right after its turn (before the user's next words: the
// API combines consecutive user messages into one turn whose results come
// first); a tool_result whose tool_use is missing becomes a text block;
// duplicate ids are renamed in pairs; empty assistant messages are
// dropped; tool_result blocks that follow other blocks of their message
// are moved first.
func (a *Adapter) Repair(messages []byte, opts repair.Options) (repair.Result, error) {
	return repair.Nested(rules, messages, opts)
}

// Skim implements adapters.Adapter.
func (a *Adapter) Skim(msg []byte) repair.Skim { return repair.SkimOf(rules, msg) }

// ValidSkimsAt implements adapters.Adapter.
func (a *Adapter) ValidSkimsAt(n int, at func(int) *repair.Skim) bool {
	return repair.ValidSkimsAt(n, at)
}

// anthropicRules are the repair rules of Anthropic messages.
type anthropicRules struct{}

// rules is the value handed to repair.
var rules anthropicRules

// Scan implements repair.Rules.
func (anthropicRules) Scan(v gjson.Result, s *repair.Scanner) {
	var role string
	var content gjson.Result
	repair.Members(v.Raw, func(k, val string) bool {
		switch k {
		case "role":
			role = repair.StringValue(val)
		case "content":
			content = gjson.Parse(val)
		}
		return true
	})
	assistant := role == "assistant"
	if assistant {
		s.Element(repair.RoleTurnPart)
	} else {
		s.Element(repair.RoleBlock)
	}
	if content.Type == gjson.String {
		// A plain string is one text block; written out as one if the
		// message is edited.
		s.Part(textBlock(content.Raw))
		if assistant && content.Str == "" {
			s.Empty()
		}
		return
	}
	empty := true
	seenOther := false // a block other than tool_result came first
	misplaced := false
	if !assistant {
		// tool_result blocks first: reported first, and the message
		// marked when they were not.
		repair.Each(content, func(b gjson.Result) bool {
			if blockType(b.Raw) == "tool_result" {
				if seenOther {
					misplaced = true
				}
				s.Part(b.Raw)
				s.Result(repair.StringValue(rawjson.MemberRaw(b.Raw, `"tool_use_id"`)), "", true)
			} else {
				seenOther = true
			}
			return s.OK()
		})
		repair.Each(content, func(b gjson.Result) bool {
			if blockType(b.Raw) != "tool_result" {
				s.Part(b.Raw)
			}
			return true
		})
		if misplaced {
			s.Misplaced()
		}
		return
	}
	repair.Each(content, func(b gjson.Result) bool {
		s.Part(b.Raw)
		switch blockType(b.Raw) {
		case "tool_use":
			empty = false
			id := repair.StringValue(rawjson.MemberRaw(b.Raw, `"id"`))
			name := ""
			if s.Names() {
				name = repair.StringValue(rawjson.MemberRaw(b.Raw, `"name"`))
			}
			s.Call(id, name, true)
		case "text":
			if t := rawjson.MemberRaw(b.Raw, `"text"`); t != `""` && t != "" {
				empty = false
			}
		case "thinking", "redacted_thinking":
			// Thinking alone is not an answer the API keeps.
		default:
			empty = false
		}
		return s.OK()
	})
	if empty {
		s.Empty()
	}
}

// blockType is a content block's "type".
func blockType(raw string) string { return repair.StringValue(rawjson.MemberRaw(raw, `"type"`)) }

// textBlock is {"type":"text","text":S} for the raw JSON string s.
func textBlock(s string) string { return `{"type":"text","text":` + s + `}` }

// RenameCall implements repair.NestedRules.
func (anthropicRules) RenameCall(p string, id string) string {
	out, _ := sjson.Set(p, "id", id)
	return out
}

// RenameResult implements repair.NestedRules.
func (anthropicRules) RenameResult(p string, id string) string {
	out, _ := sjson.Set(p, "tool_use_id", id)
	return out
}

// AppendSynthetic implements repair.NestedRules:
// {"type":"tool_result","tool_use_id":ID,"is_error":true,"content":TEXT}.
func (anthropicRules) AppendSynthetic(dst []byte, c repair.Call, text string) []byte {
	dst = append(dst, `{"type":"tool_result","tool_use_id":`...)
	dst = repair.AppendString(dst, c.ID)
	dst = append(dst, `,"is_error":true,"content":`...)
	dst = repair.AppendString(dst, text)
	return append(dst, '}')
}

// AppendOrphan implements repair.NestedRules: a text block, the header and
// then the result's content (its text, or its JSON).
func (anthropicRules) AppendOrphan(dst []byte, p, header string) []byte {
	c := gjson.Get(p, "content")
	switch {
	case c.Type == gjson.String:
		header += "\n" + c.Str
	case c.IsArray():
		c.ForEach(func(_, b gjson.Result) bool {
			if b.Get("type").Str == "text" {
				header += "\n" + b.Get("text").Str
			} else {
				header += "\n" + gjson.Get(b.Raw, "@ugly").Raw
			}
			return true
		})
	case c.Exists():
		header += "\n" + gjson.Get(c.Raw, "@ugly").Raw
	}
	dst = append(dst, `{"type":"text","text":`...)
	dst = repair.AppendString(dst, header)
	return append(dst, '}')
}

// SetParts implements repair.NestedRules: parts become the content array.
func (anthropicRules) SetParts(el string, parts []byte) string {
	out, _ := sjson.SetRaw(el, "content", rawjson.Str(parts))
	return out
}

// AppendBlock implements repair.NestedRules: {"role":"user","content":PARTS}.
func (anthropicRules) AppendBlock(dst []byte, parts []byte) []byte {
	dst = append(dst, `{"role":"user","content":`...)
	dst = append(dst, parts...)
	return append(dst, '}')
}

// ResultsFirst implements repair.ResultsFirst: tool_result blocks open
// their message.
func (anthropicRules) ResultsFirst() {}
