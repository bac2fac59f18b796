package adapters

import (
	"bytes"
	"fmt"

	"github.com/tidwall/gjson"
)

// NewAssembler implements Adapter.
func (g *Gemini) NewAssembler() Assembler { return &geminiAssembler{} }

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

	usage     Usage
	finishRaw []byte
	blocked   bool
	errRaw    []byte
	calls     int
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
	s.usage = Usage{}
	s.finishRaw = s.finishRaw[:0]
	s.blocked = false
	s.errRaw = s.errRaw[:0]
	s.calls = 0
}

// Feed implements Assembler for one chunk: an SSE data payload or one
// element of a JSON-array stream.
func (s *geminiAssembler) Feed(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' || !gjson.ValidBytes(data) {
		return fmt.Errorf("gemini chunk: %w", ErrInvalidJSON)
	}
	gjson.Parse(str(data)).ForEach(func(k, v gjson.Result) bool {
		switch k.Raw {
		case `"candidates"`:
			v.ForEach(func(_, c gjson.Result) bool {
				if idx := c.Get("index"); idx.Exists() && idx.Int() != 0 {
					return true
				}
				s.candidate(c)
				return false
			})
		case `"usageMetadata"`:
			if v.IsObject() {
				s.usage = geminiUsage(v)
			}
		case `"promptFeedback"`:
			if br := v.Get("blockReason"); br.Type == gjson.String && br.Str != "" {
				s.blocked = true
				s.finishRaw = append(s.finishRaw[:0], br.Str...)
			}
		case `"error"`:
			if v.Type != gjson.Null {
				s.errRaw = append(s.errRaw[:0], v.Raw...)
			}
		}
		return true
	})
	return nil
}

func (s *geminiAssembler) candidate(c gjson.Result) {
	c.ForEach(func(k, v gjson.Result) bool {
		switch k.Raw {
		case `"content"`:
			v.Get("parts").ForEach(func(_, p gjson.Result) bool {
				s.part(p)
				return true
			})
		case `"finishReason"`:
			if v.Type == gjson.String && v.Str != "" {
				s.finishRaw = append(s.finishRaw[:0], v.Str...)
			}
		}
		return true
	})
}

func (s *geminiAssembler) part(p gjson.Result) {
	var text, sig gjson.Result
	thought, simple := false, true
	p.ForEach(func(k, v gjson.Result) bool {
		switch k.Raw {
		case `"text"`:
			text = v
		case `"thought"`:
			thought = v.Type == gjson.True
			if v.Type != gjson.True && v.Type != gjson.False {
				simple = false
			}
		case `"thoughtSignature"`:
			sig = v
		default:
			simple = false
		}
		return simple
	})
	if simple && text.Type == gjson.String {
		sigSet := sig.Type == gjson.String && sig.Str != ""
		if s.nparts > 0 {
			last := &s.parts[s.nparts-1]
			if last.text && last.thought == thought && len(last.sig) == 0 {
				last.body = append(last.body, unquoteRaw(text.Raw)...)
				if sigSet {
					last.sig = append(last.sig, sig.Raw...)
				}
				return
			}
		}
		if text.Raw == `""` && !sigSet {
			return
		}
		np := s.newPart()
		np.text, np.thought = true, thought
		np.body = append(np.body, unquoteRaw(text.Raw)...)
		if sigSet {
			np.sig = append(np.sig, sig.Raw...)
		}
		return
	}
	if p.Get("functionCall").Exists() {
		s.calls++
	}
	np := s.newPart()
	np.body = append(np.body, p.Raw...)
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
func (s *geminiAssembler) Result() Turn {
	size := 32
	for i := 0; i < s.nparts; i++ {
		size += 48 + len(s.parts[i].body) + len(s.parts[i].sig)
	}
	m := make([]byte, 0, size)
	m = append(m, `{"role":"model","parts":[`...)
	var t Turn
	for i := 0; i < s.nparts; i++ {
		p := &s.parts[i]
		if i > 0 {
			m = append(m, ',')
		}
		if !p.text {
			m = append(m, p.body...)
			if fc := get(p.body, "functionCall"); fc.IsObject() {
				t.ToolCalls = append(t.ToolCalls, ToolCall{ID: fc.Get("id").String(), Name: fc.Get("name").String()})
			}
			continue
		}
		m = append(m, `{"text":`...)
		m = appendQuoted(m, p.body)
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
	t.FinishRaw = string(s.finishRaw)
	if s.blocked {
		t.Finish = FinishContentFilter
	} else {
		t.Finish = geminiFinish(t.FinishRaw, len(t.ToolCalls) > 0)
	}
	t.Terminal = len(s.finishRaw) > 0
	if len(s.errRaw) > 0 {
		t.Error = append([]byte(nil), s.errRaw...)
		t.Finish = FinishError
	}
	return t
}
