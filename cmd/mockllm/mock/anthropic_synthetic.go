package mock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// The Anthropic synthetic answer (X-Mock-Scenario: synthetic), shaped by the
// request like the real model would answer it:
//
//   - thinking on (enabled/adaptive) and the request ends with a prompt (or
//     interleaved thinking: adaptive, or anthropic-beta
//     interleaved-thinking-2025-05-14): a signed thinking block first
//     (thinking_delta pieces, an empty thinking_delta, one signature_delta;
//     display "omitted": empty text, the signature only). The documented
//     magic string in the last user turn adds a redacted_thinking block
//     before it.
//   - a text block of X-Mock-Chunks "tok " deltas (3 without the header; a
//     text-only answer has at least one).
//   - client tools declared, tool_choice not none, and a prompt at the end
//     (or a forced tool_choice): X-Mock-Tool-Calls tool_use blocks (default 1,
//     at most 1 with disable_parallel_tool_use), input built from the
//     schema's required properties and streamed as input_json_delta
//     fragments (the first one ""), stop_reason tool_use.
//
// Ids (msg_01…, toolu_01…) derive from the request body: deterministic, and
// distinct across the turns of one conversation. Usage comes from the
// prompt-cache simulation (anthropic_cache.go): message_start carries the
// input and cache counts with output_tokens 1, message_delta the cumulative
// totals. Framing and key order are those of the fixtures.

// anthropicRedactedTrigger is the documented test prompt that makes the API
// return a redacted_thinking block (6.4).
const anthropicRedactedTrigger = "ANTHROPIC_MAGIC_STRING_TRIGGER_REDACTED_THINKING_46C9A13E193C177646C7398A98432ECCCE4C1253D5E2D82641AC0E52CC2876CB"

const synthThinking = "Let me work through the request step by step before answering."

type anthOut struct {
	typ       string
	thinking  string   // thinking: the text as emitted ("" when omitted)
	signature string   // thinking
	data      string   // redacted_thinking
	pieces    []string // thinking deltas or input_json fragments
	id, name  string   // tool_use
	input     string   // tool_use input as the model wrote it
}

type anthAnswer struct {
	model, id  string
	blocks     []anthOut
	textAt     int // index of the text block in blocks, -1 when none
	textN      int // its number of deltas
	stop       string
	input      int
	read       int
	w5m, w1h   int
	outputToks int
}

func jsonString(s string) string { return `"` + jsonEscape(s) + `"` }

// splitPieces cuts s into at most n pieces on rune boundaries.
func splitPieces(s string, n int) []string {
	var out []string
	for i := 0; i < n && s != ""; i++ {
		cut := len(s) / (n - i)
		if i == n-1 {
			cut = len(s)
		}
		for cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut++
		}
		if cut == 0 {
			cut = len(s)
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	return out
}

// synthToolInput writes an input object for a tool's schema: each required
// property with a value of its type (the first enum value when it has one),
// laid out like the model writes it (`{"city": "mock"}`).
func synthToolInput(tool gjson.Result) string {
	schema := tool.Get("input_schema")
	props := schema.Get("properties")
	var b strings.Builder
	b.WriteByte('{')
	i := 0
	schema.Get("required").ForEach(func(_, name gjson.Result) bool {
		var prop gjson.Result
		props.ForEach(func(k, v gjson.Result) bool {
			if k.String() == name.String() {
				prop = v
				return false
			}
			return true
		})
		if i > 0 {
			b.WriteString(", ")
		}
		i++
		b.WriteString(jsonString(name.String()))
		b.WriteString(": ")
		if e := prop.Get("enum.0"); e.Exists() {
			b.WriteString(e.Raw)
			return true
		}
		switch prop.Get("type").String() {
		case "string":
			b.WriteString(`"mock"`)
		case "integer", "number":
			b.WriteString("1")
		case "boolean":
			b.WriteString("true")
		case "array":
			b.WriteString("[]")
		case "object":
			b.WriteString("{}")
		default:
			b.WriteString("null")
		}
		return true
	})
	b.WriteByte('}')
	return b.String()
}

// lastTurnText reports whether the last user turn's text contains sub.
func (r *anthReq) lastTurnText(sub string) bool {
	if n := len(r.turns); n > 0 && r.turns[n-1].role == "user" {
		for _, b := range r.turns[n-1].blocks {
			if b.typ == "text" && strings.Contains(b.text(), sub) {
				return true
			}
		}
	}
	return false
}

// anthropicSynthetic plans the synthetic answer to h's request and runs the
// prompt-cache simulation for its usage.
func (h *handling) anthropicSynthetic() *anthAnswer {
	r := h.anth
	model := r.model.String()
	a := &anthAnswer{model: model, id: anthropicID("msg_01", string(h.body), 22), textAt: -1, stop: "end_turn"}
	prompt := r.lastIsPrompt()

	tools := r.callableTools()
	tc := r.toolChoice.Get("type").String()
	calls := 0
	if len(tools) > 0 && tc != "none" && (prompt || tc == "any" || tc == "tool") {
		calls = 1
		if h.k.toolCalls >= 0 {
			calls = h.k.toolCalls
		}
		if r.toolChoice.Get("disable_parallel_tool_use").Bool() {
			calls = min(calls, 1)
		}
		if tc == "tool" {
			name := r.toolChoice.Get("name").String()
			for _, t := range tools {
				if t.Get("name").String() == name {
					tools = []gjson.Result{t}
					break
				}
			}
		}
	}

	out := 0
	if r.thinkingOn() && (prompt || r.interleaved()) {
		if r.lastTurnText(anthropicRedactedTrigger) {
			idx := len(a.blocks)
			a.blocks = append(a.blocks, anthOut{typ: "redacted_thinking", data: anthropicSeal("redacted_thinking", model, nonceFor(a.id, idx), "")})
			out += 20
		}
		text := synthThinking
		var pieces []string
		if r.thinking.Get("display").String() == "omitted" {
			text = ""
		} else {
			pieces = append(splitPieces(text, 3), "")
		}
		idx := len(a.blocks)
		a.blocks = append(a.blocks, anthOut{typ: "thinking", thinking: text, pieces: pieces,
			signature: anthropicSeal("thinking", model, nonceFor(a.id, idx), text)})
		out += estimateTokens(len(synthThinking))
	}

	n := 3
	if h.k.chunksSet {
		n = h.k.chunks
	}
	if calls == 0 {
		n = max(n, 1)
	}
	if n > 0 {
		a.textAt, a.textN = len(a.blocks), n
		a.blocks = append(a.blocks, anthOut{typ: "text"})
		out += n
	}
	for i := range calls {
		t := tools[i%len(tools)]
		in := synthToolInput(t)
		a.blocks = append(a.blocks, anthOut{typ: "tool_use", id: anthropicID("toolu_01", a.id+"\x00"+fmt.Sprint(i), 22),
			name: t.Get("name").String(), input: in, pieces: append([]string{""}, splitPieces(in, 3)...)})
		out += estimateTokens(len(in)) + 8
	}
	if calls > 0 {
		a.stop = "tool_use"
	}
	a.outputToks = out

	segs := anthropicPrompt(r)
	total := 1
	if len(segs) > 0 {
		total = max(segs[len(segs)-1].tokens, 1)
	}
	minTokens := defaultCacheMinTokens
	if h.k.cacheMin >= 0 {
		minTokens = h.k.cacheMin
	}
	a.read, a.w5m, a.w1h = h.s.anth.cacheUsage(segs, minTokens)
	a.input = max(total-a.read-a.w5m-a.w1h, 0)
	return a
}

// refs are the thinking blocks of the answer, for the memory of emitted messages.
func (a *anthAnswer) refs() []thinkRef {
	var out []thinkRef
	for _, b := range a.blocks {
		switch b.typ {
		case "thinking":
			out = append(out, thinkRef{b.typ, b.signature})
		case "redacted_thinking":
			out = append(out, thinkRef{b.typ, b.data})
		}
	}
	return out
}

func (a *anthAnswer) fullUsage(output int) string {
	return fmt.Sprintf(`{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"cache_creation":{"ephemeral_5m_input_tokens":%d,"ephemeral_1h_input_tokens":%d},"output_tokens":%d,"service_tier":"standard","inference_geo":"not_available"}`,
		a.input, a.w5m+a.w1h, a.read, a.w5m, a.w1h, output)
}

func (a *anthAnswer) head(content string) string {
	return `{"model":` + jsonString(a.model) + `,"id":"` + a.id + `","type":"message","role":"assistant","content":[` + content + `],`
}

func (a *anthAnswer) text() string { return strings.Repeat(synthToken, a.textN) }

// json is the non-stream body: compact, key order as the fixtures.
func (a *anthAnswer) json() []byte {
	var c []string
	for _, b := range a.blocks {
		switch b.typ {
		case "thinking":
			c = append(c, `{"type":"thinking","thinking":`+jsonString(b.thinking)+`,"signature":"`+b.signature+`"}`)
		case "redacted_thinking":
			c = append(c, `{"type":"redacted_thinking","data":"`+b.data+`"}`)
		case "text":
			c = append(c, `{"type":"text","text":"`+a.text()+`"}`)
		case "tool_use":
			c = append(c, `{"type":"tool_use","id":"`+b.id+`","name":`+jsonString(b.name)+`,"input":`+compactJSON(b.input)+`}`)
		}
	}
	return []byte(a.head(strings.Join(c, ",")) + `"stop_reason":"` + a.stop + `","stop_sequence":null,"usage":` + a.fullUsage(a.outputToks) + `}`)
}

func compactJSON(s string) string {
	var buf bytes.Buffer
	if json.Compact(&buf, []byte(s)) != nil {
		return s
	}
	return buf.String()
}

func blockDelta(i int, delta string) []byte {
	return respEvent("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":%s}`, i, delta))
}

// events is the stream: head events, the text deltas (one pre-built event
// repeated, so allocations do not grow with X-Mock-Chunks), tail events.
func (a *anthAnswer) events() eventSource {
	s := &synthEvents{}
	cur := &s.head
	emit := func(ev []byte) { *cur = append(*cur, ev) }
	emit(respEvent("message_start", `{"type":"message_start","message":`+a.head("")+`"stop_reason":null,"stop_sequence":null,"usage":`+a.fullUsage(1)+`}}`))
	for i, b := range a.blocks {
		start := func(block string) {
			emit(respEvent("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":%s}`, i, block)))
			if i == 0 {
				emit(respEvent("ping", `{"type":"ping"}`))
			}
		}
		switch b.typ {
		case "thinking":
			start(`{"type":"thinking","thinking":"","signature":""}`)
			for _, p := range b.pieces {
				emit(blockDelta(i, `{"type":"thinking_delta","thinking":`+jsonString(p)+`}`))
			}
			emit(blockDelta(i, `{"type":"signature_delta","signature":"`+b.signature+`"}`))
		case "redacted_thinking":
			start(`{"type":"redacted_thinking","data":"` + b.data + `"}`)
		case "text":
			start(`{"type":"text","text":""}`)
			s.mid = blockDelta(i, `{"type":"text_delta","text":"`+synthToken+`"}`)
			s.n = a.textN
			cur = &s.tail
		case "tool_use":
			start(`{"type":"tool_use","id":"` + b.id + `","name":` + jsonString(b.name) + `,"input":{}}`)
			for _, p := range b.pieces {
				emit(blockDelta(i, `{"type":"input_json_delta","partial_json":`+jsonString(p)+`}`))
			}
		}
		emit(respEvent("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, i)))
	}
	emit(respEvent("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"%s","stop_sequence":null},"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":%d}}`,
		a.stop, a.input, a.w5m+a.w1h, a.read, a.outputToks)))
	emit(respEvent("message_stop", `{"type":"message_stop"}`))
	return s
}
