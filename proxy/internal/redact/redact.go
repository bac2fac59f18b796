// Package redact masks what a connection's redaction rules name in what
// chronicle stores of a turn: its messages, the stored answer and
// upstream body, the event log. The upstream always gets the original;
// only stored copies are masked.
//
// Rules are gjson paths, relative to each message, whose values are
// replaced whole by the mask (as a JSON string), and regular expressions
// whose matches in any JSON string value are replaced by the mask. Bytes
// are edited in place: a message without a match comes back as it is
// (the same slice, no copy), and one with matches is the original with
// the matched values spliced out; nothing is decoded and encoded again.
package redact

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
)

// DefaultMask replaces what a rule matches when the config names none.
const DefaultMask = "[REDACTED]"

// Pattern is a named regular expression.
type Pattern struct {
	Name  string
	Regex string
}

// Rules are one connection's compiled redaction rules. Nil Rules redact
// nothing; a connection without redaction has none.
type Rules struct {
	paths    []string
	patterns []*regexp.Regexp
	names    []string // rule names, paths first: "path:<p>", "pattern:<name>"
	mask     string
	maskJSON []byte // the mask as a JSON string
}

// New compiles rules; nil when there are none.
func New(paths []string, patterns []Pattern, mask string) (*Rules, error) {
	if len(paths) == 0 && len(patterns) == 0 {
		return nil, nil
	}
	if mask == "" {
		mask = DefaultMask
	}
	r := &Rules{paths: paths, mask: mask}
	r.maskJSON, _ = json.Marshal(mask)
	for _, p := range paths {
		r.names = append(r.names, "path:"+p)
	}
	for _, p := range patterns {
		re, err := regexp.Compile(p.Regex)
		if err != nil {
			return nil, fmt.Errorf("pattern %s: %w", p.Name, err)
		}
		r.patterns = append(r.patterns, re)
		r.names = append(r.names, "pattern:"+p.Name)
	}
	return r, nil
}

// Counts are how many values or matches each rule masked, by rule (the
// order of Rules' names). The zero value is ready to use.
type Counts struct{ n []int }

func (c *Counts) add(i, n int) {
	if c == nil || n == 0 {
		return
	}
	for len(c.n) <= i {
		c.n = append(c.n, 0)
	}
	c.n[i] += n
}

// Add adds o's counts to c.
func (c *Counts) Add(o *Counts) {
	for i, n := range o.n {
		c.add(i, n)
	}
}

// JSON is the run's redactions list, [{"rule":…,"count":…}…] for the
// rules that masked anything; nil when none did.
func (r *Rules) JSON(c *Counts) []byte {
	if r == nil || c == nil {
		return nil
	}
	var out []byte
	for i, n := range c.n {
		if n == 0 {
			continue
		}
		if out == nil {
			out = append(out, '[')
		} else {
			out = append(out, ',')
		}
		out = append(out, `{"rule":`...)
		q, _ := json.Marshal(r.names[i])
		out = append(out, q...)
		out = append(out, `,"count":`...)
		out = strconv.AppendInt(out, int64(n), 10)
		out = append(out, '}')
	}
	if out == nil {
		return nil
	}
	return append(out, ']')
}

// edit replaces msg[from:to] with with.
type edit struct {
	from, to int
	with     []byte
}

func splice(msg []byte, edits []edit) []byte {
	if len(edits) == 0 {
		return msg
	}
	slices.SortFunc(edits, func(a, b edit) int { return a.from - b.from })
	out := make([]byte, 0, len(msg))
	at := 0
	for _, e := range edits {
		if e.from < at {
			continue // inside a value an earlier edit replaced
		}
		out = append(out, msg[at:e.from]...)
		out = append(out, e.with...)
		at = e.to
	}
	return append(out, msg[at:]...)
}

// Message returns msg with the rules applied, counting in c (nil: not
// counted): msg itself when nothing matched.
func (r *Rules) Message(msg []byte, c *Counts) []byte {
	if r == nil {
		return msg
	}
	return r.strings(r.pathsIn(msg, c), c)
}

// pathsIn applies the path rules to msg, relative to its root.
func (r *Rules) pathsIn(msg []byte, c *Counts) []byte {
	for i, p := range r.paths {
		res := gjson.GetBytes(msg, p)
		if !res.Exists() {
			continue
		}
		var edits []edit
		switch {
		case res.Indexes != nil:
			for j, v := range res.Array() {
				if j < len(res.Indexes) && res.Indexes[j] > 0 {
					edits = append(edits, edit{res.Indexes[j], res.Indexes[j] + len(v.Raw), r.maskJSON})
				}
			}
		case res.Index > 0:
			edits = append(edits, edit{res.Index, res.Index + len(res.Raw), r.maskJSON})
		}
		if len(edits) > 0 {
			msg = splice(msg, edits)
			c.add(i, len(edits))
		}
	}
	return msg
}

// pathsEverywhere applies the path rules relative to every object of doc,
// at any depth: for a body that carries a message in another form than
// the one stored (an answer's choices[].message, without the fields the
// stored copy drops, or indented), so that a value a path names is never
// kept in clear, at the price of masking a like-named member elsewhere.
func (r *Rules) pathsEverywhere(doc []byte) []byte {
	v := gjson.ParseBytes(doc)
	if v.IsObject() {
		doc = r.pathsIn(doc, nil)
		v = gjson.ParseBytes(doc)
	} else if !v.IsArray() {
		return doc
	}
	var edits []edit
	v.ForEach(func(_, x gjson.Result) bool {
		if (x.IsObject() || x.IsArray()) && x.Index > 0 {
			raw := doc[x.Index : x.Index+len(x.Raw)]
			if y := r.pathsEverywhere(raw); !bytes.Equal(y, raw) {
				edits = append(edits, edit{x.Index, x.Index + len(x.Raw), y})
			}
		}
		return true
	})
	return splice(doc, edits)
}

// strings applies the patterns to every string value of the JSON doc.
func (r *Rules) strings(doc []byte, c *Counts) []byte {
	if len(r.patterns) == 0 {
		return doc
	}
	var edits []edit
	var walk func(v gjson.Result)
	walk = func(v gjson.Result) {
		switch {
		case v.Type == gjson.String:
			s, changed := v.Str, false
			for i, re := range r.patterns {
				if !re.MatchString(s) {
					continue // ReplaceAll copies the string even when nothing matches
				}
				n := 0
				s = re.ReplaceAllStringFunc(s, func(string) string { n++; return r.mask })
				if n > 0 {
					changed = true
					c.add(len(r.paths)+i, n)
				}
			}
			if changed && v.Index > 0 {
				q, _ := json.Marshal(s)
				edits = append(edits, edit{v.Index, v.Index + len(v.Raw), q})
			}
		case v.IsObject() || v.IsArray():
			v.ForEach(func(_, x gjson.Result) bool { walk(x); return true })
		}
	}
	root := gjson.ParseBytes(doc)
	if root.Type == gjson.String {
		// A bare string (Index 0 is "unknown" to gjson): wrap it.
		s := root.Str
		for i, re := range r.patterns {
			n := 0
			s = re.ReplaceAllStringFunc(s, func(string) string { n++; return r.mask })
			c.add(len(r.paths)+i, n)
		}
		if s == root.Str {
			return doc
		}
		q, _ := json.Marshal(s)
		return q
	}
	walk(root)
	return splice(doc, edits)
}

// Text applies the patterns to plain text (a run's partial answer).
func (r *Rules) Text(s string) string {
	if r == nil {
		return s
	}
	for _, re := range r.patterns {
		if re.MatchString(s) {
			s = re.ReplaceAllString(s, r.mask)
		}
	}
	return s
}

// Body masks a stored body (the non-stream answer, the audited upstream
// body): every message of pairs (original, redacted) the body carries
// verbatim is replaced by its redacted form, then the patterns are
// applied to every string in it. A body that is not JSON gets the
// patterns on its bytes.
func (r *Rules) Body(body []byte, orig, red [][]byte) []byte {
	if r == nil || len(body) == 0 {
		return body
	}
	missed := false
	for i := range orig {
		if i < len(red) && !bytes.Equal(orig[i], red[i]) && len(orig[i]) > 0 {
			if bytes.Contains(body, orig[i]) {
				body = bytes.ReplaceAll(body, orig[i], red[i])
			} else {
				missed = true
			}
		}
	}
	if !jsonscan.Valid(body) {
		return r.raw(body)
	}
	if missed && len(r.paths) > 0 {
		// A masked message the body does not carry verbatim: the path
		// rules go to every object of the body instead.
		body = r.pathsEverywhere(body)
	}
	return r.strings(body, nil)
}

// Event masks one event of the log: the patterns in every string of its
// JSON payload (an SSE event's data, from its first '{' or '[' to its
// last '}' or ']'); an event without a JSON payload gets them on its bytes.
func (r *Rules) Event(ev []byte) []byte {
	if r == nil || len(r.patterns) == 0 {
		return ev
	}
	from := bytes.IndexAny(ev, "{[")
	to := bytes.LastIndexAny(ev, "}]")
	if from < 0 || to < from || !jsonscan.Valid(ev[from:to+1]) {
		return r.raw(ev)
	}
	payload := ev[from : to+1]
	red := r.strings(payload, nil)
	if len(red) == len(payload) && bytes.Equal(red, payload) {
		return ev
	}
	out := make([]byte, 0, len(ev)-len(payload)+len(red))
	out = append(out, ev[:from]...)
	out = append(out, red...)
	return append(out, ev[to+1:]...)
}

func (r *Rules) raw(b []byte) []byte {
	for _, re := range r.patterns {
		if re.Match(b) {
			b = re.ReplaceAllLiteral(b, []byte(r.mask))
		}
	}
	return b
}
