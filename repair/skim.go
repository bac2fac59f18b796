package repair

import (
	"strings"
	"sync"

	"github.com/tidwall/gjson"
)

// Skim is what repair's validity check reads of one message (an OpenAI
// chat message, a Gemini content or a Responses input item): whether it
// makes calls, answers them or is empty, and the ids involved. A caller
// that keeps a thread's messages can keep their skims too, and check a
// history that grew by a message or two with ValidSkims instead of
// parsing all of it again. A Skim never aliases the message it was made
// from. Skims of one format are only checked with that format.
type Skim struct {
	kind  skimKind
	ids   []string   // OpenAI: the tool message's tool_call_id or the calls' ids; Responses: the call_id
	parts []skimPart // Gemini: the functionCall and functionResponse parts, in order
	model bool       // Gemini: role "model"
	empty bool       // Gemini: every part is empty
}

type skimKind uint8

const (
	skimOther     skimKind = iota // needs nothing (closes a block of results)
	skimTool                      // OpenAI role "tool" / Responses function_call_output: answers ids[0]
	skimCalls                     // OpenAI assistant message with calls / Responses function_call
	skimEmpty                     // an assistant message with nothing in it
	skimReasoning                 // Responses reasoning item
	skimGemini                    // a Gemini content: see model, empty, parts
)

// skimPart is one functionCall or functionResponse part of a Gemini content.
type skimPart struct {
	response bool
	id, name string
	hasID    bool
}

// Plain reports whether the skim is the zero Skim: a message repair needs
// nothing from (an OpenAI or Responses message that neither calls nor
// answers a tool, and is not an empty assistant message or a reasoning
// item).
func (s Skim) Plain() bool {
	return s.kind == skimOther && s.ids == nil && s.parts == nil && !s.model && !s.empty
}

// HasCalls reports whether the message makes tool calls.
func (s Skim) HasCalls() bool {
	if s.kind == skimGemini {
		for _, p := range s.parts {
			if !p.response {
				return true
			}
		}
		return false
	}
	return s.kind == skimCalls
}

// SkimOpenAIChat skims one OpenAI chat message (one element of messages).
func SkimOpenAIChat(msg []byte) Skim {
	m := parseOA(gjson.Parse(str(msg)))
	switch {
	case m.role == "tool":
		return Skim{kind: skimTool, ids: []string{strings.Clone(strValue(m.toolCallID))}}
	case m.hasCalls():
		var ids []string
		gjson.Parse(m.toolCalls).ForEach(func(_, c gjson.Result) bool {
			ids = append(ids, strings.Clone(strValue(c.Get("id").Raw)))
			return true
		})
		return Skim{kind: skimCalls, ids: ids}
	case m.empty():
		return Skim{kind: skimEmpty}
	}
	return Skim{}
}

// SkimGemini skims one Gemini content (one element of contents).
func SkimGemini(content []byte) Skim {
	c := parseGM(gjson.Parse(str(content)))
	s := Skim{kind: skimGemini, model: c.model, empty: true}
	eachElement(c.parts, func(pv gjson.Result) bool {
		gp := parseGMPart(pv)
		s.empty = s.empty && gp.empty
		if gp.kind == gpCall || gp.kind == gpResponse {
			s.parts = append(s.parts, skimPart{response: gp.kind == gpResponse,
				id: strings.Clone(gp.id), name: strings.Clone(gp.name), hasID: gp.hasID})
		}
		return true
	})
	return s
}

// SkimResponses skims one Responses input item.
func SkimResponses(item []byte) Skim {
	it := parseRS(gjson.Parse(str(item)))
	switch {
	case it.kind == riCall:
		return Skim{kind: skimCalls, ids: []string{strings.Clone(it.callID)}}
	case it.kind == riOutput:
		return Skim{kind: skimTool, ids: []string{strings.Clone(it.callID)}}
	case it.kind == riReasoning:
		return Skim{kind: skimReasoning}
	case it.empty:
		return Skim{kind: skimEmpty}
	}
	return Skim{}
}

// ValidOpenAIChatSkims reports whether OpenAIChat would leave the history
// these skims were made from as it is: the same check as its own scan,
// read off the skims.
func ValidOpenAIChatSkims(skims []Skim) bool {
	return ValidOpenAIChatSkimsAt(len(skims), func(i int) *Skim { return &skims[i] })
}

// ValidOpenAIChatSkimsAt is ValidOpenAIChatSkims over n skims that at
// returns in order, for a caller whose skims are not in one slice.
func ValidOpenAIChatSkimsAt(n int, at func(int) *Skim) bool {
	c := getCheck()
	defer putCheck(c)
	for i := 0; i < n; i++ {
		s := at(i)
		if s.kind == skimTool {
			if !c.result(s.ids[0]) {
				return false
			}
			continue
		}
		if !c.next() {
			return false
		}
		switch s.kind {
		case skimCalls:
			for _, id := range s.ids {
				if !c.call(id) {
					return false
				}
			}
			c.inBlock = true
		case skimEmpty:
			return false
		}
	}
	return c.done()
}

// ValidGeminiSkims is ValidOpenAIChatSkims for Gemini's scan.
func ValidGeminiSkims(skims []Skim) bool {
	return ValidGeminiSkimsAt(len(skims), func(i int) *Skim { return &skims[i] })
}

// ValidGeminiSkimsAt is ValidGeminiSkims over n skims that at returns.
func ValidGeminiSkimsAt(n int, at func(int) *Skim) bool {
	c := getCheck()
	defer putCheck(c)
	set, p := &c.set, &c.p
	for i := 0; i < n; i++ {
		s := at(i)
		if !s.model && p.n > 0 {
			for _, gp := range s.parts {
				if gp.response && !p.answer(gp.id, gp.name, gp.hasID) {
					return false
				}
			}
			if p.open != 0 {
				return false
			}
			p.reset()
			continue
		}
		for _, gp := range s.parts {
			switch {
			case gp.response:
				return false
			case s.model:
				if gp.hasID && set.add(gp.id) {
					return false
				}
				p.add(gp.id, gp.name, gp.hasID)
			}
		}
		if s.model && s.empty {
			return false
		}
	}
	return p.open == 0
}

// ValidResponsesSkims is ValidOpenAIChatSkims for the Responses scan.
func ValidResponsesSkims(skims []Skim) bool {
	return ValidResponsesSkimsAt(len(skims), func(i int) *Skim { return &skims[i] })
}

// ValidResponsesSkimsAt is ValidResponsesSkims over n skims that at returns.
func ValidResponsesSkimsAt(n int, at func(int) *Skim) bool {
	c := getCheck()
	defer putCheck(c)
	set, p := &c.set, &c.p
	inBlock := false
	for i := 0; i < n; i++ {
		s := at(i)
		switch s.kind {
		case skimCalls, skimReasoning:
			if inBlock {
				if p.open != 0 {
					return false
				}
				p.reset()
				inBlock = false
			}
			if s.kind == skimCalls {
				if set.add(s.ids[0]) {
					return false
				}
				p.add(s.ids[0], "", true)
			}
		case skimTool:
			inBlock = true
			if p.n == 0 || !p.answer(s.ids[0], "", true) {
				return false
			}
		default:
			if p.open != 0 || s.kind == skimEmpty {
				return false
			}
			p.reset()
			inBlock = false
		}
	}
	return p.open == 0
}

// oaCheck is the state of a validity check: the call ids seen so far and
// the block of calls whose results are being read. Its methods are the
// OpenAI check's; the Gemini and Responses checks use its set and p.
//
// It is 5 KB, and it is pooled rather than a local: a check runs deep in a
// request's stack, and a local that size grew the goroutine's stack to
// 16 KiB, which an open stream then kept for its whole life.
type oaCheck struct {
	set     idSet
	p       pending
	inBlock bool
}

var checks = sync.Pool{New: func() any { return new(oaCheck) }}

func getCheck() *oaCheck { return checks.Get().(*oaCheck) }

// putCheck clears c, so that the pool holds no reference into a request,
// and gives it back.
func putCheck(c *oaCheck) {
	c.set.clear()
	c.p.clear()
	c.inBlock = false
	checks.Put(c)
}

// result reads a tool message answering id.
func (c *oaCheck) result(id string) bool {
	return c.inBlock && c.p.answer(id, "", true)
}

// next reads the start of any other message: a block of calls ends there,
// and every call in it must have been answered.
func (c *oaCheck) next() bool {
	if c.inBlock {
		if c.p.open > 0 {
			return false
		}
		c.inBlock = false
		c.p.reset()
	}
	return true
}

// call reads one call id of an assistant message.
func (c *oaCheck) call(id string) bool {
	if c.set.add(id) {
		return false
	}
	c.p.add(id, "", true)
	return true
}

func (c *oaCheck) done() bool { return c.p.open == 0 }
