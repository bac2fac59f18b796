package anthropic

import (
	"bytes"
	"fmt"

	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
)

// The Restored fields of this format.
const (
	FieldThinking         = "thinking"
	FieldRedactedThinking = "redacted_thinking"
)

// Restorable implements adapters.Adapter: a stored message with a signed
// thinking or a redacted_thinking block.
func (a *Adapter) Restorable(stored []byte) bool {
	return bytes.Contains(stored, []byte(`"signature"`)) || bytes.Contains(stored, []byte(`"redacted_thinking"`))
}

// storedTurn is a stored assistant message that carries thinking.
type storedTurn struct {
	thinking []string // its leading thinking/redacted_thinking blocks, raw
	text     string   // its text blocks joined, for matching by content
	calls    string   // its tool_use ids joined, for matching by content
	pos      int      // among the stored assistant messages
}

// Restore implements adapters.Adapter. An incoming assistant message
// matches a stored one by its tool_use ids, else the stored assistant
// message at the same position among assistant messages whose text and
// tool_use ids are the same. From a match, the thinking and redacted_thinking blocks that lead
// the stored message are put back, byte for byte, where the incoming one
// dropped them, emptied them or changed their text or signature (the API
// refuses a signed block that differs in any way from what it returned;
// blocks that are only re-encoded with the same values are left as sent).
// Every matched message gets them back, not only the current tool loop's
// (where the API requires them): a thread's later turns then send the
// same prefix, and the prompt cache keeps hitting. Never restored into a
// message in the final position (a prefill, where thinking is refused
// unless the request enables it), nor into a message whose content is a
// string. The model selects nothing: signatures are checked per model,
// and a thread is matched against its own stored turns.
func (a *Adapter) Restore(incoming, stored []byte, model string) ([]byte, []adapters.Restored, error) {
	if !a.Restorable(stored) {
		return incoming, nil, nil
	}
	in := gjson.Parse(rawjson.Str(incoming))
	if !in.IsArray() {
		return incoming, nil, fmt.Errorf("restore: %w", adapters.ErrNoMessages)
	}
	st := gjson.Parse(rawjson.Str(stored))
	if !st.IsArray() {
		return incoming, nil, nil
	}
	var turns []storedTurn
	byCall := map[string]int{}
	pos := 0
	st.ForEach(func(_, m gjson.Result) bool {
		if m.Get("role").Str != "assistant" {
			return true
		}
		t := storedTurn{pos: pos}
		pos++
		leading := true
		m.Get("content").ForEach(func(_, b gjson.Result) bool {
			switch typ := b.Get("type").Str; {
			case leading && (typ == "thinking" || typ == "redacted_thinking"):
				t.thinking = append(t.thinking, b.Raw)
				return true
			case typ == "tool_use":
				if id := b.Get("id").Str; id != "" {
					byCall[id] = len(turns)
				}
				t.calls += b.Get("id").Str + "\x00"
			case typ == "text":
				t.text += b.Get("text").Str
			}
			leading = false
			return true
		})
		turns = append(turns, t)
		return true
	})
	if len(turns) == 0 {
		return incoming, nil, nil
	}
	var edits []adapters.Replacement
	var restored []adapters.Restored
	n := len(in.Array())
	idx, apos := -1, -1
	in.ForEach(func(_, m gjson.Result) bool {
		idx++
		if m.Get("role").Str != "assistant" {
			return true
		}
		apos++
		content := m.Get("content")
		if idx == n-1 || !content.IsArray() {
			return true
		}
		var lead, rest []string
		var text, calls string
		match := -1
		leading := true
		content.ForEach(func(_, b gjson.Result) bool {
			typ := b.Get("type").Str
			if leading && (typ == "thinking" || typ == "redacted_thinking") {
				lead = append(lead, b.Raw)
				return true
			}
			leading = false
			switch typ {
			case "tool_use":
				if j, ok := byCall[b.Get("id").Str]; ok && match < 0 {
					match = j
				}
				calls += b.Get("id").Str + "\x00"
			case "text":
				text += b.Get("text").Str
			}
			rest = append(rest, b.Raw)
			return true
		})
		if match < 0 {
			for j := range turns {
				if turns[j].pos == apos && turns[j].text == text && turns[j].calls == calls {
					match = j
					break
				}
			}
		}
		if match < 0 || len(turns[match].thinking) == 0 || sameBlocks(lead, turns[match].thinking) {
			return true
		}
		want := turns[match].thinking
		msg := make([]byte, 0, len(m.Raw)+len(want)*256)
		msg = append(msg, '[')
		for i, b := range want {
			if i > 0 {
				msg = append(msg, ',')
			}
			msg = append(msg, b...)
		}
		for _, b := range rest {
			msg = append(msg, ',')
			msg = append(msg, b...)
		}
		msg = append(msg, ']')
		out, err := adapters.SetField([]byte(m.Raw), "content", rawjson.Str(msg))
		if err != nil {
			return true
		}
		edits = append(edits, adapters.Replacement{Start: m.Index, End: m.Index + len(m.Raw), Val: out})
		field := FieldThinking
		for _, b := range want {
			if gjson.Get(b, "type").Str == "redacted_thinking" {
				field = FieldRedactedThinking
				break
			}
		}
		restored = append(restored, adapters.Restored{Field: field, MessageIndex: idx})
		return true
	})
	if len(edits) == 0 {
		return incoming, nil, nil
	}
	return adapters.Splice(incoming, edits), restored, nil
}

// sameBlocks reports whether the thinking blocks sent are the stored
// ones: as many, each equal as a JSON value.
func sameBlocks(sent, stored []string) bool {
	if len(sent) != len(stored) {
		return false
	}
	for i := range sent {
		if sent[i] != stored[i] && !adapters.JSONEqual(rawjson.BytesOf(sent[i]), rawjson.BytesOf(stored[i])) {
			return false
		}
	}
	return true
}
