package repair

import (
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Gemini part kinds.
const (
	gpOther = iota
	gpCall
	gpResponse
)

// gmPart is the part of a Gemini part repair looks at.
type gmPart struct {
	raw      string
	kind     int
	id       string
	name     string
	hasID    bool
	response string // raw JSON, "" when absent
	empty    bool   // only an empty text (with thought flags or a signature)
}

func parseGMPart(v gjson.Result) gmPart {
	p := gmPart{raw: v.Raw}
	if !v.IsObject() {
		return p
	}
	p.empty = true
	walkObject(v.Raw, func(k, val string) bool {
		switch k {
		case "functionCall", "functionResponse":
			p.empty = false
			if p.kind != gpOther {
				break
			}
			p.kind = gpCall
			if k == "functionResponse" {
				p.kind = gpResponse
			}
			walkObject(val, func(k2, v2 string) bool {
				switch k2 {
				case "id":
					p.id = strValue(v2)
					p.hasID = p.id != ""
				case "name":
					p.name = strValue(v2)
				case "response":
					p.response = v2
				}
				return true
			})
		case "text":
			if val != `""` {
				p.empty = false
			}
		case "thought", "thoughtSignature":
		default:
			p.empty = false
		}
		return true
	})
	return p
}

// gmContent is the part of a Gemini content repair looks at.
type gmContent struct {
	raw   string
	model bool
	parts gjson.Result
}

func parseGM(v gjson.Result) gmContent {
	c := gmContent{raw: v.Raw}
	walkObject(v.Raw, func(k, val string) bool {
		switch k {
		case "role":
			c.model = strValue(val) == "model"
		case "parts":
			c.parts = gjson.Parse(val)
		}
		return true
	})
	return c
}

// empty reports whether c is a model content with no parts or only empty
// text parts.
func (c *gmContent) empty() bool {
	if !c.model {
		return false
	}
	e := true
	eachElement(c.parts, func(v gjson.Result) bool {
		e = parseGMPart(v).empty
		return e
	})
	return e
}

// gmValid is the fast scan for Gemini contents. Consecutive model contents
// form one turn (@google/genai's Chat keeps one model content per streamed
// chunk), answered by the content after the last of them.
func gmValid(arr gjson.Result) bool {
	c := getCheck()
	defer putCheck(c)
	set, p := &c.set, &c.p
	ok := true
	eachElement(arr, func(v gjson.Result) bool {
		c := parseGM(v)
		if !c.model && p.n > 0 {
			eachElement(c.parts, func(pv gjson.Result) bool {
				if gp := parseGMPart(pv); gp.kind == gpResponse {
					ok = p.answer(gp.id, gp.name, gp.hasID)
				}
				return ok
			})
			ok = ok && p.open == 0
			p.reset()
			return ok
		}
		empty := true
		eachElement(c.parts, func(pv gjson.Result) bool {
			gp := parseGMPart(pv)
			empty = empty && gp.empty
			switch {
			case gp.kind == gpResponse:
				ok = false
			case gp.kind == gpCall && c.model:
				if gp.hasID && set.add(gp.id) {
					ok = false
				}
				p.add(gp.id, gp.name, gp.hasID)
			}
			return ok
		})
		if c.model && empty {
			ok = false
		}
		return ok
	})
	return ok && p.open == 0
}

// Gemini repairs a Gemini native `contents` array. A function result is a
// functionResponse part in a user content, matched to its functionCall by
// `id` when it has one, otherwise by name and order. See the package
// documentation for the rules.
func Gemini(contents []byte, opts Options) (Result, error) {
	arr, err := parseArray(contents, opts.Valid)
	if err != nil {
		return Result{}, err
	}
	if gmValid(arr) {
		return Result{Messages: contents}, nil
	}
	return gmRepair(contents, arr, &opts), nil
}

func gmRepair(input []byte, arr gjson.Result, opts *Options) Result {
	var cs []gmContent
	var parts [][]gmPart
	eachElement(arr, func(v gjson.Result) bool {
		c := parseGM(v)
		var ps []gmPart
		eachElement(c.parts, func(pv gjson.Result) bool {
			ps = append(ps, parseGMPart(pv))
			return true
		})
		cs = append(cs, c)
		parts = append(parts, ps)
		return true
	})
	n := len(cs)
	dropped := make([]bool, n)
	runStart := make([]int, n)    // first content of the model run holding i
	lastOfRun := make([]bool, n)  // i is the last model content of its run
	turnCalls := make([][]int, n) // calls of the run starting at i
	partRes := make([][]int, n)   // result index per part, -1 otherwise
	partCall := make([][]int, n)  // call index per part, -1 otherwise
	hasRes := make([]bool, n)
	var g graph
	prev := -1 // previous content not dropped
	for i := range cs {
		dropped[i] = cs[i].empty()
		if dropped[i] {
			continue
		}
		runStart[i] = i
		if cs[i].model && prev >= 0 && cs[prev].model {
			runStart[i] = runStart[prev]
			lastOfRun[prev] = false
		}
		lastOfRun[i] = cs[i].model
		prev = i
		partRes[i] = make([]int, len(parts[i]))
		partCall[i] = make([]int, len(parts[i]))
		for k, p := range parts[i] {
			partRes[i][k], partCall[i][k] = -1, -1
			switch {
			case p.kind == gpCall && cs[i].model:
				partCall[i][k] = len(g.calls)
				turnCalls[runStart[i]] = append(turnCalls[runStart[i]], len(g.calls))
				g.calls = append(g.calls, call{msg: runStart[i], part: k, id: p.id, name: p.name, hasID: p.hasID, res: -1})
			case p.kind == gpResponse:
				partRes[i][k] = len(g.results)
				hasRes[i] = true
				g.results = append(g.results, result{msg: i, part: k, id: p.id, name: p.name, hasID: p.hasID, call: -1})
			}
		}
	}
	g.match()
	blockOf := make([]int, n)
	isBlock := make([]bool, n)
	for i := range cs {
		blockOf[i] = -1
	}
	for i := range cs {
		if !lastOfRun[i] || turnCalls[runStart[i]] == nil {
			continue
		}
		j := i + 1
		for j < n && dropped[j] {
			j++
		}
		if j < n && !cs[j].model && hasRes[j] {
			blockOf[runStart[i]] = j
			isBlock[j] = true
		}
	}

	var res Result
	edit := func(kind string, id, name string) {
		res.Edits = append(res.Edits, Edit{Kind: kind, CallID: clone(id), Name: clone(name)})
	}
	// resPart is result ri's part as sent, renamed if its call was.
	resPart := func(ri int) string {
		r := &g.results[ri]
		raw := parts[r.msg][r.part].raw
		if id := g.finalID(ri); id != r.id {
			raw, _ = sjson.Set(raw, "functionResponse.id", id)
		}
		return raw
	}
	// rebuild returns content i's parts as sent, and whether they changed.
	rebuild := func(i int, extra func([]byte) []byte) ([]byte, bool) {
		b := []byte{'['}
		changed := false
		add := func(s string) {
			if len(b) > 1 {
				b = append(b, ',')
			}
			b = append(b, s...)
		}
		for k := range parts[i] {
			raw := parts[i][k].raw
			switch ri := partRes[i][k]; {
			case ri >= 0:
				r := &g.results[ri]
				if r.call < 0 {
					var t []byte
					t = append(t, `{"text":`...)
					ref := r.id
					if !r.hasID {
						ref = r.name
					}
					h := orphanHeader(ref)
					if resp := parts[i][k].response; resp != "" {
						h += "\n" + gjson.Get(resp, "@ugly").Raw
					}
					t = appendString(t, h)
					raw = str(append(t, '}'))
					edit(KindOrphanResult, r.id, r.name)
					changed = true
				} else if blockOf[g.calls[r.call].msg] != i {
					changed = true
					continue // moved to its call's block
				} else if id := g.finalID(ri); id != r.id {
					raw = resPart(ri)
					changed = true
				}
			case partCall[i][k] >= 0:
				c := &g.calls[partCall[i][k]]
				if c.newID != c.id {
					raw, _ = sjson.Set(raw, "functionCall.id", c.newID)
					edit(KindRenamedID, c.newID, c.name)
					changed = true
				}
			}
			add(raw)
		}
		if extra != nil {
			before := len(b)
			b = extra(b)
			changed = changed || len(b) != before
		}
		return append(b, ']'), changed
	}

	out := make([]byte, 0, len(input)+256)
	out = append(out, '[')
	emit := func(s string) {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, s...)
	}
	emitContent := func(i int, ps []byte, changed bool) {
		switch {
		case !changed:
			emit(cs[i].raw)
		case len(ps) > 2:
			raw, _ := sjson.SetRaw(cs[i].raw, "parts", str(ps))
			emit(raw)
		} // a content left with no parts is dropped with the moved results
	}
	for i := 0; i < n; i++ {
		switch {
		case dropped[i]:
			edit(KindDroppedEmpty, "", "")
			continue
		case isBlock[i]:
			continue // sent right after its turn
		}
		ps, changed := rebuild(i, nil)
		emitContent(i, ps, changed)
		t := runStart[i]
		if !lastOfRun[i] || turnCalls[t] == nil {
			continue
		}
		missing := func(b []byte) []byte {
			for _, ci := range turnCalls[t] {
				c := &g.calls[ci]
				if c.res >= 0 && g.results[c.res].msg == blockOf[t] {
					continue
				}
				if len(b) > 1 {
					b = append(b, ',')
				}
				if c.res >= 0 {
					b = append(b, resPart(c.res)...)
					edit(KindMovedResult, c.newID, c.name)
					continue
				}
				b = append(b, `{"functionResponse":{`...)
				if c.hasID {
					b = append(b, `"id":`...)
					b = appendString(b, c.newID)
					b = append(b, ',')
				}
				b = append(b, `"name":`...)
				b = appendString(b, c.name)
				b = append(b, `,"response":{"error":`...)
				b = appendString(b, interruptedText(c.name, opts))
				b = append(b, `}}}`...)
				edit(KindSyntheticResult, c.newID, c.name)
				res.Interrupted = append(res.Interrupted, Call{ID: clone(c.newID), Name: clone(c.name)})
			}
			return b
		}
		if b := blockOf[t]; b >= 0 {
			ps, changed := rebuild(b, missing)
			emitContent(b, ps, changed)
			continue
		}
		ps = missing([]byte{'['})
		if len(ps) > 1 {
			emit(`{"role":"user","parts":` + string(ps) + `]}`)
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
