package gemini

import (
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
	"github.com/chronicle-proxy/chronicle/repair"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Gemini part kinds.
const (
	gpOther = iota
	gpCall
	gpResponse
)

// gmPart is the part of a Gemini part repair looks at.
type gmPart struct {
	raw      string
	kind     int
	id       string
	name     string
	hasID    bool
	response string // raw JSON, "" when absent
	empty    bool   // only an empty text (with thought flags or a signature)
}

func parseGMPart(v gjson.Result) gmPart {
	p := gmPart{raw: v.Raw}
	if !v.IsObject() {
		return p
	}
	p.empty = true
	repair.Members(v.Raw, func(k, val string) bool {
		switch k {
		case "functionCall", "functionResponse":
			p.empty = false
			if p.kind != gpOther {
				break
			}
			p.kind = gpCall
			if k == "functionResponse" {
				p.kind = gpResponse
			}
			repair.Members(val, func(k2, v2 string) bool {
				switch k2 {
				case "id":
					p.id = repair.StringValue(v2)
					p.hasID = p.id != ""
				case "name":
					p.name = repair.StringValue(v2)
				case "response":
					p.response = v2
				}
				return true
			})
		case "text":
			if val != `""` {
				p.empty = false
			}
		case "thought", "thoughtSignature":
		default:
			p.empty = false
		}
		return true
	})
	return p
}

// gmContent is the part of a Gemini content repair looks at.
type gmContent struct {
	raw   string
	model bool
	parts gjson.Result
}

func parseGM(v gjson.Result) gmContent {
	c := gmContent{raw: v.Raw}
	repair.Members(v.Raw, func(k, val string) bool {
		switch k {
		case "role":
			c.model = repair.StringValue(val) == "model"
		case "parts":
			c.parts = gjson.Parse(val)
		}
		return true
	})
	return c
}

// Repair implements adapters.Adapter: a contents array repaired with
// geminiRules. A function result is a functionResponse part in a user
// content, matched to its functionCall by id when it has one, otherwise by
// name and order.
func (g *Adapter) Repair(contents []byte, opts repair.Options) (repair.Result, error) {
	return repair.Nested(rules, contents, opts)
}

// Skim implements adapters.Adapter.
func (g *Adapter) Skim(content []byte) repair.Skim { return repair.SkimOf(rules, content) }

// ValidSkimsAt implements adapters.Adapter.
func (g *Adapter) ValidSkimsAt(n int, at func(int) *repair.Skim) bool {
	return repair.ValidSkimsAt(n, at)
}

// geminiRules are the repair rules of Gemini contents.
type geminiRules struct{}

// rules is the value handed to repair.
var rules geminiRules

// Scan implements repair.Rules: a model content is part of a turn (consecutive
// model contents form one: @google/genai's Chat keeps one model content
// per streamed chunk), any other content the block of the turn before it.
func (geminiRules) Scan(v gjson.Result, s *repair.Scanner) {
	c := parseGM(v)
	if c.model {
		s.Element(repair.RoleTurnPart)
	} else {
		s.Element(repair.RoleBlock)
	}
	empty := true
	repair.Each(c.parts, func(pv gjson.Result) bool {
		s.Part(pv.Raw)
		gp := parseGMPart(pv)
		empty = empty && gp.empty
		switch gp.kind {
		case gpCall:
			s.Call(gp.id, gp.name, gp.hasID)
		case gpResponse:
			s.Result(gp.id, gp.name, gp.hasID)
		}
		return s.OK()
	})
	if c.model && empty {
		s.Empty()
	}
}

// RenameCall implements repair.NestedRules.
func (geminiRules) RenameCall(p string, id string) string {
	out, _ := sjson.Set(p, "functionCall.id", id)
	return out
}

// RenameResult implements repair.NestedRules.
func (geminiRules) RenameResult(p string, id string) string {
	out, _ := sjson.Set(p, "functionResponse.id", id)
	return out
}

// AppendSynthetic implements repair.NestedRules:
// {"functionResponse":{"id":ID,"name":NAME,"response":{"error":TEXT}}},
// "id" only when the call has one.
func (geminiRules) AppendSynthetic(dst []byte, c repair.Call, text string) []byte {
	dst = append(dst, `{"functionResponse":{`...)
	if c.ID != "" {
		dst = append(dst, `"id":`...)
		dst = repair.AppendString(dst, c.ID)
		dst = append(dst, ',')
	}
	dst = append(dst, `"name":`...)
	dst = repair.AppendString(dst, c.Name)
	dst = append(dst, `,"response":{"error":`...)
	dst = repair.AppendString(dst, text)
	return append(dst, `}}}`...)
}

// AppendOrphan implements repair.NestedRules: the part {"text":…}, the
// compacted JSON of functionResponse.response after the header and a
// newline.
func (geminiRules) AppendOrphan(dst []byte, p, header string) []byte {
	dst = append(dst, `{"text":`...)
	if resp := parseGMPart(gjson.Parse(p)).response; resp != "" {
		header += "\n" + gjson.Get(resp, "@ugly").Raw
	}
	dst = repair.AppendString(dst, header)
	return append(dst, '}')
}

// SetParts implements repair.NestedRules.
func (geminiRules) SetParts(el string, parts []byte) string {
	out, _ := sjson.SetRaw(el, "parts", rawjson.Str(parts))
	return out
}

// AppendBlock implements repair.NestedRules: {"role":"user","parts":PARTS}.
func (geminiRules) AppendBlock(dst []byte, parts []byte) []byte {
	dst = append(dst, `{"role":"user","parts":`...)
	dst = append(dst, parts...)
	return append(dst, '}')
}
