package repair

import (
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// oaMsg is the part of an OpenAI chat message repair looks at; the
// fields other than raw hold raw JSON values ("" when absent).
type oaMsg struct {
	raw        string
	role       string
	content    string
	toolCalls  string
	toolCallID string
	other      bool // a non-empty refusal, function_call or audio
}

func parseOA(v gjson.Result) oaMsg {
	m := oaMsg{raw: v.Raw}
	walkObject(v.Raw, func(k, val string) bool {
		switch k {
		case "role":
			m.role = strValue(val)
		case "content":
			m.content = val
		case "tool_calls":
			m.toolCalls = val
		case "tool_call_id":
			m.toolCallID = val
		case "refusal", "function_call", "audio":
			if !blankRaw(val) {
				m.other = true
			}
		}
		return true
	})
	return m
}

// blank reports whether v is absent, null, "" or an empty array or object.
func blank(v gjson.Result) bool {
	switch v.Type {
	case gjson.Null:
		return true
	case gjson.String:
		return v.Str == ""
	case gjson.JSON:
		return emptyContainer(v.Raw)
	}
	return false
}

// emptyContainer reports whether raw is [] or {} (with any whitespace).
func emptyContainer(raw string) bool {
	for i := 1; i < len(raw); i++ {
		if raw[i] > ' ' {
			return raw[i] == ']' || raw[i] == '}'
		}
	}
	return true
}

func (m *oaMsg) hasCalls() bool {
	return m.role == "assistant" && len(m.toolCalls) > 0 && m.toolCalls[0] == '[' && !emptyContainer(m.toolCalls)
}

func (m *oaMsg) empty() bool {
	return m.role == "assistant" && !m.hasCalls() && blankRaw(m.content) && !m.other
}

// oaValid is the fast scan: it reports whether the history needs no edit,
// without allocating for histories with at most 256 calls in total and 16
// in one turn.
func oaValid(arr gjson.Result) bool {
	c := getCheck()
	defer putCheck(c)
	ok := true
	eachElement(arr, func(v gjson.Result) bool {
		m := parseOA(v)
		if m.role == "tool" {
			ok = c.result(strValue(m.toolCallID))
			return ok
		}
		if ok = c.next(); !ok {
			return false
		}
		if m.hasCalls() {
			gjson.Parse(m.toolCalls).ForEach(func(_, call gjson.Result) bool {
				ok = c.call(strValue(call.Get("id").Raw))
				return ok
			})
			c.inBlock = true
			return ok
		}
		if m.empty() {
			ok = false
		}
		return ok
	})
	return ok && c.done()
}

// OpenAIChat repairs an OpenAI chat `messages` array (also DeepSeek and
// other OpenAI-compatible endpoints). See the package documentation for
// the rules.
func OpenAIChat(messages []byte, opts Options) (Result, error) {
	arr, err := parseArray(messages, opts.Valid)
	if err != nil {
		return Result{}, err
	}
	if oaValid(arr) {
		return Result{Messages: messages}, nil
	}
	return oaRepair(messages, arr, &opts), nil
}

func oaRepair(input []byte, arr gjson.Result, opts *Options) Result {
	var msgs []oaMsg
	eachElement(arr, func(v gjson.Result) bool {
		msgs = append(msgs, parseOA(v))
		return true
	})
	n := len(msgs)
	dropped := make([]bool, n)
	resAt := make([]int, n) // result index of a tool message, else -1
	turnCalls := make([][]int, n)
	var g graph
	for i := range msgs {
		m := &msgs[i]
		resAt[i] = -1
		switch {
		case m.empty():
			dropped[i] = true
		case m.hasCalls():
			gjson.Parse(m.toolCalls).ForEach(func(k, c gjson.Result) bool {
				turnCalls[i] = append(turnCalls[i], len(g.calls))
				g.calls = append(g.calls, call{msg: i, part: int(k.Num), id: strValue(c.Get("id").Raw),
					name: c.Get("function.name").Str, hasID: true, res: -1})
				return true
			})
		case m.role == "tool":
			resAt[i] = len(g.results)
			g.results = append(g.results, result{msg: i, part: -1, id: strValue(m.toolCallID), hasID: true, call: -1})
		}
	}
	g.match()

	var res Result
	out := make([]byte, 0, len(input)+256)
	out = append(out, '[')
	emit := func(b string) {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, b...)
	}
	emitResult := func(ri int) {
		r := &g.results[ri]
		raw := msgs[r.msg].raw
		if id := g.finalID(ri); id != r.id {
			raw, _ = sjson.Set(raw, "tool_call_id", id)
		}
		emit(raw)
	}
	emitOrphan := func(ri int) {
		r := &g.results[ri]
		emit(str(oaOrphan(gjson.Parse(msgs[r.msg].content), r.id)))
		res.Edits = append(res.Edits, Edit{Kind: KindOrphanResult, CallID: clone(r.id)})
	}
	for i := 0; i < n; i++ {
		switch {
		case dropped[i]:
			res.Edits = append(res.Edits, Edit{Kind: KindDroppedEmpty})
		case resAt[i] >= 0:
			if g.results[resAt[i]].call < 0 {
				emitOrphan(resAt[i])
			} // else it is moved to its call's block
		case turnCalls[i] != nil:
			raw := msgs[i].raw
			for _, ci := range turnCalls[i] {
				c := &g.calls[ci]
				if c.newID != c.id {
					raw, _ = sjson.Set(raw, "tool_calls."+strconv.Itoa(c.part)+".id", c.newID)
					res.Edits = append(res.Edits, Edit{Kind: KindRenamedID, CallID: clone(c.newID), Name: clone(c.name)})
				}
			}
			emit(raw)
			j := i + 1
			for j < n && (dropped[j] || resAt[j] >= 0) {
				j++
			}
			inRun := func(ri int) bool { m := g.results[ri].msg; return m > i && m < j }
			for k := i + 1; k < j; k++ {
				if dropped[k] {
					res.Edits = append(res.Edits, Edit{Kind: KindDroppedEmpty})
					continue
				}
				if ci := g.results[resAt[k]].call; ci >= 0 && g.calls[ci].msg == i {
					emitResult(resAt[k])
				}
			}
			for _, ci := range turnCalls[i] {
				c := &g.calls[ci]
				switch {
				case c.res >= 0 && inRun(c.res):
				case c.res >= 0:
					emitResult(c.res)
					res.Edits = append(res.Edits, Edit{Kind: KindMovedResult, CallID: clone(c.newID), Name: clone(c.name)})
				default:
					var b []byte
					b = append(b, `{"role":"tool","tool_call_id":`...)
					b = appendString(b, c.newID)
					b = append(b, `,"content":`...)
					b = appendString(b, interruptedText(c.name, opts))
					b = append(b, '}')
					emit(str(b))
					res.Edits = append(res.Edits, Edit{Kind: KindSyntheticResult, CallID: clone(c.newID), Name: clone(c.name)})
					res.Interrupted = append(res.Interrupted, Call{ID: clone(c.newID), Name: clone(c.name)})
				}
			}
			for k := i + 1; k < j; k++ {
				if !dropped[k] && g.results[resAt[k]].call < 0 {
					emitOrphan(resAt[k])
				}
			}
			i = j - 1
		default:
			emit(msgs[i].raw)
		}
	}
	if len(res.Edits) == 0 {
		return Result{Messages: input}
	}
	out = append(out, ']')
	res.Messages = out
	res.Changed = true
	return res
}

// oaOrphan builds the user note that replaces a tool message whose call is
// missing, carrying its content.
func oaOrphan(content gjson.Result, id string) []byte {
	h := orphanHeader(id)
	b := []byte(`{"role":"user","content":`)
	switch {
	case content.Type == gjson.String:
		b = appendString(b, h+"\n"+content.Str)
	case content.IsArray() && !emptyContainer(content.Raw):
		b = append(b, `[{"type":"text","text":`...)
		b = appendString(b, h)
		b = append(b, `},`...)
		b = append(b, content.Raw[1:]...) // the original parts, then ']'
	case blank(content):
		b = appendString(b, h)
	default:
		b = appendString(b, h+"\n"+content.Raw)
	}
	return append(b, '}')
}
