package repair

import (
	"slices"
	"strconv"

	"github.com/tidwall/gjson"
)

// idSet is an allocation-free duplicate detector for the check: a Bloom
// filter in front of a list of the ids seen so far. The first 256 ids live
// in the struct itself (pooled with the check); later ones go to a map.
type idSet struct {
	bits [64]uint64
	buf  [256]string
	n    int
	more map[string]struct{}
}

// clear empties the set.
func (s *idSet) clear() {
	clear(s.buf[:s.n])
	s.bits = [64]uint64{}
	s.n, s.more = 0, nil
}

// add records id and reports whether it was already present.
func (s *idSet) add(id string) bool {
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	b1, b2 := h%4096, (h>>32)%4096
	hit := s.bits[b1/64]&(1<<(b1%64)) != 0 && s.bits[b2/64]&(1<<(b2%64)) != 0
	if hit && slices.Contains(s.buf[:s.n], id) {
		return true
	}
	if _, ok := s.more[id]; ok {
		return true
	}
	s.bits[b1/64] |= 1 << (b1 % 64)
	s.bits[b2/64] |= 1 << (b2 % 64)
	if s.n < len(s.buf) {
		s.buf[s.n] = id
		s.n++
	} else {
		if s.more == nil {
			s.more = make(map[string]struct{})
		}
		s.more[id] = struct{}{}
	}
	return false
}

// pcall is one call of the open turn during the check.
type pcall struct {
	id, name        string
	hasID, answered bool
}

// pending tracks the calls of the open turn during the check; the first
// 16 live in the struct itself.
type pending struct {
	buf  [16]pcall
	n    int
	more []pcall
	open int
}

func (p *pending) at(i int) *pcall {
	if i < len(p.buf) {
		return &p.buf[i]
	}
	return &p.more[i-len(p.buf)]
}

func (p *pending) reset() {
	p.n, p.open, p.more = 0, 0, p.more[:0]
}

// clear is reset that also drops the ids it held.
func (p *pending) clear() {
	clear(p.buf[:min(p.n, len(p.buf))])
	clear(p.more)
	p.reset()
}

func (p *pending) add(id, name string, hasID bool) {
	c := pcall{id: id, name: name, hasID: hasID}
	if p.n < len(p.buf) {
		p.buf[p.n] = c
	} else {
		p.more = append(p.more, c)
	}
	p.n++
	p.open++
}

// answer marks the first unanswered call that the result matches (by id
// when the result has one, else by name among calls without an id) and
// reports whether there was one.
func (p *pending) answer(id, name string, hasID bool) bool {
	for i := 0; i < p.n; i++ {
		c := p.at(i)
		if c.answered || c.hasID != hasID {
			continue
		}
		if (hasID && c.id == id) || (!hasID && c.name == name) {
			c.answered = true
			p.open--
			return true
		}
	}
	return false
}

// The slow path works on an abstract history shared by every format.

// call is one tool call in the history.
type call struct {
	msg   int // index of the first element of the turn that made it
	el    int // index of the element that holds it
	part  int // index of the call in that element (a tool_calls or parts index)
	id    string
	name  string
	hasID bool
	newID string // final id; equal to id unless renamed
	res   int    // index into results, -1 when unanswered
}

// result is one tool result in the history.
type result struct {
	msg   int // index of the element that holds it
	part  int // index of its part (nested formats), -1 for a whole element
	id    string
	name  string
	hasID bool
	call  int // index into calls, -1 for an orphan
}

// graph holds calls and results and matches them.
type graph struct {
	calls   []call
	results []result
}

func (g *graph) key(hasID bool, id, name string) string {
	if hasID {
		return "i" + id
	}
	return "n" + name
}

// keyState tracks, for one match key, the calls not yet answered while
// results are matched in history order.
type keyState struct {
	cands  []int   // call indices, in history order
	pushed int     // cands before the current result, already on turns
	turns  [][]int // stack of preceding turns' unanswered calls, latest on top
	next   int     // first cand that may still answer as a following call
}

// match assigns each result to a call (see doc.go) and renames repeated
// call ids. It runs in O((calls+results) log) time whatever the ids.
func (g *graph) match() {
	byKey := make(map[string]*keyState)
	used := make(map[string]bool)
	for i, c := range g.calls {
		k := g.key(c.hasID, c.id, c.name)
		ks := byKey[k]
		if ks == nil {
			ks = &keyState{}
			byKey[k] = ks
		}
		ks.cands = append(ks.cands, i)
		if c.hasID {
			used[c.id] = true
		}
	}
	for _, r := range g.results {
		if r.hasID {
			used[r.id] = true
		}
	}
	for ri := range g.results {
		r := &g.results[ri]
		ks := byKey[g.key(r.hasID, r.id, r.name)]
		if ks == nil {
			continue
		}
		for ks.pushed < len(ks.cands) && g.calls[ks.cands[ks.pushed]].msg < r.msg {
			ci := ks.cands[ks.pushed]
			ks.pushed++
			if g.calls[ci].res >= 0 {
				continue
			}
			if t := len(ks.turns) - 1; t >= 0 && g.calls[ks.turns[t][0]].msg == g.calls[ci].msg {
				ks.turns[t] = append(ks.turns[t], ci)
			} else {
				ks.turns = append(ks.turns, []int{ci})
			}
		}
		best := -1
		if t := len(ks.turns) - 1; t >= 0 {
			// The latest preceding turn with an unanswered match; its first.
			best = ks.turns[t][0]
			if ks.turns[t] = ks.turns[t][1:]; len(ks.turns[t]) == 0 {
				ks.turns = ks.turns[:t]
			}
		} else {
			// Else the earliest following unanswered match.
			j := max(ks.next, ks.pushed)
			for j < len(ks.cands) && (g.calls[ks.cands[j]].res >= 0 || g.calls[ks.cands[j]].msg <= r.msg) {
				j++
			}
			ks.next = j
			if j < len(ks.cands) {
				best = ks.cands[j]
				ks.next++
			}
		}
		if best >= 0 {
			r.call = best
			g.calls[best].res = ri
		}
	}
	seen := make(map[string]int) // next suffix to try per repeated id
	for i := range g.calls {
		c := &g.calls[i]
		c.newID = c.id
		if !c.hasID {
			continue
		}
		k, ok := seen[c.id]
		if !ok {
			seen[c.id] = 2
			continue
		}
		for ; ; k++ {
			n := c.id + "_" + strconv.Itoa(k)
			if !used[n] {
				c.newID = n
				used[n] = true
				break
			}
		}
		seen[c.id] = k + 1
	}
}

// finalID is the id a result is sent with after repair.
func (g *graph) finalID(ri int) string {
	r := &g.results[ri]
	if r.call >= 0 {
		return g.calls[r.call].newID
	}
	return r.id
}

// clone copies s so results never alias the caller's buffer.
func clone(s string) string {
	if s == "" {
		return ""
	}
	return string([]byte(s))
}

// itemKind says what an item of a read element is.
type itemKind uint8

const (
	itemOther  itemKind = iota // a part that is neither (nested formats)
	itemCall                   // a call
	itemResult                 // a result
)

// history is a history as the slow path reads it through a format's Scan:
// its elements, and their calls, results and parts in one list.
type history struct {
	els   []element
	items []item
	// partOpen: the last item is a part whose call or result, if any, has
	// not been reported yet.
	partOpen bool
	// s is the Scanner reporting to it (one allocation with it).
	s Scanner
}

// element is one element of a read history.
type element struct {
	raw        string
	role       Role
	empty      bool
	misplaced  bool // its items are in the order the format requires, not raw's
	first, end int  // its items, h.items[first:end]
}

// item is a call, a result or (nested formats) a part of an element.
type item struct {
	raw      string // the part's JSON; "" for a flat format's call or result
	kind     itemKind
	id, name string
	hasID    bool
}

// read reads every element of arr with f's Scan.
func read(f Rules, arr gjson.Result) *history {
	h := &history{}
	h.s = Scanner{mode: scanRead, h: h}
	Each(arr, func(v gjson.Result) bool {
		h.els = append(h.els, element{raw: v.Raw, first: len(h.items)})
		h.partOpen = false
		f.Scan(v, &h.s)
		h.els[len(h.els)-1].end = len(h.items)
		return true
	})
	return h
}

func (h *history) element(r Role) { h.els[len(h.els)-1].role = r }

func (h *history) empty() { h.els[len(h.els)-1].empty = true }

func (h *history) misplaced() { h.els[len(h.els)-1].misplaced = true }

func (h *history) part(raw string) {
	h.items = append(h.items, item{raw: raw})
	h.partOpen = true
}

func (h *history) item(kind itemKind, id, name string, hasID bool) {
	if h.partOpen {
		it := &h.items[len(h.items)-1]
		it.kind, it.id, it.name, it.hasID = kind, id, name, hasID
		h.partOpen = false
		return
	}
	h.items = append(h.items, item{kind: kind, id: id, name: name, hasID: hasID})
}

// itemsOf returns element i's items.
func (h *history) itemsOf(i int) []item {
	e := &h.els[i]
	return h.items[e.first:e.end]
}
