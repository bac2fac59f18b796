package repair

import (
	"strings"
	"sync"

	"github.com/tidwall/gjson"
)

// Role is what one element of a history (a message, content or item) is
// to repair. A format's Scan gives every element one; the rules of turns
// and blocks below are written once, on roles.
type Role uint8

const (
	// RoleOther is an element that neither makes calls nor answers them
	// (a user message, an assistant text reply): a block open before it
	// must be complete.
	RoleOther Role = iota
	// RoleTurn is a call turn of its own: it closes what was open and
	// makes calls (an OpenAI chat assistant message with tool_calls).
	RoleTurn
	// RoleTurnPart is one element of a call turn that consecutive
	// RoleTurnPart elements share (a Responses function_call or reasoning
	// item, a Gemini model content).
	RoleTurnPart
	// RoleResult is one element of a block that runs on over the
	// following RoleResult elements (an OpenAI tool message, a Responses
	// function_call_output item).
	RoleResult
	// RoleBlock is one element that is the whole block of the turn before
	// it: it answers that turn and closes it (a Gemini non-model content).
	RoleBlock
)

// turn reports whether r belongs to a call turn.
func (r Role) turn() bool { return r == RoleTurn || r == RoleTurnPart }

// Scanner is what a format's Scan reports one element to: repair's
// validity check, a Skim being made, or the history repair's slow path
// reads. For each element Scan calls Element once, first; then, in the
// element's order, Call for each call it makes and Result for each result
// it carries (a nested format calls Part before each of its parts); and
// Empty when the element is an empty assistant message repair drops.
type Scanner struct {
	mode  scanMode
	c     *check   // scanCheck
	sk    *Skim    // scanSkim
	h     *history // scanRead
	el    Role     // the element being scanned
	first bool     // no Call or Result reported for the element yet
}

type scanMode uint8

const (
	scanCheck scanMode = iota
	scanSkim
	scanRead
)

// Element starts an element with its role.
func (s *Scanner) Element(r Role) {
	s.el, s.first = r, true
	switch s.mode {
	case scanCheck:
		s.c.element(r)
	case scanSkim:
		s.sk.role = r
	case scanRead:
		s.h.element(r)
	}
}

// Part starts the next part of an element of a nested format (a Gemini
// part): raw is its JSON, and the Call or Result that follows, if any, is
// that part's. Flat formats never call it.
func (s *Scanner) Part(raw string) {
	if s.mode == scanRead {
		s.h.part(raw)
	}
}

// Call reports a call the element makes, with its id (hasID false where
// the format's call has none) and name. A call outside a turn element is
// ignored. The name matters only for a call without an id, and for the
// slow path's edits and wordings: where Names is false a format may pass
// "" for calls with ids.
func (s *Scanner) Call(id, name string, hasID bool) {
	if !s.el.turn() {
		return
	}
	switch s.mode {
	case scanCheck:
		s.c.call(id, name, hasID)
	case scanSkim:
		s.sk.add(false, id, name, hasID)
	case scanRead:
		s.h.item(itemCall, id, name, hasID)
	}
}

// Result reports a result the element carries, with the id of the call it
// answers (hasID false where the format's result has none) and the
// function name where the format carries one.
func (s *Scanner) Result(id, name string, hasID bool) {
	switch s.mode {
	case scanCheck:
		s.c.result(id, name, hasID)
	case scanSkim:
		s.sk.add(true, id, name, hasID)
	case scanRead:
		s.h.item(itemResult, id, name, hasID)
	}
}

// Empty reports that the element is an empty assistant message, which
// repair drops.
func (s *Scanner) Empty() {
	switch s.mode {
	case scanCheck:
		s.c.ok = false
	case scanSkim:
		s.sk.empty = true
	case scanRead:
		s.h.empty()
	}
}

// Misplaced reports that the element's parts are not in the order its
// format requires (Anthropic: tool_result blocks first in their message),
// and that Scan reported them (Part) in the required order: the check
// fails, and the slow path writes the element in the reported order.
func (s *Scanner) Misplaced() {
	switch s.mode {
	case scanCheck:
		s.c.ok = false
	case scanSkim:
		s.sk.misplaced = true
	case scanRead:
		s.h.misplaced()
	}
}

// Names reports whether names of calls with ids are wanted (the slow
// path's edits and wordings name them); where it is false, looking them
// up can be skipped.
func (s *Scanner) Names() bool { return s.mode == scanRead }

// OK reports whether scanning should go on: false once the check has
// found a defect. A Scan may stop reporting an element's calls and results
// then.
func (s *Scanner) OK() bool { return s.mode != scanCheck || s.c.ok }

// Rules is what every wire format gives repair: its reading of one
// element of a history.
type Rules interface {
	// Scan reports el, one element of a history array, to s.
	Scan(el gjson.Result, s *Scanner)
}

// Phases of the check.
const (
	phaseNone  uint8 = iota // no turn open
	phaseTurn               // a turn's elements are being read
	phaseBlock              // the turn's block of results is being read
)

// check is the validity check: it reports whether a history needs no
// edit, from its elements' roles, calls and results. It is the one
// definition of a valid history (see the package documentation); the fast
// path runs it on the raw history, ValidSkims on skims.
//
// It is 5 KB, and it is pooled rather than a local: a check runs deep in a
// request's stack, and a local that size grew the goroutine's stack to
// 16 KiB, which an open stream then kept for its whole life.
type check struct {
	set   idSet   // every call id seen
	p     pending // the calls of the open turn
	phase uint8
	ok    bool
	role  Role
	// closeNext: the element read last was a RoleBlock, whose turn closes
	// before the next element.
	closeNext bool
	// s is the Scanner reporting to this check (pooled with it, so that
	// handing it to a format's Scan allocates nothing), and skim the Skim
	// SkimOf makes with it.
	s    Scanner
	skim Skim
}

var checks = sync.Pool{New: func() any { return new(check) }}

func getCheck() *check {
	c := checks.Get().(*check)
	c.ok = true
	c.s = Scanner{mode: scanCheck, c: c}
	return c
}

// putCheck clears c, so that the pool holds no reference into a request,
// and gives it back.
func putCheck(c *check) {
	c.set.clear()
	c.p.clear()
	c.phase, c.role, c.closeNext = phaseNone, RoleOther, false
	c.s, c.skim = Scanner{}, Skim{}
	checks.Put(c)
}

// close ends the open turn: every call in it must have been answered.
func (c *check) close() {
	if c.p.open > 0 {
		c.ok = false
	}
	c.p.reset()
	c.phase = phaseNone
}

func (c *check) element(r Role) {
	if c.closeNext {
		c.closeNext = false
		c.close()
	}
	c.role = r
	switch r {
	case RoleTurn:
		if c.phase != phaseNone {
			c.close()
		}
		c.phase = phaseTurn
	case RoleTurnPart:
		if c.phase == phaseBlock {
			c.close()
		}
		c.phase = phaseTurn
	case RoleResult:
		if c.phase == phaseTurn {
			c.phase = phaseBlock
		}
	case RoleBlock:
		c.closeNext = true
	default:
		c.close()
	}
}

func (c *check) call(id, name string, hasID bool) {
	if hasID && c.set.add(id) {
		c.ok = false
		return
	}
	c.p.add(id, name, hasID)
}

// result reads a result: it must answer a call of the open turn (none is
// open outside one), and never stand in a turn element.
func (c *check) result(id, name string, hasID bool) {
	if c.role.turn() || !c.p.answer(id, name, hasID) {
		c.ok = false
	}
}

// done ends the history.
func (c *check) done() bool {
	if c.closeNext {
		c.closeNext = false
		c.close()
	}
	return c.ok && c.p.open == 0
}

// Valid reports whether a history (a JSON array the caller has checked)
// needs no edit under f's rules: the check Flat and Nested run first.
func Valid(f Rules, messages []byte) bool { return valid(f, gjson.Parse(str(messages))) }

// valid is the fast path: it reports whether the history needs no edit,
// without allocating for histories with at most 256 calls in total and 16
// in one turn.
func valid(f Rules, arr gjson.Result) bool {
	c := getCheck()
	defer putCheck(c)
	Each(arr, func(v gjson.Result) bool {
		f.Scan(v, &c.s)
		return c.ok
	})
	return c.done()
}

// Skim is what repair's validity check reads of one message (an OpenAI
// chat message, a Gemini content or a Responses input item): its role,
// the calls it makes and the results it carries, and whether it is empty.
// A caller that keeps a thread's messages can keep their skims too, and
// check a history that grew by a message or two with ValidSkims instead
// of parsing all of it again. A Skim never aliases the message it was made
// from. Skims of one format are only checked together.
type Skim struct {
	role      Role
	empty     bool
	misplaced bool
	parts     []skimPart // calls and results, in order
}

// skimPart is one call or result of a skimmed message.
type skimPart struct {
	id    string
	name  string // only for a call or result without an id
	hasID bool
	res   bool // a result, else a call
}

func (s *Skim) add(res bool, id, name string, hasID bool) {
	p := skimPart{id: strings.Clone(id), hasID: hasID, res: res}
	if !hasID {
		p.name = strings.Clone(name)
	}
	s.parts = append(s.parts, p)
}

// Plain reports whether the skim is the zero Skim: a message repair needs
// nothing from (an OpenAI or Responses message that neither calls nor
// answers a tool, and is not an empty assistant message or a reasoning
// item).
func (s Skim) Plain() bool {
	return s.role == RoleOther && s.parts == nil && !s.empty
}

// HasCalls reports whether the message makes tool calls.
func (s Skim) HasCalls() bool {
	for _, p := range s.parts {
		if !p.res {
			return true
		}
	}
	return false
}

// SkimOf skims one message (one element of a history) of f's format.
func SkimOf(f Rules, msg []byte) Skim {
	c := getCheck()
	defer putCheck(c)
	c.s = Scanner{mode: scanSkim, sk: &c.skim}
	f.Scan(gjson.Parse(str(msg)), &c.s)
	sk := c.skim
	c.skim = Skim{}
	return sk
}

// ValidSkims reports whether the repair of the history these skims were
// made from would leave it as it is: the same check as the repair's own,
// read off the skims.
func ValidSkims(skims []Skim) bool {
	return ValidSkimsAt(len(skims), func(i int) *Skim { return &skims[i] })
}

// ValidSkimsAt is ValidSkims over n skims that at returns in order, for a
// caller whose skims are not in one slice.
func ValidSkimsAt(n int, at func(int) *Skim) bool {
	c := getCheck()
	defer putCheck(c)
	for i := 0; i < n; i++ {
		s := at(i)
		c.element(s.role)
		for _, p := range s.parts {
			switch {
			case p.res:
				c.result(p.id, p.name, p.hasID)
			case s.role.turn():
				c.call(p.id, p.name, p.hasID)
			}
		}
		if s.empty || s.misplaced {
			c.ok = false
		}
		if !c.ok {
			return false
		}
	}
	return c.done()
}
