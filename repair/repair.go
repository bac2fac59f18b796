package repair

import (
	"bytes"
	"errors"
	"slices"

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

// run is what every repair does around its format's slow path: check
// that messages is a JSON array (unless opts says the caller has), return
// it as it is when the check finds no defect, else rebuild it with slow.
func run(f Rules, messages []byte, opts Options, slow func(h *history, opts Options) builder) (Result, error) {
	arr, err := parseArray(messages, opts.Valid)
	if err != nil {
		return Result{}, err
	}
	if valid(f, arr) {
		return Result{Messages: messages}, nil
	}
	b := slow(read(f, arr), opts)
	return b.result(messages), nil
}

// builder is a repaired history being written: the output array, the
// edits and the interrupted calls.
type builder struct {
	out []byte
	res Result
}

func newBuilder(size int) builder {
	b := builder{out: make([]byte, 0, size+256)}
	b.out = append(b.out, '[')
	return b
}

// emit appends one element.
func (b *builder) emit(el string) {
	if len(b.out) > 1 {
		b.out = append(b.out, ',')
	}
	b.out = append(b.out, el...)
}

// edit records one edit.
func (b *builder) edit(kind, id, name string) {
	b.res.Edits = append(b.res.Edits, Edit{Kind: kind, CallID: clone(id), Name: clone(name)})
}

// interrupted records a call answered with a synthetic result.
func (b *builder) interrupted(id, name string) {
	b.res.Interrupted = append(b.res.Interrupted, Call{ID: clone(id), Name: clone(name)})
}

// result is the outcome: the input itself when nothing was edited.
func (b *builder) result(input []byte) Result {
	if len(b.res.Edits) == 0 {
		return Result{Messages: input}
	}
	res := b.res
	res.Messages = append(b.out, ']')
	res.Changed = true
	return res
}

// syntheticMarker is the part every synthetic result's text shares.
var syntheticMarker = []byte(" was interrupted before it returned; ")

// IsSynthetic reports whether a result message (in any format) carries a
// synthetic result written by repair, so callers can tell a call answered by
// repair on an earlier turn from one answered by its tool.
func IsSynthetic(msg []byte) bool {
	return bytes.Contains(msg, syntheticMarker)
}
