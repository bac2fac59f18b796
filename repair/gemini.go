package repair

import (
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
	Members(v.Raw, func(k, val string) bool {
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
			Members(val, func(k2, v2 string) bool {
				switch k2 {
				case "id":
					p.id = StringValue(v2)
					p.hasID = p.id != ""
				case "name":
					p.name = StringValue(v2)
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
	Members(v.Raw, func(k, val string) bool {
		switch k {
		case "role":
			c.model = StringValue(val) == "model"
		case "parts":
			c.parts = gjson.Parse(val)
		}
		return true
	})
	return c
}

// geminiRules are repair's rules for Gemini contents.
type geminiRules struct{}

// Scan implements Rules: a model content is part of a turn (consecutive
// model contents form one: @google/genai's Chat keeps one model content
// per streamed chunk), any other content the block of the turn before it.
func (geminiRules) Scan(v gjson.Result, s *Scanner) {
	c := parseGM(v)
	if c.model {
		s.Element(RoleTurnPart)
	} else {
		s.Element(RoleBlock)
	}
	empty := true
	Each(c.parts, func(pv gjson.Result) bool {
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

// RenameCall implements NestedRules.
func (geminiRules) RenameCall(p string, id string) string {
	out, _ := sjson.Set(p, "functionCall.id", id)
	return out
}

// RenameResult implements NestedRules.
func (geminiRules) RenameResult(p string, id string) string {
	out, _ := sjson.Set(p, "functionResponse.id", id)
	return out
}

// AppendSynthetic implements NestedRules:
// {"functionResponse":{"id":ID,"name":NAME,"response":{"error":TEXT}}},
// "id" only when the call has one.
func (geminiRules) AppendSynthetic(dst []byte, c Call, text string) []byte {
	dst = append(dst, `{"functionResponse":{`...)
	if c.ID != "" {
		dst = append(dst, `"id":`...)
		dst = AppendString(dst, c.ID)
		dst = append(dst, ',')
	}
	dst = append(dst, `"name":`...)
	dst = AppendString(dst, c.Name)
	dst = append(dst, `,"response":{"error":`...)
	dst = AppendString(dst, text)
	return append(dst, `}}}`...)
}

// AppendOrphan implements NestedRules: a text part, the compacted JSON of
// functionResponse.response after the header.
func (geminiRules) AppendOrphan(dst []byte, p, header string) []byte {
	dst = append(dst, `{"text":`...)
	if resp := parseGMPart(gjson.Parse(p)).response; resp != "" {
		header += "\n" + gjson.Get(resp, "@ugly").Raw
	}
	dst = AppendString(dst, header)
	return append(dst, '}')
}

// SetParts implements NestedRules.
func (geminiRules) SetParts(el string, parts []byte) string {
	out, _ := sjson.SetRaw(el, "parts", str(parts))
	return out
}

// AppendBlock implements NestedRules: {"role":"user","parts":PARTS}.
func (geminiRules) AppendBlock(dst []byte, parts []byte) []byte {
	dst = append(dst, `{"role":"user","parts":`...)
	dst = append(dst, parts...)
	return append(dst, '}')
}

func gmValid(arr gjson.Result) bool { return valid(geminiRules{}, arr) }

// Gemini repairs a Gemini native `contents` array. A function result is a
// functionResponse part in a user content, matched to its functionCall by
// `id` when it has one, otherwise by name and order. See the package
// documentation for the rules.
func Gemini(contents []byte, opts Options) (Result, error) {
	return Nested(geminiRules{}, contents, opts)
}
