package repair

import (
	"strings"

	"github.com/tidwall/gjson"
)

// Skim is what the validity check of an OpenAI chat history reads of one
// message: whether it answers a call, makes calls or is an empty assistant
// message, and the call ids involved. A caller that keeps a thread's
// messages can keep their skims too, and check a history that grew by a
// message or two with ValidOpenAIChatSkims instead of parsing all of it
// again. A Skim never aliases the message it was made from.
type Skim struct {
	kind skimKind
	ids  []string // a tool message's tool_call_id, or an assistant message's call ids
}

type skimKind uint8

const (
	skimOther skimKind = iota // closes a block of results, needs nothing
	skimTool                  // role "tool": answers ids[0]
	skimCalls                 // an assistant message with tool calls ids
	skimEmpty                 // an assistant message with nothing in it
)

// HasCalls reports whether the message makes tool calls.
func (s Skim) HasCalls() bool { return s.kind == skimCalls }

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

// ValidOpenAIChatSkims reports whether OpenAIChat would leave the history
// these skims were made from as it is: it is the same check, read off the
// skims.
func ValidOpenAIChatSkims(skims []Skim) bool {
	var c oaCheck
	for i := range skims {
		s := &skims[i]
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

// oaCheck is the state of the OpenAI validity check: the call ids seen so
// far and the block of calls whose results are being read.
type oaCheck struct {
	set     idSet
	p       pending
	inBlock bool
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
