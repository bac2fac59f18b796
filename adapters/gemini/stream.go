package gemini

import (
	"bytes"
	"fmt"

	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
)

// NewAssembler implements adapters.Adapter.
func (g *Adapter) NewAssembler() adapters.Assembler { return &geminiAssembler{} }

// geminiAssembler merges the parts of streamed GenerateContentResponse
// chunks into one model Content, as @ai-sdk/google replays it: consecutive
// text parts with the same thought flag are concatenated; a thoughtSignature
// (Gemini 3 sends a text answer's on a trailing empty text part) joins the
// text part it follows; empty text parts without a signature are dropped;
// every other part (functionCall, inlineData, executableCode, …) is kept
// whole, byte for byte, in order, with its thoughtSignature (Gemini 3 puts
// one on the first of parallel calls only). Only candidate 0 is assembled.
// usageMetadata is cumulative, so the last one wins.
type geminiAssembler struct {
	parts  []gPart
	nparts int

	usage     adapters.Usage
	finishRaw []byte
	blocked   bool
	errRaw    []byte
	calls     int
	model     []byte // the first chunk's modelVersion
}

type gPart struct {
	text    bool
	thought bool
	body    []byte // text: escaped text; other: raw part JSON
	sig     []byte // raw JSON string of thoughtSignature (text parts)
}

// Reset implements Assembler.
func (s *geminiAssembler) Reset() {
	s.nparts = 0
	s.usage = adapters.Usage{}
	s.finishRaw = s.finishRaw[:0]
	s.blocked = false
	s.errRaw = s.errRaw[:0]
	s.calls = 0
	s.model = s.model[:0]
}

// Feed implements Assembler for one chunk: an SSE data payload or one
// element of a JSON-array stream.
func (s *geminiAssembler) Feed(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' || !jsonscan.Valid(data) {
		return fmt.Errorf("gemini chunk: %w", adapters.ErrInvalidJSON)
	}
	rawjson.EachMember(rawjson.Str(data), func(k, v string) bool {
		switch k {
		case `"candidates"`:
			rawjson.EachElement(v, func(c string) bool {
				if idx := rawjson.MemberRaw(c, `"index"`); idx != "" && idx != "0" {
					return true
				}
				s.candidate(c)
				return false
			})
		case `"usageMetadata"`:
			if rawjson.IsObject(v) {
				s.usage = geminiUsage(gjson.Parse(v))
			}
		case `"promptFeedback"`:
			if br := rawjson.MemberRaw(v, `"blockReason"`); rawjson.IsString(br) && br != `""` {
				s.blocked = true
				s.finishRaw = append(s.finishRaw[:0], rawjson.Unquote(br)...)
			}
		case `"error"`:
			if !rawjson.IsNull(v) {
				s.errRaw = append(s.errRaw[:0], v...)
			}
		case `"modelVersion"`:
			s.model = adapters.AppendResponseModel(s.model, v)
		}
		return true
	})
	return nil
}

func (s *geminiAssembler) candidate(c string) {
	rawjson.EachMember(c, func(k, v string) bool {
		switch k {
		case `"content"`:
			rawjson.EachElement(rawjson.MemberRaw(v, `"parts"`), func(p string) bool {
				s.part(p)
				return true
			})
		case `"finishReason"`:
			if rawjson.IsString(v) && v != `""` {
				s.finishRaw = append(s.finishRaw[:0], rawjson.Unquote(v)...)
			}
		}
		return true
	})
}

func (s *geminiAssembler) part(p string) {
	var text, sig string
	thought, simple := false, true
	rawjson.EachMember(p, func(k, v string) bool {
		switch k {
		case `"text"`:
			text = v
		case `"thought"`:
			thought = v == "true"
			if v != "true" && v != "false" {
				simple = false
			}
		case `"thoughtSignature"`:
			sig = v
		default:
			simple = false
		}
		return simple
	})
	if simple && rawjson.IsString(text) {
		sigSet := rawjson.IsString(sig) && sig != `""`
		if s.nparts > 0 {
			last := &s.parts[s.nparts-1]
			if last.text && last.thought == thought && len(last.sig) == 0 {
				last.body = append(last.body, rawjson.Unquote(text)...)
				if sigSet {
					last.sig = append(last.sig, sig...)
				}
				return
			}
		}
		if text == `""` && !sigSet {
			return
		}
		np := s.newPart()
		np.text, np.thought = true, thought
		np.body = append(np.body, rawjson.Unquote(text)...)
		if sigSet {
			np.sig = append(np.sig, sig...)
		}
		return
	}
	if rawjson.MemberRaw(p, `"functionCall"`) != "" {
		s.calls++
	}
	np := s.newPart()
	np.body = append(np.body, p...)
}

func (s *geminiAssembler) newPart() *gPart {
	if s.nparts == len(s.parts) {
		s.parts = append(s.parts, gPart{})
	}
	p := &s.parts[s.nparts]
	s.nparts++
	p.text, p.thought = false, false
	p.body, p.sig = p.body[:0], p.sig[:0]
	return p
}

// Result implements Assembler.
func (s *geminiAssembler) Result() adapters.Turn {
	size := 32
	for i := 0; i < s.nparts; i++ {
		size += 48 + len(s.parts[i].body) + len(s.parts[i].sig)
	}
	m := make([]byte, 0, size)
	m = append(m, `{"role":"model","parts":[`...)
	var t adapters.Turn
	for i := 0; i < s.nparts; i++ {
		p := &s.parts[i]
		if i > 0 {
			m = append(m, ',')
		}
		if !p.text {
			m = append(m, p.body...)
			if fc := rawjson.Get(p.body, "functionCall"); fc.IsObject() {
				t.ToolCalls = append(t.ToolCalls, adapters.ToolCall{ID: fc.Get("id").String(), Name: fc.Get("name").String()})
			}
			continue
		}
		m = append(m, `{"text":`...)
		m = rawjson.AppendQuoted(m, p.body)
		if p.thought {
			m = append(m, `,"thought":true`...)
		}
		if len(p.sig) > 0 {
			m = append(m, `,"thoughtSignature":`...)
			m = append(m, p.sig...)
		}
		m = append(m, '}')
	}
	m = append(m, "]}"...)
	t.Message = m
	t.Usage = s.usage
	t.Model = string(s.model)
	t.FinishRaw = string(s.finishRaw)
	if s.blocked {
		t.Finish = adapters.FinishContentFilter
	} else {
		t.Finish = geminiFinish(t.FinishRaw, len(t.ToolCalls) > 0)
	}
	t.Terminal = len(s.finishRaw) > 0
	if len(s.errRaw) > 0 {
		t.Error = append([]byte(nil), s.errRaw...)
		t.Finish = adapters.FinishError
	}
	return t
}

// Done implements Assembler.
func (s *geminiAssembler) Done() bool { return len(s.finishRaw) > 0 }
