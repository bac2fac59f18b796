package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
)

// doneMarker is the end marker of OpenAI chat streams.
var doneMarker = []byte("[DONE]")

// NewAssembler implements adapters.Adapter.
func (a *Adapter) NewAssembler() adapters.Assembler { return &responsesAssembler{} }

// responsesAssembler rebuilds the output items of a Responses stream, as
// the official SDKs do. Items are keyed by output_index. The assembled
// message is, in order of preference: the output array of the terminal
// response object (response.completed / .incomplete / .failed), which is
// authoritative — encrypted_content differs between output_item.added,
// output_item.done and response.completed, and clients keep the last —;
// else each item as output_item.done sent it; else, for an item still
// streaming, the item from output_item.added with the text, refusal,
// arguments, summary and reasoning text deltas seen so far.
//
// Deltas are kept as their escaped JSON text and concatenated as such, so
// feeding them neither decodes nor allocates in the steady state.
type responsesAssembler struct {
	items  []rsItem
	nitems int

	output    []byte // raw output array of the terminal response
	outputN   int
	usage     adapters.Usage
	status    []byte
	reason    []byte
	terminal  bool
	errRaw    []byte
	errLocked bool   // errRaw came from an "error" event; response.failed keeps it
	model     []byte // the first response object's model (response.created)
}

// rsItem is one output item being assembled.
type rsItem struct {
	index int64
	done  bool
	raw   []byte // the item from output_item.done, else .added
	args  []byte // escaped arguments / custom tool input
	argsN bool   // args seen
	parts []rsPart
	np    int
}

// Part groups of an item.
const (
	groupContent   uint8 = iota // message content / reasoning content
	groupSummary                // reasoning summary
	groupReasoning              // reasoning item content (reasoning_text)
)

type rsPart struct {
	group uint8
	index int64
	typ   string // constant part type
	text  []byte // escaped text (or refusal)
}

// Reset implements Assembler.
func (s *responsesAssembler) Reset() {
	s.nitems = 0
	s.output = s.output[:0]
	s.outputN = 0
	s.usage = adapters.Usage{}
	s.status, s.reason = s.status[:0], s.reason[:0]
	s.terminal = false
	s.errRaw = s.errRaw[:0]
	s.errLocked = false
	s.model = s.model[:0]
}

// item returns the item at output_index raw (the last item when raw is
// absent), creating it when new.
func (s *responsesAssembler) item(raw string) *rsItem {
	idx := int64(-1)
	if raw != "" {
		idx = rawjson.NonNegative(raw)
	}
	if idx < 0 {
		if s.nitems > 0 {
			return &s.items[s.nitems-1]
		}
		idx = 0
	}
	for i := s.nitems - 1; i >= 0; i-- {
		if s.items[i].index == idx {
			return &s.items[i]
		}
	}
	if s.nitems == len(s.items) {
		s.items = append(s.items, rsItem{})
	}
	it := &s.items[s.nitems]
	s.nitems++
	it.index, it.done = idx, false
	it.raw, it.args, it.argsN, it.np = it.raw[:0], it.args[:0], false, 0
	return it
}

// part returns the item's part of a group at index raw, creating it.
func (it *rsItem) part(group uint8, raw string, typ string) *rsPart {
	idx := int64(0)
	if raw != "" {
		if idx = rawjson.NonNegative(raw); idx < 0 {
			idx = 0
		}
	}
	for i := 0; i < it.np; i++ {
		if p := &it.parts[i]; p.group == group && p.index == idx {
			return p
		}
	}
	if it.np == len(it.parts) {
		it.parts = append(it.parts, rsPart{})
	}
	p := &it.parts[it.np]
	it.np++
	p.group, p.index, p.typ, p.text = group, idx, typ, p.text[:0]
	return p
}

// Feed implements Assembler for one SSE data payload.
func (s *responsesAssembler) Feed(data []byte) error {
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, doneMarker) { // not sent by Responses servers; harmless
		return nil
	}
	if len(data) == 0 || data[0] != '{' || !jsonscan.Valid(data) {
		return fmt.Errorf("responses event: %w", adapters.ErrInvalidJSON)
	}
	var typ, outIdx, cIdx, sIdx, delta, text, item, resp, errv string
	rawjson.EachMember(rawjson.Str(data), func(k, v string) bool {
		switch k {
		case `"type"`:
			typ = v
		case `"output_index"`:
			outIdx = v
		case `"content_index"`:
			cIdx = v
		case `"summary_index"`:
			sIdx = v
		case `"delta"`:
			delta = v
		case `"text"`, `"refusal"`, `"arguments"`, `"input"`:
			text = v
		case `"item"`:
			item = v
		case `"response"`:
			resp = v
		case `"error"`:
			errv = v
		}
		return true
	})
	switch typ {
	case `"response.output_text.delta"`:
		s.appendPart(outIdx, groupContent, cIdx, "output_text", delta, false)
	case `"response.output_text.done"`:
		s.appendPart(outIdx, groupContent, cIdx, "output_text", text, true)
	case `"response.refusal.delta"`:
		s.appendPart(outIdx, groupContent, cIdx, "refusal", delta, false)
	case `"response.refusal.done"`:
		s.appendPart(outIdx, groupContent, cIdx, "refusal", text, true)
	case `"response.reasoning_summary_text.delta"`:
		s.appendPart(outIdx, groupSummary, sIdx, "summary_text", delta, false)
	case `"response.reasoning_summary_text.done"`:
		s.appendPart(outIdx, groupSummary, sIdx, "summary_text", text, true)
	case `"response.reasoning_text.delta"`:
		s.appendPart(outIdx, groupReasoning, cIdx, "reasoning_text", delta, false)
	case `"response.reasoning_text.done"`:
		s.appendPart(outIdx, groupReasoning, cIdx, "reasoning_text", text, true)
	case `"response.function_call_arguments.delta"`, `"response.custom_tool_call_input.delta"`:
		if rawjson.IsString(delta) {
			it := s.item(outIdx)
			it.args = append(it.args, rawjson.Unquote(delta)...)
			it.argsN = true
		}
	case `"response.function_call_arguments.done"`, `"response.custom_tool_call_input.done"`:
		if rawjson.IsString(text) {
			it := s.item(outIdx)
			it.args = append(it.args[:0], rawjson.Unquote(text)...)
			it.argsN = true
		}
	case `"response.output_item.added"`:
		if rawjson.IsObject(item) {
			if it := s.item(outIdx); !it.done {
				it.raw = append(it.raw[:0], item...)
			}
		}
	case `"response.output_item.done"`:
		if rawjson.IsObject(item) {
			it := s.item(outIdx)
			it.raw = append(it.raw[:0], item...)
			it.done = true
		}
	case `"response.completed"`, `"response.incomplete"`, `"response.failed"`:
		s.terminal = true
		if rawjson.IsObject(resp) {
			s.response(resp)
		}
	case `"error"`:
		s.eventError(data, errv)
	}
	if len(s.model) == 0 && rawjson.IsObject(resp) {
		s.model = adapters.AppendResponseModel(s.model, rawjson.MemberRaw(resp, `"model"`))
	}
	return nil
}

func (s *responsesAssembler) appendPart(outIdx string, group uint8, idx, typ, v string, replace bool) {
	if !rawjson.IsString(v) {
		return
	}
	p := s.item(outIdx).part(group, idx, typ)
	if replace {
		p.text = p.text[:0]
	}
	p.text = append(p.text, rawjson.Unquote(v)...)
}

// response reads a terminal response object.
func (s *responsesAssembler) response(resp string) {
	rawjson.EachMember(resp, func(k, v string) bool {
		switch k {
		case `"status"`:
			if rawjson.IsString(v) {
				s.status = append(s.status[:0], rawjson.Unquote(v)...)
			}
		case `"incomplete_details"`:
			if r := rawjson.MemberRaw(v, `"reason"`); rawjson.IsString(r) {
				s.reason = append(s.reason[:0], rawjson.Unquote(r)...)
			}
		case `"usage"`:
			if rawjson.IsObject(v) {
				s.usage = responsesUsage(gjson.Parse(v))
			}
		case `"output"`:
			n := 0
			rawjson.EachElement(v, func(string) bool { n++; return true })
			if n > 0 {
				s.output = append(s.output[:0], v...)
				s.outputN = n
			}
		case `"error"`:
			if rawjson.IsObject(v) && !s.errLocked {
				s.errRaw = append(s.errRaw[:0], v...)
			}
		}
		return true
	})
}

// eventError records an "error" event: its nested error object (what
// OpenAI sends), or the flat code/message/param members (what the spec
// documents) as an object.
func (s *responsesAssembler) eventError(data []byte, errv string) {
	s.errLocked = true
	if rawjson.IsObject(errv) {
		s.errRaw = append(s.errRaw[:0], errv...)
		return
	}
	s.errRaw = append(s.errRaw[:0], '{')
	rawjson.EachMember(rawjson.Str(data), func(k, v string) bool {
		if k == `"type"` || k == `"sequence_number"` {
			return true
		}
		if len(s.errRaw) > 1 {
			s.errRaw = append(s.errRaw, ',')
		}
		s.errRaw = append(s.errRaw, k...)
		s.errRaw = append(s.errRaw, ':')
		s.errRaw = append(s.errRaw, v...)
		return true
	})
	s.errRaw = append(s.errRaw, '}')
}

// Result implements Assembler.
func (s *responsesAssembler) Result() adapters.Turn {
	var m []byte
	if s.outputN > 0 && s.outputN >= s.nitems {
		m = s.output
	} else {
		m = make([]byte, 0, 64+s.size())
		m = append(m, '[')
		for i := 0; i < s.nitems; i++ {
			if i > 0 {
				m = append(m, ',')
			}
			m = s.items[i].appendTo(m)
		}
		m = append(m, ']')
	}
	var buf bytes.Buffer
	buf.Grow(len(m))
	if err := json.Compact(&buf, m); err != nil {
		buf.Reset()
		buf.WriteString("[]")
	}
	t := adapters.Turn{Message: buf.Bytes(), Usage: s.usage, Terminal: s.terminal, Model: string(s.model)}
	t.ToolCalls = responsesCalls(t.Message)
	if s.terminal {
		t.Finish, t.FinishRaw = responsesFinish(string(s.status), string(s.reason), len(t.ToolCalls) > 0)
	}
	if len(s.errRaw) > 0 {
		t.Error = append([]byte(nil), s.errRaw...)
		t.Finish = adapters.FinishError
		if t.FinishRaw == "" {
			t.FinishRaw = "error"
		}
	}
	return t
}

func (s *responsesAssembler) size() int {
	n := 0
	for i := 0; i < s.nitems; i++ {
		it := &s.items[i]
		n += 96 + len(it.raw) + len(it.args)
		for j := 0; j < it.np; j++ {
			n += 64 + len(it.parts[j].text)
		}
	}
	return n
}

// appendTo writes the item: as output_item.done sent it, or built from
// output_item.added and the deltas so far.
func (it *rsItem) appendTo(m []byte) []byte {
	raw := it.raw
	if len(raw) == 0 || !jsonscan.Valid(raw) {
		raw = []byte(`{}`)
	}
	if it.done {
		return append(m, raw...)
	}
	out := append([]byte(nil), raw...)
	typ := rawjson.Get(out, "type").String()
	if typ == "" {
		switch {
		case it.argsN:
			typ = "function_call"
		case it.hasGroup(groupSummary) || it.hasGroup(groupReasoning):
			typ = "reasoning"
		default:
			typ = "message"
		}
		out, _ = sjson.SetBytes(out, "type", typ)
		if typ == "message" {
			out, _ = sjson.SetBytes(out, "role", "assistant")
		}
	}
	if it.argsN {
		field := "arguments"
		if typ == "custom_tool_call" {
			field = "input"
		}
		out, _ = sjson.SetRawBytes(out, field, rawjson.AppendQuoted(nil, it.args))
	}
	switch typ {
	case "message":
		if it.hasGroup(groupContent) {
			out, _ = sjson.SetRawBytes(out, "content", it.partsJSON(groupContent))
		}
	case "reasoning":
		if it.hasGroup(groupSummary) {
			out, _ = sjson.SetRawBytes(out, "summary", it.partsJSON(groupSummary))
		}
		if it.hasGroup(groupReasoning) {
			out, _ = sjson.SetRawBytes(out, "content", it.partsJSON(groupReasoning))
		}
	}
	return append(m, out...)
}

func (it *rsItem) hasGroup(g uint8) bool {
	for i := 0; i < it.np; i++ {
		if it.parts[i].group == g {
			return true
		}
	}
	return false
}

// partsJSON writes the parts of a group, ordered by index.
func (it *rsItem) partsJSON(g uint8) []byte {
	var order []*rsPart
	for i := 0; i < it.np; i++ {
		if p := &it.parts[i]; p.group == g {
			order = append(order, p)
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i].index < order[j].index })
	b := []byte{'['}
	for i, p := range order {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":"`...)
		b = append(b, p.typ...)
		b = append(b, '"')
		switch p.typ {
		case "refusal":
			b = append(b, `,"refusal":`...)
		case "output_text":
			b = append(b, `,"annotations":[],"text":`...)
		default:
			b = append(b, `,"text":`...)
		}
		b = rawjson.AppendQuoted(b, p.text)
		b = append(b, '}')
	}
	return append(b, ']')
}

// Done implements Assembler.
func (s *responsesAssembler) Done() bool { return s.terminal }
