package adapters

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
)

// SkipSignature is Google's placeholder thought signature; like a missing or
// empty one, it counts as dropped and is replaced by the stored signature.
const SkipSignature = "skip_thought_signature_validator"

// Restored field names.
const (
	FieldReasoningContent = "reasoning_content"
	FieldThoughtSignature = "thought_signature"
)

// dropped reports whether a restorable field counts as dropped: missing,
// null, "" or Google's skip placeholder.
func dropped(r gjson.Result) bool {
	switch r.Type {
	case gjson.Null:
		return true
	case gjson.String:
		return r.Str == "" || r.Str == SkipSignature
	}
	return !r.Exists()
}

// usable reports whether a stored field is worth restoring.
func usable(r gjson.Result) bool { return r.Type == gjson.String && !dropped(r) }

// edit replaces incoming[start:end] with val.
type edit struct {
	start, end int
	val        []byte
}

// splice applies non-overlapping edits given in order. Bytes outside the
// edited ranges are copied unchanged.
func splice(src []byte, edits []edit) []byte {
	if len(edits) == 0 {
		return src
	}
	size := len(src)
	for _, e := range edits {
		size += len(e.val) - (e.end - e.start)
	}
	out := make([]byte, 0, size)
	prev := 0
	for _, e := range edits {
		out = append(out, src[prev:e.start]...)
		out = append(out, e.val...)
		prev = e.end
	}
	return append(out, src[prev:]...)
}

// setField sets path in msg (a private copy) to the raw value.
func setField(msg []byte, path string, raw string) ([]byte, error) {
	out, err := sjson.SetRawBytes(msg, path, []byte(raw))
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", path, err)
	}
	return out, nil
}

func elements(arr gjson.Result) []gjson.Result {
	var out []gjson.Result
	arr.ForEach(func(_, v gjson.Result) bool {
		out = append(out, v)
		return true
	})
	return out
}

// Restorable implements Adapter.
func (a *OpenAIChat) Restorable(stored []byte) bool {
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

// Restore implements Adapter for chat messages. An incoming assistant
// message matches a stored one by its tool-call ids; one without ids
// matches the stored assistant message at the same position among
// assistant messages when their content is canonically equal (text equal,
// function names equal, arguments equal as JSON values). From a match it
// restores reasoning_content where the dialect's policy for model wants it,
// and extra_content.google.thought_signature on the message and on each
// tool call (matched by id, else by position).
func (a *OpenAIChat) Restore(incoming, stored []byte, model string) ([]byte, []Restored, error) {
	if !a.Restorable(stored) {
		return incoming, nil, nil // nothing stored that could be restored: skip the walk
	}
	in := gjson.Parse(rawjson.Str(incoming))
	if !in.IsArray() {
		return incoming, nil, fmt.Errorf("restore: %w", ErrNoMessages)
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
	msgs := elements(in)
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
	var edits []edit
	var restored []Restored
	k := -1
	for i, m := range msgs {
		if m.Get("role").Str != "assistant" {
			continue
		}
		k++
		calls := elements(m.Get("tool_calls"))
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
			if sr := s.Get("reasoning_content"); usable(sr) && dropped(m.Get("reasoning_content")) {
				ensure()
				if msg, err = setField(msg, "reasoning_content", sr.Raw); err != nil {
					return incoming, nil, err
				}
				fields = append(fields, FieldReasoningContent)
			}
		}
		const sigPath = "extra_content.google.thought_signature"
		if sr := s.Get(sigPath); usable(sr) && dropped(m.Get(sigPath)) {
			ensure()
			if msg, err = setField(msg, sigPath, sr.Raw); err != nil {
				return incoming, nil, err
			}
			fields = append(fields, FieldThoughtSignature)
		}
		stCalls := elements(s.Get("tool_calls"))
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
			if sr := sc.Get(sigPath); sc.Exists() && usable(sr) && dropped(c.Get(sigPath)) {
				ensure()
				if msg, err = setField(msg, "tool_calls."+strconv.Itoa(j)+"."+sigPath, sr.Raw); err != nil {
					return incoming, nil, err
				}
				fields = append(fields, FieldThoughtSignature)
			}
		}
		if msg != nil {
			edits = append(edits, edit{m.Index, m.Index + len(m.Raw), msg})
			for _, f := range fields {
				restored = append(restored, Restored{Field: f, MessageIndex: i})
			}
		}
	}
	return splice(incoming, edits), restored, nil
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
		} else if !JSONEqual([]byte(ca.Raw), []byte(cb.Raw)) {
			return false
		}
	}
	xa, xb := elements(a.Get("tool_calls")), elements(b.Get("tool_calls"))
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
		return JSONEqual([]byte(a), []byte(b))
	}
	return false
}

// Restorable implements Adapter.
func (g *Gemini) Restorable(stored []byte) bool {
	return bytes.Contains(stored, []byte(`"thoughtSignature"`))
}

// Restore implements Adapter for Gemini contents. An incoming model Content
// matches a stored one by functionCall ids where it has them, else the
// stored model Content at the same position among model Contents when their
// non-thought parts are canonically equal (text equal, function names
// equal, args equal as JSON values). From a match it restores
// thoughtSignature on functionCall parts (aligned by order), on non-empty
// text parts and on thought parts (aligned by order when the counts agree).
// The model does not select anything: Gemini wants signatures back always.
func (g *Gemini) Restore(incoming, stored []byte, model string) ([]byte, []Restored, error) {
	if !g.Restorable(stored) {
		return incoming, nil, nil // no signature stored: nothing to restore
	}
	in := gjson.Parse(rawjson.Str(incoming))
	if !in.IsArray() {
		return incoming, nil, fmt.Errorf("restore: %w", ErrNoMessages)
	}
	st := gjson.Parse(rawjson.Str(stored))
	if !st.IsArray() {
		return incoming, nil, nil
	}
	var stModel []gjson.Result
	byCall := map[string]int{}
	st.ForEach(func(_, m gjson.Result) bool {
		if m.Get("role").Str != "model" {
			return true
		}
		m.Get("parts").ForEach(func(_, p gjson.Result) bool {
			if id := p.Get("functionCall.id").Str; id != "" {
				byCall[id] = len(stModel)
			}
			return true
		})
		stModel = append(stModel, m)
		return true
	})
	if len(stModel) == 0 {
		return incoming, nil, nil
	}
	var edits []edit
	var restored []Restored
	k, i := -1, -1
	var ferr error
	in.ForEach(func(_, m gjson.Result) bool {
		i++
		if m.Get("role").Str != "model" {
			return true
		}
		k++
		parts := elements(m.Get("parts"))
		var s gjson.Result
		found := false
		for _, p := range parts {
			if j, ok := byCall[p.Get("functionCall.id").Str]; ok {
				s, found = stModel[j], true
				break
			}
		}
		if !found && k < len(stModel) && geminiSame(parts, elements(stModel[k].Get("parts"))) {
			s, found = stModel[k], true
		}
		if !found {
			return true
		}
		stParts := elements(s.Get("parts"))
		var msg []byte
		n := 0
		for _, cls := range []partClass{classCall, classText, classThought} {
			a, b := partsOf(parts, cls), partsOf(stParts, cls)
			if len(a) != len(b) {
				continue
			}
			for x := range a {
				sr := stParts[b[x]].Get("thoughtSignature")
				if !usable(sr) || !dropped(parts[a[x]].Get("thoughtSignature")) {
					continue
				}
				if msg == nil {
					msg = append([]byte(nil), m.Raw...)
				}
				var err error
				if msg, err = setField(msg, "parts."+strconv.Itoa(a[x])+".thoughtSignature", sr.Raw); err != nil {
					ferr = err
					return false
				}
				n++
			}
		}
		if msg != nil {
			edits = append(edits, edit{m.Index, m.Index + len(m.Raw), msg})
			for range n {
				restored = append(restored, Restored{Field: FieldThoughtSignature, MessageIndex: i})
			}
		}
		return true
	})
	if ferr != nil {
		return incoming, nil, ferr
	}
	return splice(incoming, edits), restored, nil
}

type partClass uint8

const (
	classOther partClass = iota
	classCall
	classText    // non-empty, non-thought text
	classThought // thought text
	classEmpty   // empty text
)

func classify(p gjson.Result) partClass {
	switch {
	case p.Get("functionCall").Exists():
		return classCall
	case p.Get("text").Type == gjson.String:
		if p.Get("thought").Bool() {
			return classThought
		}
		if p.Get("text").Str == "" {
			return classEmpty
		}
		return classText
	}
	return classOther
}

// partsOf returns the indexes of the parts of one class.
func partsOf(parts []gjson.Result, cls partClass) []int {
	var out []int
	for i, p := range parts {
		if classify(p) == cls {
			out = append(out, i)
		}
	}
	return out
}

// geminiSame compares the non-thought, non-empty parts of two Contents.
func geminiSame(a, b []gjson.Result) bool {
	keep := func(ps []gjson.Result) []gjson.Result {
		var out []gjson.Result
		for _, p := range ps {
			if c := classify(p); c != classThought && c != classEmpty {
				out = append(out, p)
			}
		}
		return out
	}
	a, b = keep(a), keep(b)
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		ca, cb := classify(a[i]), classify(b[i])
		if ca != cb {
			return false
		}
		switch ca {
		case classCall:
			if a[i].Get("functionCall.name").Str != b[i].Get("functionCall.name").Str ||
				!JSONEqual([]byte(a[i].Get("functionCall.args").Raw), []byte(b[i].Get("functionCall.args").Raw)) &&
					(a[i].Get("functionCall.args").Exists() || b[i].Get("functionCall.args").Exists()) {
				return false
			}
		case classText:
			if a[i].Get("text").Str != b[i].Get("text").Str {
				return false
			}
		default:
			if !JSONEqual(withoutSig(a[i]), withoutSig(b[i])) {
				return false
			}
		}
	}
	return true
}

func withoutSig(p gjson.Result) []byte {
	b := []byte(p.Raw)
	if p.Get("thoughtSignature").Exists() {
		b, _ = sjson.DeleteBytes(b, "thoughtSignature")
	}
	return b
}
