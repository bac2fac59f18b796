package repair

import (
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Responses item kinds.
const (
	riOther = iota
	riCall
	riOutput
	riReasoning
)

// rsItem is the part of an OpenAI Responses input item repair looks at.
type rsItem struct {
	raw     string
	kind    int
	callID  string
	name    string
	output  string // raw function_call_output.output
	empty   bool   // an assistant message with no content
	content string
}

func parseRS(v gjson.Result) rsItem {
	it := rsItem{raw: v.Raw}
	var typ, role string
	walkObject(v.Raw, func(k, val string) bool {
		switch k {
		case "type":
			typ = strValue(val)
		case "role":
			role = strValue(val)
		case "call_id":
			it.callID = strValue(val)
		case "name":
			it.name = strValue(val)
		case "output":
			it.output = val
		case "content":
			it.content = val
		}
		return true
	})
	switch typ {
	case "function_call":
		it.kind = riCall
	case "function_call_output":
		it.kind = riOutput
	case "reasoning":
		it.kind = riReasoning
	case "", "message":
		it.empty = role == "assistant" && blankRaw(it.content)
	}
	return it
}

// inRun reports whether the item belongs to a call run: consecutive
// function_call items, with the reasoning items among them.
func (it *rsItem) inRun() bool { return it.kind == riCall || it.kind == riReasoning }

// rsValid is the fast scan for Responses input items.
func rsValid(arr gjson.Result) bool {
	c := getCheck()
	defer putCheck(c)
	set, p := &c.set, &c.p
	ok, inBlock := true, false
	eachElement(arr, func(v gjson.Result) bool {
		it := parseRS(v)
		switch {
		case it.inRun():
			if inBlock {
				ok = p.open == 0
				p.reset()
				inBlock = false
			}
			if it.kind == riCall {
				ok = ok && !set.add(it.callID)
				p.add(it.callID, "", true)
			}
		case it.kind == riOutput:
			inBlock = true
			ok = p.n > 0 && p.answer(it.callID, "", true)
		default:
			ok = p.open == 0 && !it.empty
			p.reset()
			inBlock = false
		}
		return ok
	})
	return ok && p.open == 0
}

// Responses repairs an OpenAI Responses `input` item array: function_call
// items are calls, function_call_output items their results (matched by
// call_id). A call turn is a run of consecutive function_call items (with
// the reasoning items among them); its block is the run of
// function_call_output items right after it. See the package
// documentation for the rules.
func Responses(items []byte, opts Options) (Result, error) {
	arr, err := parseArray(items, opts.Valid)
	if err != nil {
		return Result{}, err
	}
	if rsValid(arr) {
		return Result{Messages: items}, nil
	}
	return rsRepair(items, arr, &opts), nil
}

func rsRepair(input []byte, arr gjson.Result, opts *Options) Result {
	var its []rsItem
	eachElement(arr, func(v gjson.Result) bool {
		its = append(its, parseRS(v))
		return true
	})
	n := len(its)
	dropped := make([]bool, n)
	resAt := make([]int, n)
	callAt := make([]int, n)
	runStart := make([]int, n)
	lastOfRun := make([]bool, n)
	turnCalls := make([][]int, n)
	var g graph
	prev := -1
	for i := range its {
		it := &its[i]
		resAt[i], callAt[i] = -1, -1
		if it.empty {
			dropped[i] = true
			continue
		}
		runStart[i] = i
		if it.inRun() && prev >= 0 && its[prev].inRun() {
			runStart[i] = runStart[prev]
			lastOfRun[prev] = false
		}
		lastOfRun[i] = it.inRun()
		prev = i
		switch it.kind {
		case riCall:
			callAt[i] = len(g.calls)
			turnCalls[runStart[i]] = append(turnCalls[runStart[i]], len(g.calls))
			g.calls = append(g.calls, call{msg: runStart[i], part: i, id: it.callID, name: it.name, hasID: true, res: -1})
		case riOutput:
			resAt[i] = len(g.results)
			g.results = append(g.results, result{msg: i, part: -1, id: it.callID, hasID: true, call: -1})
		}
	}
	g.match()

	var res Result
	edit := func(kind, id, name string) {
		res.Edits = append(res.Edits, Edit{Kind: kind, CallID: clone(id), Name: clone(name)})
	}
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
		raw := its[r.msg].raw
		if id := g.finalID(ri); id != r.id {
			raw, _ = sjson.Set(raw, "call_id", id)
		}
		emit(raw)
	}
	emitOrphan := func(ri int) {
		r := &g.results[ri]
		emit(str(rsOrphan(gjson.Parse(its[r.msg].output), r.id)))
		edit(KindOrphanResult, r.id, "")
	}
	for i := 0; i < n; i++ {
		switch {
		case dropped[i]:
			edit(KindDroppedEmpty, "", "")
			continue
		case resAt[i] >= 0:
			if g.results[resAt[i]].call < 0 {
				emitOrphan(resAt[i])
			} // else it is moved to its call's block
			continue
		case callAt[i] >= 0:
			c := &g.calls[callAt[i]]
			raw := its[i].raw
			if c.newID != c.id {
				raw, _ = sjson.Set(raw, "call_id", c.newID)
				edit(KindRenamedID, c.newID, c.name)
			}
			emit(raw)
		default:
			emit(its[i].raw)
		}
		t := runStart[i]
		if !lastOfRun[i] || turnCalls[t] == nil {
			continue
		}
		j := i + 1
		for j < n && (dropped[j] || resAt[j] >= 0) {
			j++
		}
		inBlock := func(ri int) bool { m := g.results[ri].msg; return m > i && m < j }
		for k := i + 1; k < j; k++ {
			if dropped[k] {
				edit(KindDroppedEmpty, "", "")
				continue
			}
			if ci := g.results[resAt[k]].call; ci >= 0 && g.calls[ci].msg == t {
				emitResult(resAt[k])
			}
		}
		for _, ci := range turnCalls[t] {
			c := &g.calls[ci]
			switch {
			case c.res >= 0 && inBlock(c.res):
			case c.res >= 0:
				emitResult(c.res)
				edit(KindMovedResult, c.newID, c.name)
			default:
				var b []byte
				b = append(b, `{"type":"function_call_output","call_id":`...)
				b = appendString(b, c.newID)
				b = append(b, `,"output":`...)
				b = appendString(b, interruptedText(c.name, opts))
				b = append(b, '}')
				emit(str(b))
				edit(KindSyntheticResult, c.newID, c.name)
				res.Interrupted = append(res.Interrupted, Call{ID: clone(c.newID), Name: clone(c.name)})
			}
		}
		for k := i + 1; k < j; k++ {
			if !dropped[k] && g.results[resAt[k]].call < 0 {
				emitOrphan(resAt[k])
			}
		}
		i = j - 1
	}
	if len(res.Edits) == 0 {
		return Result{Messages: input}
	}
	out = append(out, ']')
	res.Messages = out
	res.Changed = true
	return res
}

// rsOrphan builds the user message that replaces a function_call_output
// whose call is missing, carrying its output.
func rsOrphan(output gjson.Result, id string) []byte {
	h := orphanHeader(id)
	b := []byte(`{"type":"message","role":"user","content":`)
	switch {
	case output.Type == gjson.String:
		b = append(b, `[{"type":"input_text","text":`...)
		b = appendString(b, h+"\n"+output.Str)
		b = append(b, `}]`...)
	case output.IsArray() && !emptyContainer(output.Raw):
		b = append(b, `[{"type":"input_text","text":`...)
		b = appendString(b, h)
		b = append(b, `},`...)
		b = append(b, output.Raw[1:]...)
	case blank(output):
		b = append(b, `[{"type":"input_text","text":`...)
		b = appendString(b, h)
		b = append(b, `}]`...)
	default:
		b = append(b, `[{"type":"input_text","text":`...)
		b = appendString(b, h+"\n"+output.Raw)
		b = append(b, `}]`...)
	}
	return append(b, '}')
}
