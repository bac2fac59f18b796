package repair

// FlatRules are the rules of a flat format: one whose results are whole
// elements of the history (RoleResult: an OpenAI chat tool message, a
// Responses function_call_output item), so that a turn's block is the run
// of result elements right after it. Besides its Scan, such a format says
// how its elements are edited and written.
type FlatRules interface {
	Rules
	// RenameCall returns el with its call-th call (in Scan's order) given
	// id.
	RenameCall(el string, call int, id string) string
	// RenameResult returns the result element el answering id instead.
	RenameResult(el string, id string) string
	// AppendSynthetic appends to dst a result element that answers the
	// call id with text.
	AppendSynthetic(dst []byte, id, text string) []byte
	// AppendOrphan appends to dst the element that replaces the result
	// element el, whose call is missing: a note in the user's voice that
	// starts with header and carries el's content.
	AppendOrphan(dst []byte, el, header string) []byte
}

// Flat repairs a history of a flat format. See the package documentation
// for the rules.
func Flat(f FlatRules, messages []byte, opts Options) (Result, error) {
	return run(f, messages, opts, func(h *history, opts Options) builder {
		return flat(f, h, len(messages), opts)
	})
}

func flat(f FlatRules, h *history, size int, opts Options) builder {
	els := h.els
	n := len(els)
	dropped := make([]bool, n)
	resAt := make([]int, n)       // result index of a result element, else -1
	runStart := make([]int, n)    // first element of the turn holding i
	lastOfRun := make([]bool, n)  // i is the last element of its turn
	turnCalls := make([][]int, n) // calls of the turn starting at i
	callsAt := make([][2]int, n)  // calls held by element i, a range of g.calls
	var g graph
	prev := -1 // previous element not dropped
	for i := range els {
		e := &els[i]
		resAt[i] = -1
		if e.empty {
			dropped[i] = true
			continue
		}
		runStart[i] = i
		if e.role == RoleTurnPart && prev >= 0 && els[prev].role == RoleTurnPart {
			runStart[i] = runStart[prev]
			lastOfRun[prev] = false
		}
		lastOfRun[i] = e.role.turn()
		prev = i
		callsAt[i] = [2]int{len(g.calls), len(g.calls)}
		for k, it := range h.itemsOf(i) {
			switch {
			case it.kind == itemCall:
				turnCalls[runStart[i]] = append(turnCalls[runStart[i]], len(g.calls))
				g.calls = append(g.calls, call{msg: runStart[i], el: i, part: k, id: it.id, name: it.name, hasID: it.hasID, res: -1})
				callsAt[i][1] = len(g.calls)
			case it.kind == itemResult && e.role == RoleResult && resAt[i] < 0:
				resAt[i] = len(g.results)
				g.results = append(g.results, result{msg: i, part: -1, id: it.id, name: it.name, hasID: it.hasID, call: -1})
			}
		}
	}
	g.match()

	b := newBuilder(size)
	emitResult := func(ri int) {
		r := &g.results[ri]
		raw := els[r.msg].raw
		if id := g.finalID(ri); id != r.id {
			raw = f.RenameResult(raw, id)
		}
		b.emit(raw)
	}
	emitOrphan := func(ri int) {
		r := &g.results[ri]
		b.emit(str(f.AppendOrphan(nil, els[r.msg].raw, orphanHeader(r.id))))
		b.edit(KindOrphanResult, r.id, "")
	}
	for i := 0; i < n; i++ {
		switch {
		case dropped[i]:
			b.edit(KindDroppedEmpty, "", "")
			continue
		case resAt[i] >= 0:
			if g.results[resAt[i]].call < 0 {
				emitOrphan(resAt[i])
			} // else it is moved to its call's block
			continue
		}
		raw := els[i].raw
		for ci := callsAt[i][0]; ci < callsAt[i][1]; ci++ {
			c := &g.calls[ci]
			if c.newID != c.id {
				raw = f.RenameCall(raw, c.part, c.newID)
				b.edit(KindRenamedID, c.newID, c.name)
			}
		}
		b.emit(raw)
		t := runStart[i]
		if !lastOfRun[i] || turnCalls[t] == nil {
			continue
		}
		// The turn's block: the run of results (and dropped elements)
		// after it. Its results for this turn first, in their order; then
		// for each other call, in call order, its moved result or a
		// synthetic one; then the orphans found in it.
		j := i + 1
		for j < n && (dropped[j] || resAt[j] >= 0) {
			j++
		}
		inBlock := func(ri int) bool { m := g.results[ri].msg; return m > i && m < j }
		for k := i + 1; k < j; k++ {
			if dropped[k] {
				b.edit(KindDroppedEmpty, "", "")
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
				b.edit(KindMovedResult, c.newID, c.name)
			default:
				b.emit(str(f.AppendSynthetic(nil, c.newID, interruptedText(c.name, &opts))))
				b.edit(KindSyntheticResult, c.newID, c.name)
				b.interrupted(c.newID, c.name)
			}
		}
		for k := i + 1; k < j; k++ {
			if !dropped[k] && g.results[resAt[k]].call < 0 {
				emitOrphan(resAt[k])
			}
		}
		i = j - 1
	}
	return b
}
