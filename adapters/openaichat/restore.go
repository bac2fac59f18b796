package openaichat

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
	"github.com/tidwall/gjson"
)

// FieldReasoningContent is the Restored field of an OpenAI chat
// reasoning_content put back.
const FieldReasoningContent = "reasoning_content"

// Restorable implements adapters.Adapter.
func (a *Adapter) Restorable(stored []byte) bool {
	return hasQuoted(stored, reasoningKey, thoughtSignatureKey)
}

var (
	reasoningKey        = []byte(`"reasoning_content"`)
	thoughtSignatureKey = []byte(`"thought_signature"`)
)

// hasQuoted reports whether b holds any of the quoted names, checking
// only where a quote is (found with a vectorised search): one pass over a
// long message where bytes.Contains would make one per name.
func hasQuoted(b []byte, names ...[]byte) bool {
	for {
		i := bytes.IndexByte(b, '"')
		if i < 0 {
			return false
		}
		b = b[i:]
		for _, n := range names {
			if bytes.HasPrefix(b, n) {
				return true
			}
		}
		b = b[1:]
	}
}

// Restore implements adapters.Adapter for chat messages. An incoming assistant
// message matches a stored one by its tool-call ids; one without ids
// matches the stored assistant message at the same position among
// assistant messages when their content is canonically equal (text equal,
// function names equal, arguments equal as JSON values). From a match it
// restores reasoning_content where the dialect's policy for model wants it,
// and extra_content.google.thought_signature on the message and on each
// tool call (matched by id, else by position).
func (a *Adapter) Restore(incoming, stored []byte, model string) ([]byte, []adapters.Restored, error) {
	if !a.Restorable(stored) {
		return incoming, nil, nil // nothing stored that could be restored: skip the walk
	}
	in := gjson.Parse(rawjson.Str(incoming))
	if !in.IsArray() {
		return incoming, nil, fmt.Errorf("restore: %w", adapters.ErrNoMessages)
	}
	st := gjson.Parse(rawjson.Str(stored))
	if !st.IsArray() {
		return incoming, nil, nil
	}
	var stAsst []gjson.Result
	byCall := map[string]int{}
	st.ForEach(func(_, m gjson.Result) bool {
		if m.Get("role").Str != "assistant" {
			return true
		}
		m.Get("tool_calls").ForEach(func(_, c gjson.Result) bool {
			if id := c.Get("id").Str; id != "" {
				byCall[id] = len(stAsst)
			}
			return true
		})
		stAsst = append(stAsst, m)
		return true
	})
	if len(stAsst) == 0 {
		return incoming, nil, nil
	}
	policy := ReasoningNever
	if a.d.Reasoning != nil {
		policy = a.d.Reasoning(model)
	}
	msgs := adapters.Elements(in)
	// An exchange is the run of messages between two user messages.
	exchangeCalls := make([]bool, len(msgs))
	for i := 0; i < len(msgs); {
		j, calls := i, false
		for ; j < len(msgs); j++ {
			if j > i && msgs[j].Get("role").Str == "user" {
				break
			}
			if msgs[j].Get("tool_calls.#").Int() > 0 {
				calls = true
			}
		}
		for k := i; k < j; k++ {
			exchangeCalls[k] = calls
		}
		i = j
	}
	var edits []adapters.Replacement
	var restored []adapters.Restored
	k := -1
	for i, m := range msgs {
		if m.Get("role").Str != "assistant" {
			continue
		}
		k++
		calls := adapters.Elements(m.Get("tool_calls"))
		var s gjson.Result
		found := false
		for _, c := range calls {
			if j, ok := byCall[c.Get("id").Str]; ok {
				s, found = stAsst[j], true
				break
			}
		}
		if !found && k < len(stAsst) && !hasCallIDs(calls) && openAISame(m, stAsst[k]) {
			s, found = stAsst[k], true
		}
		if !found {
			continue
		}
		var msg []byte
		var fields []string
		ensure := func() { // copy-on-write
			if msg == nil {
				msg = append([]byte(nil), m.Raw...)
			}
		}
		var err error
		if policy == ReasoningAll || policy == ReasoningToolTurns && exchangeCalls[i] {
			if sr := s.Get("reasoning_content"); adapters.Usable(sr) && adapters.Dropped(m.Get("reasoning_content")) {
				ensure()
				if msg, err = adapters.SetField(msg, "reasoning_content", sr.Raw); err != nil {
					return incoming, nil, err
				}
				fields = append(fields, FieldReasoningContent)
			}
		}
		const sigPath = "extra_content.google.thought_signature"
		if sr := s.Get(sigPath); adapters.Usable(sr) && adapters.Dropped(m.Get(sigPath)) {
			ensure()
			if msg, err = adapters.SetField(msg, sigPath, sr.Raw); err != nil {
				return incoming, nil, err
			}
			fields = append(fields, adapters.FieldThoughtSignature)
		}
		stCalls := adapters.Elements(s.Get("tool_calls"))
		for j, c := range calls {
			var sc gjson.Result
			if id := c.Get("id").Str; id != "" {
				for _, x := range stCalls {
					if x.Get("id").Str == id {
						sc = x
						break
					}
				}
			} else if j < len(stCalls) {
				sc = stCalls[j]
			}
			if sr := sc.Get(sigPath); sc.Exists() && adapters.Usable(sr) && adapters.Dropped(c.Get(sigPath)) {
				ensure()
				if msg, err = adapters.SetField(msg, "tool_calls."+strconv.Itoa(j)+"."+sigPath, sr.Raw); err != nil {
					return incoming, nil, err
				}
				fields = append(fields, adapters.FieldThoughtSignature)
			}
		}
		if msg != nil {
			edits = append(edits, adapters.Replacement{Start: m.Index, End: m.Index + len(m.Raw), Val: msg})
			for _, f := range fields {
				restored = append(restored, adapters.Restored{Field: f, MessageIndex: i})
			}
		}
	}
	return adapters.Splice(incoming, edits), restored, nil
}

func hasCallIDs(calls []gjson.Result) bool {
	for _, c := range calls {
		if c.Get("id").Str != "" {
			return true
		}
	}
	return false
}

// openAISame compares two assistant messages canonically: content (null,
// "" and absent are equal), tool-call names, and arguments as JSON values.
func openAISame(a, b gjson.Result) bool {
	ca, cb := a.Get("content"), b.Get("content")
	if openAIEmptyText(ca) != openAIEmptyText(cb) {
		return false
	}
	if !openAIEmptyText(ca) {
		if ca.Type == gjson.String && cb.Type == gjson.String {
			if ca.Str != cb.Str {
				return false
			}
		} else if !adapters.JSONEqual([]byte(ca.Raw), []byte(cb.Raw)) {
			return false
		}
	}
	xa, xb := adapters.Elements(a.Get("tool_calls")), adapters.Elements(b.Get("tool_calls"))
	if len(xa) != len(xb) {
		return false
	}
	for i := range xa {
		if xa[i].Get("function.name").Str != xb[i].Get("function.name").Str {
			return false
		}
		if !argsEqual(xa[i].Get("function.arguments").Str, xb[i].Get("function.arguments").Str) {
			return false
		}
	}
	return true
}

// argsEqual compares tool arguments as JSON values when both parse, else
// as strings.
func argsEqual(a, b string) bool {
	if a == b {
		return true
	}
	if jsonscan.ValidString(a) && jsonscan.ValidString(b) {
		return adapters.JSONEqual([]byte(a), []byte(b))
	}
	return false
}
