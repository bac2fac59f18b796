package rawjson

import (
	"bytes"
	"unsafe"
)

// InsertAbsentKey adds "key":value as the last member of the JSON object
// body when the quoted key appears nowhere in body outside skip (a slice
// of body holding no top-level key: the messages array), so that it
// cannot be a member already; it reports false (and changes nothing)
// otherwise, and the caller falls back to a full parse. It reads body
// with vectorised searches instead of walking the object, and keeps every
// byte of body before the closing brace. A body with \u escapes of ASCII
// letters or '_' outside skip (a key could be spelled with them) also
// falls back, as does a nil value.
func InsertAbsentKey(body, skip []byte, key string, value []byte) ([]byte, bool) {
	return InsertAbsentKeys(nil, body, skip, Pair{key, value})
}

// Pair is one "key":value to add to an object.
type Pair struct {
	Key   string
	Value []byte
}

// InsertAbsentKeys is InsertAbsentKey for several members, added in
// order, in one copy: into dst when it has the room (dst must not overlap
// body), else into a new buffer. It reports false unless every key is
// absent.
func InsertAbsentKeys(dst, body, skip []byte, members ...Pair) ([]byte, bool) {
	end, comma, ok := insertionPoint(body, skip, members)
	if !ok {
		return nil, false
	}
	n := len(body) + membersLen(members)
	out := dst[:0]
	if cap(out) < n {
		out = make([]byte, 0, n)
	}
	out = appendMembers(append(out, body[:end]...), comma, members)
	return append(out, body[end:]...), true
}

// SpliceAbsentKeys is InsertAbsentKeys without the copy: it returns the
// members' bytes and the offset in body where they go (see
// Upstream.Insert).
func SpliceAbsentKeys(body, skip []byte, members ...Pair) (insert []byte, at int, ok bool) {
	end, comma, ok := insertionPoint(body, skip, members)
	if !ok {
		return nil, 0, false
	}
	return appendMembers(make([]byte, 0, membersLen(members)), comma, members), end, true
}

// insertionPoint is where InsertAbsentKeys adds members to body: the
// offset of its closing brace, and whether a comma goes first (the object
// has members). It reports false when a member might be present already
// (see InsertAbsentKey) or body is not plainly an object.
func insertionPoint(body, skip []byte, members []Pair) (end int, comma bool, ok bool) {
	i := SkipSpace(body, 0)
	end = len(body) - 1
	for end > i && (body[end] == ' ' || body[end] == '\n' || body[end] == '\r' || body[end] == '\t') {
		end--
	}
	if i >= end || body[i] != '{' || body[end] != '}' {
		return 0, false, false
	}
	before, after := outside(body, skip)
	if escapesASCIILetter(before) || escapesASCIILetter(after) {
		return 0, false, false
	}
	for _, m := range members {
		if m.Value == nil {
			return 0, false, false
		}
		var buf [64]byte
		quoted := append(append(append(buf[:0], '"'), m.Key...), '"')
		if bytes.Contains(before, quoted) || bytes.Contains(after, quoted) {
			return 0, false, false
		}
	}
	return end, SkipSpace(body, i+1) != end, true
}

// membersLen is the length appendMembers adds, at most.
func membersLen(members []Pair) int {
	n := 0
	for _, m := range members {
		n += len(m.Key) + len(m.Value) + 4
	}
	return n
}

// appendMembers appends ,"key":value for each member (no comma before the
// first unless comma).
func appendMembers(out []byte, comma bool, members []Pair) []byte {
	for _, m := range members {
		if comma {
			out = append(out, ',')
		}
		comma = true
		out = append(append(append(append(out, '"'), m.Key...), '"', ':'), m.Value...)
	}
	return out
}

// outside returns body without sub, when sub is a slice of body: the part
// before it and the part after it; else body whole (and nil). A needle
// that starts with a quote cannot straddle sub, a JSON value.
func outside(body, sub []byte) (before, after []byte) {
	off, ok := OffsetIn(body, sub)
	if !ok {
		return body, nil
	}
	return body[:off], body[off+len(sub):]
}

// OffsetIn returns where sub starts in body, when sub is a (non-empty)
// slice of body.
func OffsetIn(body, sub []byte) (int, bool) {
	if len(sub) == 0 || len(body) == 0 {
		return 0, false
	}
	b0 := uintptr(unsafe.Pointer(unsafe.SliceData(body)))
	s0 := uintptr(unsafe.Pointer(unsafe.SliceData(sub)))
	if s0 < b0 || s0+uintptr(len(sub)) > b0+uintptr(len(body)) {
		return 0, false
	}
	return int(s0 - b0), true
}

// escapesASCIILetter reports whether b holds a \u005X, \u006X or \u007X
// escape (how '_' and the ASCII letters can be spelled in a JSON string).
func escapesASCIILetter(b []byte) bool {
	for {
		i := bytes.Index(b, []byte(`\u00`))
		if i < 0 || i+5 >= len(b) {
			return false
		}
		if c := b[i+4]; c == '5' || c == '6' || c == '7' {
			return true
		}
		b = b[i+4:]
	}
}

// PlainString quotes s when it needs no escaping; nil otherwise.
func PlainString(s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
			return nil
		}
	}
	out := make([]byte, 0, len(s)+2)
	return append(append(append(out, '"'), s...), '"')
}

// NonEmpty is nil for the empty JSON string, so nothing is inserted.
func NonEmpty(quoted []byte) []byte {
	if len(quoted) <= 2 {
		return nil
	}
	return quoted
}
