package responses

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
	"github.com/tidwall/gjson"
)

// Restored field names of the Responses adapter.
const (
	// FieldReasoning is a reasoning item inserted back before the
	// function call or assistant message that followed it.
	FieldReasoning = "reasoning"
	// FieldEncryptedContent is encrypted_content put back on a reasoning
	// item the client sent without it.
	FieldEncryptedContent = "encrypted_content"
)

// Restorable implements adapters.Adapter.
func (a *Adapter) Restorable(stored []byte) bool {
	return bytes.Contains(stored, []byte(`"reasoning"`))
}

// Restore implements adapters.Adapter for Responses input items. It puts back
// reasoning items a client dropped and encrypted_content a client
// stripped, taking them from the stored thread's items:
//
//   - An incoming function_call (or custom_tool_call) matches a stored one
//     by call_id; the stored reasoning item right before the stored call's
//     run of calls is inserted before the incoming call's run of calls
//     when the incoming input does not hold it (by id) and no reasoning
//     item already stands there.
//   - An incoming assistant message matches a stored one by its id, else
//     by position among assistant messages when their text is equal; the
//     stored reasoning item right before it is inserted the same way.
//   - A reasoning item whose id names a stored reasoning item gets the
//     stored encrypted_content when its own is missing, null or "".
//
// Each inserted item is reported as FieldReasoning and each restored
// encrypted_content as FieldEncryptedContent, with its index in the
// returned array. The model does not select anything. Bytes outside the
// edits are kept; incoming itself is returned when nothing changed.
func (a *Adapter) Restore(incoming, stored []byte, model string) ([]byte, []adapters.Restored, error) {
	if !a.Restorable(stored) {
		return incoming, nil, nil // no reasoning item stored: nothing to restore
	}
	in := gjson.Parse(rawjson.Str(incoming))
	if !in.IsArray() {
		return incoming, nil, fmt.Errorf("restore: %w", adapters.ErrNoMessages)
	}
	st := gjson.Parse(rawjson.Str(stored))
	if !st.IsArray() {
		return incoming, nil, nil
	}
	stItems := adapters.Elements(st)
	stKinds := make([]itemKind, len(stItems))
	hasReasoning := false
	for i, it := range stItems {
		_, stKinds[i] = respItemType(it)
		hasReasoning = hasReasoning || stKinds[i] == kindReasoning
	}
	if !hasReasoning {
		return incoming, nil, nil
	}
	rsByID := map[string]int{}
	callRs := map[string]int{} // call_id → stored reasoning index, -1 for none
	type stMsg struct {
		item gjson.Result
		rs   int
	}
	var stAsst []stMsg
	msgByID := map[string]int{}
	for i, it := range stItems {
		switch stKinds[i] {
		case kindReasoning:
			if id := it.Get("id").Str; id != "" {
				rsByID[id] = i
			}
		case kindCall:
			j := i - 1
			for j >= 0 && stKinds[j] == kindCall {
				j--
			}
			rs := -1
			if j >= 0 && stKinds[j] == kindReasoning {
				rs = j
			}
			if id := it.Get("call_id").Str; id != "" {
				callRs[id] = rs
			}
		case kindMessage:
			if it.Get("role").Str != "assistant" {
				continue
			}
			rs := -1
			if i > 0 && stKinds[i-1] == kindReasoning {
				rs = i - 1
			}
			if id := it.Get("id").Str; id != "" {
				msgByID[id] = len(stAsst)
			}
			stAsst = append(stAsst, stMsg{it, rs})
		}
	}
	inItems := adapters.Elements(in)
	inKinds := make([]itemKind, len(inItems))
	inRs := map[string]bool{}
	for i, it := range inItems {
		_, inKinds[i] = respItemType(it)
		if inKinds[i] == kindReasoning {
			if id := it.Get("id").Str; id != "" {
				inRs[id] = true
			}
		}
	}
	var edits []adapters.Replacement
	var restored []adapters.Restored
	inserted := map[int]bool{}
	shift, k := 0, -1
	for i, it := range inItems {
		rs, at := -1, i
		switch inKinds[i] {
		case kindReasoning:
			j, ok := rsByID[it.Get("id").Str]
			if !ok {
				continue
			}
			sr := stItems[j].Get("encrypted_content")
			if !adapters.Usable(sr) || !adapters.Dropped(it.Get("encrypted_content")) {
				continue
			}
			msg, err := adapters.SetField([]byte(it.Raw), "encrypted_content", sr.Raw)
			if err != nil {
				return incoming, nil, err
			}
			edits = append(edits, adapters.Replacement{Start: it.Index, End: it.Index + len(it.Raw), Val: msg})
			restored = append(restored, adapters.Restored{Field: FieldEncryptedContent, MessageIndex: i + shift})
		case kindCall:
			j, ok := callRs[it.Get("call_id").Str]
			if !ok || j < 0 {
				continue
			}
			rs = j
			// Back to the start of the run of calls that share this
			// reasoning item (or are unknown to the stored thread).
			for at > 0 && inKinds[at-1] == kindCall {
				if p, ok := callRs[inItems[at-1].Get("call_id").Str]; ok && p != rs {
					break
				}
				at--
			}
		case kindMessage:
			if it.Get("role").Str != "assistant" {
				continue
			}
			k++
			m, ok := msgByID[it.Get("id").Str]
			if !ok {
				if k >= len(stAsst) || it.Get("id").Str != "" && stAsst[k].item.Get("id").Str != "" ||
					!responsesSameText(it.Get("content"), stAsst[k].item.Get("content")) {
					continue
				}
				m = k
			}
			rs = stAsst[m].rs
		}
		if rs < 0 || inserted[rs] {
			continue
		}
		srs := stItems[rs]
		if id := srs.Get("id").Str; id != "" && inRs[id] || at > 0 && inKinds[at-1] == kindReasoning {
			continue
		}
		inserted[rs] = true
		val := make([]byte, 0, len(srs.Raw)+1)
		val = append(append(val, srs.Raw...), ',')
		pos := inItems[at].Index
		edits = append(edits, adapters.Replacement{Start: pos, End: pos, Val: val})
		restored = append(restored, adapters.Restored{Field: FieldReasoning, MessageIndex: at + shift})
		shift++
	}
	return adapters.Splice(incoming, edits), restored, nil
}

// responsesSameText compares two message contents by their text: a string
// content, or the concatenated text and refusal of its parts.
func responsesSameText(a, b gjson.Result) bool {
	return responsesText(a) == responsesText(b)
}

func responsesText(c gjson.Result) string {
	if c.Type == gjson.String {
		return c.Str
	}
	var sb strings.Builder
	c.ForEach(func(_, p gjson.Result) bool {
		sb.WriteString(p.Get("text").Str)
		if r := p.Get("refusal").Str; r != "" {
			sb.WriteString("\x00refusal:")
			sb.WriteString(r)
		}
		return true
	})
	return sb.String()
}
