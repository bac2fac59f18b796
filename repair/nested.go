package repair

// NestedRules are the rules of a nested format: one whose calls and
// results are parts of its elements (a Gemini content's functionCall and
// functionResponse parts), so that a turn's block is the one RoleBlock
// element right after it. Its Scan reports every part of an element
// (Scanner.Part) before that part's call or result. Besides its Scan, such
// a format says how its parts and elements are edited and written.
type NestedRules interface {
	Rules
	// RenameCall returns the call part p with id.
	RenameCall(p string, id string) string
	// RenameResult returns the result part p answering id instead.
	RenameResult(p string, id string) string
	// AppendSynthetic appends to dst a result part that answers c (c.ID
	// is "" for a call without an id) with text.
	AppendSynthetic(dst []byte, c Call, text string) []byte
	// AppendOrphan appends to dst the part that replaces the result part
	// p, whose call is missing: a note that starts with header and
	// carries p's content.
	AppendOrphan(dst []byte, p, header string) []byte
	// SetParts returns the element el with parts (a JSON array) as its
	// parts.
	SetParts(el string, parts []byte) string
	// AppendBlock appends to dst a new block element (in the user's voice)
	// with parts (a JSON array) as its parts.
	AppendBlock(dst []byte, parts []byte) []byte
}

// ResultsFirst is a NestedRules whose format wants the results of a block
// before its other parts (Anthropic: tool_result blocks first in their
// message): results repair adds to a block go before its first other
// part, not after its last.
type ResultsFirst interface {
	NestedRules
	ResultsFirst()
}

// Nested repairs a history of a nested format. See the package
// documentation for the rules.
func Nested(f NestedRules, messages []byte, opts Options) (Result, error) {
	return run(f, messages, opts, func(h *history, opts Options) builder {
		return nested(f, h, len(messages), opts)
	})
}

func nested(f NestedRules, h *history, size int, opts Options) builder {
	els := h.els
	n := len(els)
	dropped := make([]bool, n)
	runStart := make([]int, n)    // first element of the turn holding i
	lastOfRun := make([]bool, n)  // i is the last turn element of its run
	turnCalls := make([][]int, n) // calls of the run starting at i
	partRes := make([][]int, n)   // result index per part, -1 otherwise
	partCall := make([][]int, n)  // call index per part, -1 otherwise
	hasRes := make([]bool, n)
	var g graph
	prev := -1 // previous element not dropped
	for i := range els {
		e := &els[i]
		dropped[i] = e.empty
		if dropped[i] {
			continue
		}
		turn := e.role.turn()
		runStart[i] = i
		if turn && prev >= 0 && els[prev].role.turn() {
			runStart[i] = runStart[prev]
			lastOfRun[prev] = false
		}
		lastOfRun[i] = turn
		prev = i
		parts := h.itemsOf(i)
		partRes[i] = make([]int, len(parts))
		partCall[i] = make([]int, len(parts))
		for k, p := range parts {
			partRes[i][k], partCall[i][k] = -1, -1
			switch p.kind {
			case itemCall:
				partCall[i][k] = len(g.calls)
				turnCalls[runStart[i]] = append(turnCalls[runStart[i]], len(g.calls))
				g.calls = append(g.calls, call{msg: runStart[i], el: i, part: k, id: p.id, name: p.name, hasID: p.hasID, res: -1})
			case itemResult:
				partRes[i][k] = len(g.results)
				hasRes[i] = true
				g.results = append(g.results, result{msg: i, part: k, id: p.id, name: p.name, hasID: p.hasID, call: -1})
			}
		}
	}
	g.match()
	blockOf := make([]int, n)
	isBlock := make([]bool, n)
	for i := range els {
		blockOf[i] = -1
	}
	for i := range els {
		if !lastOfRun[i] || turnCalls[runStart[i]] == nil {
			continue
		}
		j := i + 1
		for j < n && dropped[j] {
			j++
		}
		if j < n && els[j].role == RoleBlock && hasRes[j] {
			blockOf[runStart[i]] = j
			isBlock[j] = true
		}
	}

	b := newBuilder(size)
	_, resultsFirst := f.(ResultsFirst)
	// resPart is result ri's part as sent, renamed if its call was.
	resPart := func(ri int) string {
		r := &g.results[ri]
		raw := h.itemsOf(r.msg)[r.part].raw
		if id := g.finalID(ri); id != r.id {
			raw = f.RenameResult(raw, id)
		}
		return raw
	}
	// rebuild returns element i's parts as sent, and whether they changed.
	rebuild := func(i int, extra func([]byte) []byte) ([]byte, bool) {
		ps := []byte{'['}
		changed := h.els[i].misplaced
		if changed {
			b.edit(KindMovedResult, "", "")
		}
		// otherAt is where the element's first part that is not a
		// result starts in ps (-1: none yet), where a format whose
		// results come first takes the added ones.
		otherAt := -1
		var orphans []string // results turned into notes, for a results-first format
		add := func(s string) {
			if len(ps) > 1 {
				ps = append(ps, ',')
			}
			ps = append(ps, s...)
		}
		for k, p := range h.itemsOf(i) {
			raw := p.raw
			switch ri := partRes[i][k]; {
			case ri >= 0:
				r := &g.results[ri]
				if r.call < 0 {
					ref := r.id
					if !r.hasID {
						ref = r.name
					}
					raw = str(f.AppendOrphan(nil, raw, orphanHeader(ref)))
					b.edit(KindOrphanResult, r.id, r.name)
					changed = true
					if resultsFirst {
						// No longer a result: after the results.
						orphans = append(orphans, raw)
						continue
					}
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
					raw = f.RenameCall(raw, c.newID)
					b.edit(KindRenamedID, c.newID, c.name)
					changed = true
				}
			}
			if partRes[i][k] < 0 && otherAt < 0 {
				otherAt = len(ps)
				if len(ps) > 1 {
					otherAt++ // past the comma add writes
				}
			}
			add(raw)
		}
		var more []byte
		if extra != nil {
			more = extra([]byte{'['})[1:]
		}
		for _, o := range orphans {
			if len(more) > 0 {
				more = append(more, ',')
			}
			more = append(more, o...)
		}
		switch {
		case len(more) == 0:
		case resultsFirst && otherAt >= 0:
			ps = append(ps[:otherAt:otherAt], append(append(more, ','), ps[otherAt:]...)...)
			changed = true
		default:
			if len(ps) > 1 {
				ps = append(ps, ',')
			}
			ps = append(ps, more...)
			changed = true
		}
		return append(ps, ']'), changed
	}
	emitElement := func(i int, ps []byte, changed bool) {
		switch {
		case !changed:
			b.emit(els[i].raw)
		case len(ps) > 2:
			b.emit(f.SetParts(els[i].raw, ps))
		} // an element left with no parts is dropped with the moved results
	}
	for i := 0; i < n; i++ {
		switch {
		case dropped[i]:
			b.edit(KindDroppedEmpty, "", "")
			continue
		case isBlock[i]:
			continue // sent right after its turn
		}
		ps, changed := rebuild(i, nil)
		emitElement(i, ps, changed)
		t := runStart[i]
		if !lastOfRun[i] || turnCalls[t] == nil {
			continue
		}
		// The turn's block: the results already in it, in their order;
		// then for each other call of the turn, in call order, its moved
		// result or a synthetic one.
		missing := func(ps []byte) []byte {
			for _, ci := range turnCalls[t] {
				c := &g.calls[ci]
				if c.res >= 0 && g.results[c.res].msg == blockOf[t] {
					continue
				}
				if len(ps) > 1 {
					ps = append(ps, ',')
				}
				if c.res >= 0 {
					ps = append(ps, resPart(c.res)...)
					b.edit(KindMovedResult, c.newID, c.name)
					continue
				}
				id := c.newID
				if !c.hasID {
					id = ""
				}
				ps = f.AppendSynthetic(ps, Call{ID: id, Name: c.name}, interruptedText(c.name, &opts))
				b.edit(KindSyntheticResult, c.newID, c.name)
				b.interrupted(c.newID, c.name)
			}
			return ps
		}
		if bl := blockOf[t]; bl >= 0 {
			ps, changed := rebuild(bl, missing)
			emitElement(bl, ps, changed)
			continue
		}
		ps = missing([]byte{'['})
		if len(ps) > 1 {
			b.emit(str(f.AppendBlock(nil, append(ps, ']'))))
		}
	}
	return b
}
