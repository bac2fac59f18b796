package anthropic

import (
	"bytes"
	"fmt"

	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
)

// NewAssembler implements adapters.Adapter.
func (a *Adapter) NewAssembler() adapters.Assembler { return &assembler{} }

// Block kinds the assembler builds from deltas; every other block is kept
// whole as its content_block_start gave it.
const (
	kindOpaque = iota
	kindText
	kindThinking
	kindToolUse       // tool_use and server_tool_use: input from input_json_delta
	kindRedacted      // redacted_thinking: whole at its start
	kindTextCitations // text with citations_delta
)

// block is one content block being assembled. Its byte slices are reused
// across Reset.
type block struct {
	kind  int
	index int64
	// start is the content_block_start's block, raw (opaque blocks,
	// redacted_thinking, and a tool_use's id, name and type).
	start []byte
	// text is the text or thinking, still JSON-escaped (deltas'
	// escapes are whole, so escaped pieces join into a valid string).
	text []byte
	// sig is the thinking's signature, escaped.
	sig []byte
	// input is a tool_use's input JSON, joined from partial_json pieces,
	// still escaped as a JSON string's content.
	input []byte
	// citations are the raw citation objects of a text block.
	citations []byte
}

// assembler builds the assistant message of a Messages stream as the
// SDKs' accumulators do (Message.Accumulate, finalMessage()): blocks in
// index order; text and thinking joined from their deltas; the signature
// from signature_delta; tool_use input from input_json_delta fragments
// (none: the start's input, {}); redacted_thinking and server tool blocks
// kept whole. Usage is message_start's, overwritten field by field by
// message_delta's (cumulative).
type assembler struct {
	blocks []block
	n      int
	u      usage
	stop   []byte
	errRaw []byte
	done   bool
	ended  bool // message_stop seen
	calls  int
	model  []byte // message_start's message.model
}

// Reset implements adapters.Assembler.
func (s *assembler) Reset() {
	s.n = 0
	s.u = usage{}
	s.stop = s.stop[:0]
	s.errRaw = s.errRaw[:0]
	s.done, s.ended = false, false
	s.calls = 0
	s.model = s.model[:0]
}

// Done implements adapters.Assembler: message_stop, or an error event.
func (s *assembler) Done() bool { return s.done }

// Feed implements adapters.Assembler for one event's data.
func (s *assembler) Feed(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' || !jsonscan.Valid(data) {
		return fmt.Errorf("anthropic event: %w", adapters.ErrInvalidJSON)
	}
	ev := rawjson.Str(data)
	switch rawjson.String(rawjson.MemberRaw(ev, `"type"`)) {
	case "message_start":
		msg := rawjson.MemberRaw(ev, `"message"`)
		s.u.take(gjson.Parse(rawjson.MemberRaw(msg, `"usage"`)))
		s.model = adapters.AppendResponseModel(s.model, rawjson.MemberRaw(msg, `"model"`))
	case "content_block_start":
		s.startBlock(rawjson.Int(rawjson.MemberRaw(ev, `"index"`)), rawjson.MemberRaw(ev, `"content_block"`))
	case "content_block_delta":
		if b := s.block(rawjson.Int(rawjson.MemberRaw(ev, `"index"`))); b != nil {
			b.delta(rawjson.MemberRaw(ev, `"delta"`))
		}
	case "message_delta":
		if r := rawjson.MemberRaw(rawjson.MemberRaw(ev, `"delta"`), `"stop_reason"`); rawjson.IsString(r) {
			s.stop = append(s.stop[:0], rawjson.Unquote(r)...)
		}
		s.u.take(gjson.Parse(rawjson.MemberRaw(ev, `"usage"`)))
	case "message_stop":
		s.done, s.ended = true, true
	case "error":
		s.errRaw = append(s.errRaw[:0], rawjson.MemberRaw(ev, `"error"`)...)
		s.done = true
	}
	return nil
}

// startBlock opens block index from its content_block_start.
func (s *assembler) startBlock(index int64, cb string) {
	if !rawjson.IsObject(cb) {
		return
	}
	if s.n == len(s.blocks) {
		s.blocks = append(s.blocks, block{})
	}
	b := &s.blocks[s.n]
	s.n++
	b.index = index
	b.start = append(b.start[:0], cb...)
	b.text, b.sig, b.input, b.citations = b.text[:0], b.sig[:0], b.input[:0], b.citations[:0]
	switch rawjson.String(rawjson.MemberRaw(cb, `"type"`)) {
	case "text":
		b.kind = kindText
		b.text = appendInner(b.text, rawjson.MemberRaw(cb, `"text"`))
	case "thinking":
		b.kind = kindThinking
		b.text = appendInner(b.text, rawjson.MemberRaw(cb, `"thinking"`))
		b.sig = appendInner(b.sig, rawjson.MemberRaw(cb, `"signature"`))
	case "tool_use", "server_tool_use":
		b.kind = kindToolUse
		if rawjson.String(rawjson.MemberRaw(cb, `"type"`)) == "tool_use" {
			s.calls++
		}
	case "redacted_thinking":
		b.kind = kindRedacted
	default:
		b.kind = kindOpaque
	}
}

// block is the open block of index, or nil.
func (s *assembler) block(index int64) *block {
	for i := s.n - 1; i >= 0; i-- {
		if s.blocks[i].index == index {
			return &s.blocks[i]
		}
	}
	return nil
}

// delta applies one content_block_delta's delta.
func (b *block) delta(d string) {
	switch rawjson.String(rawjson.MemberRaw(d, `"type"`)) {
	case "text_delta":
		b.text = appendInner(b.text, rawjson.MemberRaw(d, `"text"`))
	case "thinking_delta":
		b.text = appendInner(b.text, rawjson.MemberRaw(d, `"thinking"`))
	case "signature_delta":
		b.sig = appendInner(b.sig, rawjson.MemberRaw(d, `"signature"`))
	case "input_json_delta":
		// Kept escaped, as the pieces came; decoded once, in Result.
		b.input = appendInner(b.input, rawjson.MemberRaw(d, `"partial_json"`))
	case "citations_delta":
		if c := rawjson.MemberRaw(d, `"citation"`); c != "" {
			if len(b.citations) > 0 {
				b.citations = append(b.citations, ',')
			}
			b.citations = append(b.citations, c...)
			if b.kind == kindText {
				b.kind = kindTextCitations
			}
		}
	}
}

// stringOr is v when it is a JSON string, else "" (a broken start block
// still assembles into valid JSON).
func stringOr(v string) string {
	if rawjson.IsString(v) {
		return v
	}
	return `""`
}

// appendInner appends the inside of the JSON string raw (escapes kept).
func appendInner(dst []byte, raw string) []byte {
	if len(raw) >= 2 && raw[0] == '"' {
		return append(dst, raw[1:len(raw)-1]...)
	}
	return dst
}

// appendBlock appends block b as the client sends it back.
func (b *block) appendTo(dst []byte) []byte {
	switch b.kind {
	case kindText, kindTextCitations:
		dst = append(dst, `{"type":"text","text":"`...)
		dst = append(dst, b.text...)
		dst = append(dst, '"')
		if b.kind == kindTextCitations {
			dst = append(dst, `,"citations":[`...)
			dst = append(dst, b.citations...)
			dst = append(dst, ']')
		}
		return append(dst, '}')
	case kindThinking:
		dst = append(dst, `{"type":"thinking","thinking":"`...)
		dst = append(dst, b.text...)
		dst = append(dst, `","signature":"`...)
		dst = append(dst, b.sig...)
		return append(dst, `"}`...)
	case kindToolUse:
		start := rawjson.Str(b.start)
		dst = append(dst, `{"type":`...)
		dst = append(dst, stringOr(rawjson.MemberRaw(start, `"type"`))...)
		dst = append(dst, `,"id":`...)
		dst = append(dst, stringOr(rawjson.MemberRaw(start, `"id"`))...)
		dst = append(dst, `,"name":`...)
		dst = append(dst, stringOr(rawjson.MemberRaw(start, `"name"`))...)
		dst = append(dst, `,"input":`...)
		var in []byte
		if len(b.input) > 0 {
			q := make([]byte, 0, len(b.input)+2)
			q = append(append(append(q, '"'), b.input...), '"')
			in = bytes.TrimSpace(rawjson.BytesOf(gjson.ParseBytes(q).Str))
		}
		switch {
		case len(in) > 0 && jsonscan.Valid(in):
			dst = rawjson.Compact(dst, in)
		case rawjson.IsObject(rawjson.MemberRaw(start, `"input"`)) && len(in) == 0:
			dst = append(dst, rawjson.MemberRaw(start, `"input"`)...)
		default:
			// A cut stream leaves a partial input: the call cannot be
			// sent back as it is, so it goes as an empty object.
			dst = append(dst, `{}`...)
		}
		return append(dst, '}')
	}
	return rawjson.Compact(dst, b.start)
}

// Result implements adapters.Assembler.
func (s *assembler) Result() adapters.Turn {
	t := adapters.Turn{Terminal: s.ended, Usage: s.u.usage(), Model: string(s.model)}
	size := 32
	for i := range s.n {
		b := &s.blocks[i]
		size += len(b.start) + len(b.text) + len(b.sig) + len(b.input) + len(b.citations) + 48
	}
	msg := make([]byte, 0, size)
	msg = append(msg, `{"role":"assistant","content":[`...)
	if s.calls > 0 {
		t.ToolCalls = make([]adapters.ToolCall, 0, s.calls)
	}
	first := true
	for i := range s.n {
		b := &s.blocks[i]
		if b.kind == kindText && len(b.text) == 0 {
			// The API refuses an empty text block sent back.
			continue
		}
		if !first {
			msg = append(msg, ',')
		}
		first = false
		msg = b.appendTo(msg)
		if b.kind == kindToolUse {
			start := rawjson.Str(b.start)
			if rawjson.String(rawjson.MemberRaw(start, `"type"`)) == "tool_use" {
				t.ToolCalls = append(t.ToolCalls, adapters.ToolCall{ID: rawjson.String(rawjson.MemberRaw(start, `"id"`)), Name: rawjson.String(rawjson.MemberRaw(start, `"name"`))})
			}
		}
	}
	t.Message = append(msg, `]}`...)
	t.FinishRaw = string(s.stop)
	t.Finish = finishOf(t.FinishRaw)
	if len(s.errRaw) > 0 {
		t.Error = bytes.Clone(s.errRaw)
		t.Finish = adapters.FinishError
	}
	return t
}
