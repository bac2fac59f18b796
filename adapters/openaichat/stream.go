package openaichat

import (
	"bytes"
	"fmt"

	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
)

// NewAssembler implements adapters.Adapter.
func (a *Adapter) NewAssembler() adapters.Assembler { return &openAIAssembler{d: &a.d} }

// openAIAssembler rebuilds the assistant message from chat-completion
// chunks the way the official SDKs do: content, reasoning_content and
// refusal concatenated (a null delta never erases text), tool calls merged
// by index (id, type and name from the first fragment that has them,
// arguments concatenated), entries without an index (Gemini's OpenAI
// endpoint) each a whole call keyed by id. Other delta fields are kept
// (last non-null value wins), as are unknown fields of tool calls. Only
// choice index 0 is assembled.
//
// Strings are kept as their escaped JSON text and concatenated as such, so
// feeding text deltas neither decodes nor allocates in the steady state.
type openAIAssembler struct {
	d *Dialect

	content, reasoning, refusal             []byte
	contentSeen, reasoningSeen, refusalSeen bool

	calls  []oaCall
	ncalls int
	extras kvList

	usage     adapters.Usage
	finishRaw []byte
	done      bool
	errRaw    []byte
	model     []byte // the first chunk's model
}

type oaCall struct {
	index    int64
	hasIndex bool
	id       []byte // raw JSON string
	typ      []byte // raw JSON string
	name     []byte // escaped text
	args     []byte // escaped text
	extra    kvList
}

// kvList is a reusable list of raw JSON members.
type kvList struct {
	items []kvItem
	n     int
}

type kvItem struct {
	key, val []byte // raw JSON key (with quotes), raw value
}

func (l *kvList) reset() { l.n = 0 }

// set stores key=val, replacing an existing key; with keepFirst an existing
// key is left alone.
func (l *kvList) set(key, val string, keepFirst bool) {
	for i := 0; i < l.n; i++ {
		if string(l.items[i].key) == key {
			if !keepFirst {
				l.items[i].val = append(l.items[i].val[:0], val...)
			}
			return
		}
	}
	if l.n == len(l.items) {
		l.items = append(l.items, kvItem{})
	}
	it := &l.items[l.n]
	it.key = append(it.key[:0], key...)
	it.val = append(it.val[:0], val...)
	l.n++
}

func (l *kvList) appendTo(b []byte) []byte {
	for i := 0; i < l.n; i++ {
		b = append(b, ',')
		b = append(b, l.items[i].key...)
		b = append(b, ':')
		b = append(b, l.items[i].val...)
	}
	return b
}

var doneMarker = []byte("[DONE]")

// Reset implements Assembler.
func (s *openAIAssembler) Reset() {
	s.content, s.reasoning, s.refusal = s.content[:0], s.reasoning[:0], s.refusal[:0]
	s.contentSeen, s.reasoningSeen, s.refusalSeen = false, false, false
	s.ncalls = 0
	s.extras.reset()
	s.usage = adapters.Usage{}
	s.finishRaw = s.finishRaw[:0]
	s.done = false
	s.errRaw = s.errRaw[:0]
	s.model = s.model[:0]
}

// Feed implements Assembler for one SSE data payload.
func (s *openAIAssembler) Feed(data []byte) error {
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, doneMarker) {
		s.done = true
		return nil
	}
	if len(data) == 0 || data[0] != '{' || !jsonscan.Valid(data) {
		return fmt.Errorf("openai chunk: %w", adapters.ErrInvalidJSON)
	}
	rawjson.EachMember(rawjson.Str(data), func(k, v string) bool {
		switch k {
		case `"choices"`:
			rawjson.EachElement(v, func(c string) bool {
				if idx := rawjson.MemberRaw(c, `"index"`); idx != "" && idx != "0" {
					return true
				}
				s.choice(c)
				return false
			})
		case `"usage"`:
			if rawjson.IsObject(v) {
				s.usage = openAIUsage(gjson.Parse(v))
			}
		case `"error"`:
			if !rawjson.IsNull(v) {
				s.errRaw = append(s.errRaw[:0], v...)
			}
		case `"model"`:
			s.model = adapters.AppendResponseModel(s.model, v)
		}
		return true
	})
	return nil
}

func (s *openAIAssembler) choice(c string) {
	rawjson.EachMember(c, func(k, v string) bool {
		switch k {
		case `"delta"`, `"message"`:
			s.delta(v)
		case `"finish_reason"`:
			if rawjson.IsString(v) {
				s.finishRaw = append(s.finishRaw[:0], rawjson.Unquote(v)...)
			}
		}
		return true
	})
}

func (s *openAIAssembler) delta(d string) {
	rawjson.EachMember(d, func(k, v string) bool {
		switch k {
		case `"role"`:
		case `"content"`:
			if rawjson.IsString(v) {
				s.content = append(s.content, rawjson.Unquote(v)...)
				s.contentSeen = true
			}
		case `"reasoning_content"`:
			if rawjson.IsString(v) {
				s.reasoning = append(s.reasoning, rawjson.Unquote(v)...)
				s.reasoningSeen = true
			}
		case `"refusal"`:
			if rawjson.IsString(v) {
				s.refusal = append(s.refusal, rawjson.Unquote(v)...)
				s.refusalSeen = true
			}
		case `"tool_calls"`:
			rawjson.EachElement(v, func(tc string) bool {
				s.toolCall(tc)
				return true
			})
		default:
			if !rawjson.IsNull(v) {
				s.extras.set(k, v, false)
			}
		}
		return true
	})
}

// toolCall merges one tool_calls entry.
func (s *openAIAssembler) toolCall(tc string) {
	idx := rawjson.MemberRaw(tc, `"index"`)
	id := rawjson.MemberRaw(tc, `"id"`)
	var n int64
	hasIndex := idx != "" && !rawjson.IsNull(idx)
	if hasIndex {
		n = rawjson.NonNegative(idx)
	}
	var c *oaCall
	switch {
	case hasIndex:
		for i := 0; i < s.ncalls; i++ {
			if s.calls[i].hasIndex && s.calls[i].index == n {
				c = &s.calls[i]
				break
			}
		}
	case rawjson.IsString(id) && id != `""`:
		for i := 0; i < s.ncalls; i++ {
			if string(s.calls[i].id) == id {
				c = &s.calls[i]
				break
			}
		}
	default:
		// No index and no id: a continuation of the last call.
		if s.ncalls > 0 {
			c = &s.calls[s.ncalls-1]
		}
	}
	if c == nil {
		if s.ncalls == len(s.calls) {
			s.calls = append(s.calls, oaCall{})
		}
		c = &s.calls[s.ncalls]
		s.ncalls++
		c.id, c.typ, c.name, c.args = c.id[:0], c.typ[:0], c.name[:0], c.args[:0]
		c.extra.reset()
		c.index, c.hasIndex = n, hasIndex
	}
	rawjson.EachMember(tc, func(k, v string) bool {
		switch k {
		case `"index"`:
		case `"id"`:
			if len(c.id) == 0 && rawjson.IsString(v) && v != `""` {
				c.id = append(c.id, v...)
			}
		case `"type"`:
			if len(c.typ) == 0 && rawjson.IsString(v) && v != `""` {
				c.typ = append(c.typ, v...)
			}
		case `"function"`:
			rawjson.EachMember(v, func(fk, fv string) bool {
				if !rawjson.IsString(fv) {
					return true
				}
				switch fk {
				case `"name"`:
					if len(c.name) == 0 {
						c.name = append(c.name, rawjson.Unquote(fv)...)
					}
				case `"arguments"`:
					c.args = append(c.args, rawjson.Unquote(fv)...)
				}
				return true
			})
		default:
			if !rawjson.IsNull(v) {
				c.extra.set(k, v, true)
			}
		}
		return true
	})
}

// Result implements Assembler.
func (s *openAIAssembler) Result() adapters.Turn {
	m := make([]byte, 0, 64+len(s.content)+len(s.reasoning)+len(s.refusal)+s.callsSize())
	m = append(m, `{"role":"assistant","content":`...)
	switch {
	case len(s.content) > 0:
		m = rawjson.AppendQuoted(m, s.content)
	case s.ncalls > 0:
		m = append(m, s.d.ToolOnlyContent...)
	case s.refusalSeen && len(s.refusal) > 0:
		m = append(m, "null"...)
	default:
		m = append(m, `""`...)
	}
	if s.reasoningSeen {
		m = append(m, `,"reasoning_content":`...)
		m = rawjson.AppendQuoted(m, s.reasoning)
	}
	if len(s.refusal) > 0 {
		m = append(m, `,"refusal":`...)
		m = rawjson.AppendQuoted(m, s.refusal)
	}
	t := adapters.Turn{}
	if s.ncalls > 0 {
		m = append(m, `,"tool_calls":[`...)
		for i := 0; i < s.ncalls; i++ {
			c := &s.calls[i]
			if i > 0 {
				m = append(m, ',')
			}
			m = append(m, `{"id":`...)
			if len(c.id) > 0 {
				m = append(m, c.id...)
			} else {
				m = append(m, `""`...)
			}
			m = append(m, `,"type":`...)
			if len(c.typ) > 0 {
				m = append(m, c.typ...)
			} else {
				m = append(m, `"function"`...)
			}
			m = append(m, `,"function":{"name":`...)
			m = rawjson.AppendQuoted(m, c.name)
			m = append(m, `,"arguments":`...)
			m = rawjson.AppendQuoted(m, c.args)
			m = append(m, '}')
			m = c.extra.appendTo(m)
			m = append(m, '}')
			t.ToolCalls = append(t.ToolCalls, adapters.ToolCall{
				ID:   gjson.Parse(string(c.id)).String(),
				Name: gjson.Parse(`"` + string(c.name) + `"`).String(),
			})
		}
		m = append(m, ']')
	}
	m = s.extras.appendTo(m)
	m = append(m, '}')
	t.Message = m
	t.Usage = s.usage
	t.Model = string(s.model)
	t.FinishRaw = string(s.finishRaw)
	t.Finish = openAIFinish(t.FinishRaw, s.ncalls > 0)
	t.Terminal = s.done || (s.d.DoneOptional && len(s.finishRaw) > 0)
	if len(s.errRaw) > 0 {
		t.Error = append([]byte(nil), s.errRaw...)
		t.Finish = adapters.FinishError
	}
	return t
}

func (s *openAIAssembler) callsSize() int {
	n := 0
	for i := 0; i < s.ncalls; i++ {
		n += 64 + len(s.calls[i].args) + len(s.calls[i].name) + len(s.calls[i].id)
	}
	return n
}

// Done implements Assembler.
func (s *openAIAssembler) Done() bool { return s.done }
