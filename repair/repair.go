package repair

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
)

// ErrNotArray is returned when the history is not valid JSON or its top
// level is not an array.
var ErrNotArray = errors.New("repair: history is not a JSON array")

// Edit kinds, as reported in a run's repairs and the X-Repaired header.
const (
	KindSyntheticResult = "synthetic_result"
	KindOrphanResult    = "orphan_result"
	KindRenamedID       = "renamed_id"
	KindDroppedEmpty    = "dropped_empty"
	KindMovedResult     = "moved_result"
)

// Options tune a repair. The zero value treats every tool as one that may
// have side effects.
type Options struct {
	// ReadOnlyTools names the tools whose interrupted calls are safe to
	// repeat; only these get the "changed nothing" wording.
	ReadOnlyTools []string
	// Valid says the caller has checked that the array is valid JSON
	// (the proxy has, before it composes a history), so repair does not
	// read it all again to check. Invalid input with Valid set gives an
	// undefined (but never panicking) result.
	Valid bool
}

// Edit is one change repair made.
type Edit struct {
	// Kind is one of the Kind* constants.
	Kind string
	// CallID is the call the edit concerns, as sent after repair (the new
	// id for renamed_id); "" for dropped_empty and for Gemini calls
	// without an id.
	CallID string
	// Name is the function name where one is known, else "".
	Name string
}

// Call names a tool call that repair answered because it never returned.
type Call struct {
	ID   string // as sent after repair; "" for a Gemini call without an id
	Name string
}

// Result is the outcome of a repair. Its strings never alias the input.
type Result struct {
	// Messages is the repaired JSON array. When Changed is false it is the
	// input slice itself.
	Messages []byte
	// Interrupted lists the calls that got a synthetic result, in order.
	Interrupted []Call
	// Edits lists every change, in the order of the output.
	Edits []Edit
	// Changed reports whether Messages differs from the input.
	Changed bool
}

// Wordings of synthetic results and orphan notes. The tool name or call
// id is inserted where the format shows %s.
const (
	readOnlyWording = "The call to %s was interrupted before it returned; it changed nothing and is safe to call again."
	sideEffWording  = "The call to %s was interrupted before it returned; it may have partly run, so check its effect before calling it again."
	orphanWording   = "Result of tool call %s, whose call is missing from this conversation:"
)

// interruptedText is the text of a synthetic result for a call of name.
func interruptedText(name string, opts *Options) string {
	w := sideEffWording
	if slices.Contains(opts.ReadOnlyTools, name) {
		w = readOnlyWording
	}
	return fill(w, name)
}

// orphanHeader is the first line of an orphan note for call ref.
func orphanHeader(ref string) string { return fill(orphanWording, ref) }

func fill(w, s string) string {
	for i := 0; i+1 < len(w); i++ {
		if w[i] == '%' && w[i+1] == 's' {
			return w[:i] + s + w[i+2:]
		}
	}
	return w
}

// str views b as a string without copying; the bytes must not change while
// the string is in use.
func str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// parseArray checks that b is a valid JSON array (unless the caller
// already has: valid) and returns it parsed.
func parseArray(b []byte, valid bool) (gjson.Result, error) {
	s := str(b)
	if !valid && !jsonscan.ValidString(s) {
		return gjson.Result{}, ErrNotArray
	}
	r := gjson.Parse(s)
	if !r.IsArray() {
		return gjson.Result{}, ErrNotArray
	}
	return r, nil
}

// appendString appends s as a JSON string.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// idSet is an allocation-free duplicate detector for the fast scan: a
// Bloom filter in front of a list of the ids seen so far. The first 256 ids
// live in the struct itself (pooled with the check, see oaCheck); later
// ones go to a map.
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

// pcall is one call of the latest call turn during the fast scan.
type pcall struct {
	id, name        string
	hasID, answered bool
}

// pending tracks the calls of the latest call turn during the fast scan;
// the first 16 live in the struct itself.
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
	msg   int // index of the message (turn) that made it
	part  int // index of the call inside the turn (tool_calls or parts index)
	id    string
	name  string
	hasID bool
	newID string // final id; equal to id unless renamed
	res   int    // index into results, -1 when unanswered
}

// result is one tool result in the history.
type result struct {
	msg   int
	part  int // part index (Gemini), -1 for a whole message
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

// eachElement calls fn with each element of the JSON array arr until fn
// returns false. arr must be valid JSON (parseArray checked it). gjson's
// ForEach steps through every byte of an element to find its end; this
// skips strings with a vectorised search, and a message's text is most
// of its bytes.
//
// A value that is not an array goes through ForEach as before (one value,
// or an object's member values), so malformed histories read as they did.
func eachElement(arr gjson.Result, fn func(v gjson.Result) bool) {
	if !arr.IsArray() {
		arr.ForEach(func(_, v gjson.Result) bool { return fn(v) })
		return
	}
	raw := arr.Raw
	i := opened(raw, '[')
	if i < 0 {
		return
	}
	for {
		for i < len(raw) && (raw[i] <= ' ' || raw[i] == ',') {
			i++
		}
		if i >= len(raw) || raw[i] == ']' {
			return
		}
		j := skipValue(raw, i)
		if j <= i || !fn(gjson.Parse(raw[i:j])) {
			return // j <= i: not valid JSON after all
		}
		i = j
	}
}

// opened returns the offset just past the bracket (or brace) open that
// raw starts with after whitespace, or -1 when raw starts otherwise.
func opened(raw string, open byte) int {
	for i := 0; i < len(raw); i++ {
		if raw[i] == open {
			return i + 1
		}
		if raw[i] > ' ' {
			return -1
		}
	}
	return -1
}

// walkObject calls fn with each member of the JSON object raw: the key
// (unescaped) and the raw value. Unlike gjson's ForEach it never
// unescapes values, so it does not allocate for them. raw must be valid
// JSON (parseArray checked it).
func walkObject(raw string, fn func(key, val string) bool) {
	i := opened(raw, '{')
	if i < 0 {
		return
	}
	for i < len(raw) {
		for i < len(raw) && raw[i] != '"' {
			if raw[i] == '}' {
				return
			}
			i++
		}
		if i >= len(raw) {
			return
		}
		ks := i
		i = skipString(raw, i)
		if i < ks+2 {
			return // an unterminated string: not valid JSON after all
		}
		key := raw[ks+1 : i-1]
		if containsByte(key, '\\') {
			key = gjson.Parse(raw[ks:i]).Str
		}
		for i < len(raw) && (raw[i] <= ' ' || raw[i] == ':') {
			i++
		}
		vs := i
		i = skipValue(raw, i)
		if !fn(key, raw[vs:i]) {
			return
		}
	}
}

// skipString returns the index just past the string that starts at i:
// past the next quote that an even run of backslashes precedes, found with
// a vectorised search (message text is long).
func skipString(s string, i int) int {
	if j := jsonscan.StringEnd(s, i); j >= 0 {
		return j
	}
	return len(s)
}

// skipValue returns the index just past the value that starts at i.
func skipValue(s string, i int) int {
	if i >= len(s) {
		return i
	}
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth := 0
		for ; i < len(s); i++ {
			switch s[i] {
			case '"':
				i = skipString(s, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return len(s)
	}
	for ; i < len(s); i++ {
		switch s[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
	}
	return i
}

func containsByte(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return true
		}
	}
	return false
}

// strValue is the string a raw JSON value holds ("" for a non-string); it
// allocates only when the string has escapes.
func strValue(raw string) string {
	if len(raw) < 2 || raw[0] != '"' {
		return ""
	}
	if !containsByte(raw, '\\') {
		return raw[1 : len(raw)-1]
	}
	return gjson.Parse(raw).Str
}

// blankRaw reports whether the raw value is absent, null, "", [] or {}.
func blankRaw(raw string) bool {
	switch {
	case raw == "" || raw == "null" || raw == `""`:
		return true
	case raw[0] == '[' || raw[0] == '{':
		return emptyContainer(raw)
	}
	return false
}

// syntheticMarker is the part every synthetic result's text shares.
var syntheticMarker = []byte(" was interrupted before it returned; ")

// IsSynthetic reports whether a result message (in any format) carries a
// synthetic result written by repair, so callers can tell a call answered by
// repair on an earlier turn from one answered by its tool.
func IsSynthetic(msg []byte) bool {
	return bytes.Contains(msg, syntheticMarker)
}
