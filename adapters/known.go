package adapters

import (
	"bytes"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
)

// KnownPrefix reports how many leading elements of the JSON array arr are
// byte-for-byte known[0..k), and the offset in arr of the element after
// them (or of the closing bracket). A stored message is a whole JSON
// value, so an element that starts with its bytes and is followed by a
// comma or the bracket is that message; nothing is parsed.
func KnownPrefix(arr []byte, known [][]byte) (k, off int) {
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return 0, 0
	}
	i = skipSpace(arr, i+1)
	for k < len(known) {
		m := known[k]
		if !bytes.HasPrefix(arr[i:], m) {
			break
		}
		j := skipSpace(arr, i+len(m))
		if j >= len(arr) {
			break
		}
		if arr[j] == ']' {
			return k + 1, j
		}
		if arr[j] != ',' {
			break
		}
		k++
		i = skipSpace(arr, j+1)
	}
	return k, i
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// validArray reports whether arr, a JSON array, is valid JSON, without
// validating again the leading elements that repeat known byte for byte
// (each known message is a whole JSON value already validated).
func validArray(arr []byte, known [][]byte) (Prefix, bool) {
	k, off := KnownPrefix(arr, known)
	if k == 0 {
		return Prefix{}, jsonscan.ValidString(str(arr))
	}
	return Prefix{Known: k, TailAt: off}, jsonscan.ValidArrayRest(arr, off)
}

// Prefix is what KnownPrefix found in a messages array: Known leading
// elements repeat the known messages byte for byte, and TailAt is the
// offset of the element after them (or of the closing bracket); both 0
// when none does.
type Prefix struct {
	Known, TailAt int
}

// arrayAt returns the array at path, a slice of body, when it is one and
// valid (its known leading elements taken as valid).
func arrayAt(body []byte, path string, known [][]byte) ([]byte, Prefix, bool) {
	// Find the array with one walk over the top-level members, which
	// skips strings with a vectorised search; gjson steps through every
	// byte before it (a long history's text). gjson reads what the walk
	// cannot (an escaped key before it, malformed JSON).
	var raw []byte
	if start, ok := topLevelValue(body, path); ok && start < len(body) && body[start] == '[' {
		if arr, p, ok := knownArrayAt(body, start, known); ok {
			return arr, p, jsonscan.ValidArrayRest(arr, p.TailAt)
		}
		if end, ok := skipValue(body, start); ok {
			raw = body[start:end]
		}
	}
	if raw == nil {
		r := get(body, path)
		if !r.IsArray() {
			return nil, Prefix{}, false
		}
		raw = rawSlice(body, r)
	}
	p, ok := validArray(raw, known)
	if !ok {
		return nil, Prefix{}, false
	}
	return raw, p, true
}

// insertAbsentKey adds "key":value as the last member of the JSON object
// body when the quoted key appears nowhere in body outside skip (a slice
// of body holding no top-level key: the messages array), so that it
// cannot be a member already; it reports false (and changes nothing)
// otherwise, and the caller falls back to a full parse. It reads body
// with vectorised searches instead of walking the object, and keeps every
// byte of body before the closing brace. A body with \u escapes of ASCII
// letters or '_' outside skip (a key could be spelled with them) also
// falls back, as does a nil value.
func insertAbsentKey(body, skip []byte, key string, value []byte) ([]byte, bool) {
	return insertAbsentKeys(nil, body, skip, newMember{key, value})
}

// newMember is one "key":value to add to an object.
type newMember struct {
	key   string
	value []byte
}

// insertAbsentKeys is insertAbsentKey for several members, added in
// order, in one copy: into dst when it has the room (dst must not overlap
// body), else into a new buffer. It reports false unless every key is
// absent.
func insertAbsentKeys(dst, body, skip []byte, members ...newMember) ([]byte, bool) {
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

// spliceAbsentKeys is insertAbsentKeys without the copy: it returns the
// members' bytes and the offset in body where they go (see
// Upstream.Insert).
func spliceAbsentKeys(body, skip []byte, members ...newMember) (insert []byte, at int, ok bool) {
	end, comma, ok := insertionPoint(body, skip, members)
	if !ok {
		return nil, 0, false
	}
	return appendMembers(make([]byte, 0, membersLen(members)), comma, members), end, true
}

// insertionPoint is where insertAbsentKeys adds members to body: the
// offset of its closing brace, and whether a comma goes first (the object
// has members). It reports false when a member might be present already
// (see insertAbsentKey) or body is not plainly an object.
func insertionPoint(body, skip []byte, members []newMember) (end int, comma bool, ok bool) {
	i := skipSpace(body, 0)
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
		if m.value == nil {
			return 0, false, false
		}
		var buf [64]byte
		quoted := append(append(append(buf[:0], '"'), m.key...), '"')
		if bytes.Contains(before, quoted) || bytes.Contains(after, quoted) {
			return 0, false, false
		}
	}
	return end, skipSpace(body, i+1) != end, true
}

// membersLen is the length appendMembers adds, at most.
func membersLen(members []newMember) int {
	n := 0
	for _, m := range members {
		n += len(m.key) + len(m.value) + 4
	}
	return n
}

// appendMembers appends ,"key":value for each member (no comma before the
// first unless comma).
func appendMembers(out []byte, comma bool, members []newMember) []byte {
	for _, m := range members {
		if comma {
			out = append(out, ',')
		}
		comma = true
		out = append(append(append(append(out, '"'), m.key...), '"', ':'), m.value...)
	}
	return out
}

// outside returns body without sub, when sub is a slice of body: the part
// before it and the part after it; else body whole (and nil). A needle
// that starts with a quote cannot straddle sub, a JSON value.
func outside(body, sub []byte) (before, after []byte) {
	off, ok := offsetIn(body, sub)
	if !ok {
		return body, nil
	}
	return body[:off], body[off+len(sub):]
}

// offsetIn returns where sub starts in body, when sub is a (non-empty)
// slice of body.
func offsetIn(body, sub []byte) (int, bool) {
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

// ValidAround reports whether body is valid JSON given that sub, a slice
// of body holding one valid array or object (the messages array that
// MessagesKnown returned), is: it reads only the bytes around sub. A sub
// that is not a slice of body (gjson's copy) has body read whole.
func ValidAround(body, sub []byte) bool {
	off, ok := offsetIn(body, sub)
	if !ok {
		return jsonscan.Valid(body)
	}
	return jsonscan.ValidExcept(body, off, off+len(sub))
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

// plainJSONString quotes s when it needs no escaping; nil otherwise.
func plainJSONString(s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
			return nil
		}
	}
	out := make([]byte, 0, len(s)+2)
	return append(append(append(out, '"'), s...), '"')
}

// nonEmpty is nil for the empty JSON string, so nothing is inserted.
func nonEmpty(quoted []byte) []byte {
	if len(quoted) <= 2 {
		return nil
	}
	return quoted
}

// knownArrayAt finds the end of the array that opens at body[start] and
// the elements it repeats from known without reading them: its known
// elements from KnownPrefix (a memcmp each), its end from skipping the
// rest. ok is false when that does not apply (no known element repeated,
// malformed JSON); the caller then skips or reads the whole array.
//
// tailAt is the offset in arr of the first element that is not known (or
// of the closing bracket).
func knownArrayAt(body []byte, start int, known [][]byte) (arr []byte, p Prefix, ok bool) {
	k, off := KnownPrefix(body[start:], known)
	if k == 0 {
		return nil, Prefix{}, false
	}
	i := start + off
	for {
		i = skipSpace(body, i)
		if i >= len(body) {
			return nil, Prefix{}, false
		}
		if body[i] == ']' {
			return body[start : i+1], Prefix{Known: k, TailAt: off}, true
		}
		if i, ok = skipValue(body, i); !ok {
			return nil, Prefix{}, false
		}
		i = skipSpace(body, i)
		if i < len(body) && body[i] == ',' {
			i++
		} else if i >= len(body) || body[i] != ']' {
			return nil, Prefix{}, false
		}
	}
}

// topLevelValue returns the offset of the value of the first top-level
// member named key. It gives up (ok false) on a key spelled with escapes.
func topLevelValue(body []byte, key string) (at int, ok bool) {
	found := false
	walked := walkTopLevel(body, func(name []byte, i int) bool {
		if string(name) == key {
			at, found = i, true
		}
		return found
	})
	return at, walked && found
}

// skipValue returns the offset just past the JSON value at b[i:]. It
// follows strings and nesting only; the value is validated elsewhere.
func skipValue(b []byte, i int) (int, bool) {
	depth := 0
	for i < len(b) {
		switch c := b[i]; c {
		case '"':
			j, ok := stringEnd(b, i)
			if !ok {
				return 0, false
			}
			i = j
		case '{', '[':
			depth++
			i++
		case '}', ']':
			depth--
			i++
			if depth < 0 {
				return 0, false
			}
		default:
			if depth == 0 {
				// A number or literal: up to the next delimiter.
				for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] > ' ' {
					i++
				}
				return i, true
			}
			i++
		}
		if depth == 0 {
			return i, true
		}
	}
	return 0, false
}

// modelAndStream reads the top-level "model" (a string) and "stream" (a
// bool) as gjson would, in one walk over the members that skips values
// without parsing them (a history of 200 messages is mostly string bytes,
// which the skip passes with a vectorised search). A body the walk cannot
// read (an escaped key, malformed JSON) is read with gjson.
func modelAndStream(body []byte) (model string, stream bool) {
	var modelRaw, streamRaw []byte
	var seenModel, seenStream, bad bool
	raw := func(at int) []byte {
		end, ok := skipValue(body, at)
		bad = bad || !ok
		return body[at:max(at, end)]
	}
	ok := walkTopLevel(body, func(key []byte, at int) bool {
		switch {
		case !seenModel && string(key) == "model":
			modelRaw, seenModel = raw(at), true
		case !seenStream && string(key) == "stream":
			streamRaw, seenStream = raw(at), true
		}
		return bad || seenModel && seenStream
	})
	if !ok || bad {
		return get(body, "model").String(), get(body, "stream").Bool()
	}
	if seenModel {
		model = gjson.ParseBytes(modelRaw).String()
	}
	if seenStream {
		stream = gjson.ParseBytes(streamRaw).Bool()
	}
	return model, stream
}

// walkTopLevel calls fn with each top-level member's key and the offset
// of its value, and skips the value, until fn returns true (stop). ok is
// false when body is not an object it can read (a key with escapes,
// malformed JSON): nothing it reported can then be relied on.
func walkTopLevel(body []byte, fn func(key []byte, at int) (stop bool)) (ok bool) {
	return walkMembers(body, func(key []byte, at int) (bool, int) { return fn(key, at), 0 })
}

// walkMembers is walkTopLevel for a caller that skips some values itself:
// fn returns the offset just past the value when it found it (0: not
// found, walkMembers skips it).
func walkMembers(body []byte, fn func(key []byte, at int) (stop bool, end int)) (ok bool) {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return false
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return true
	}
	for {
		if i >= len(body) || body[i] != '"' {
			return false
		}
		j := i + 1
		for j < len(body) && body[j] != '"' {
			if body[j] == '\\' {
				return false
			}
			j++
		}
		if j >= len(body) {
			return false
		}
		key := body[i+1 : j]
		i = skipSpace(body, j+1)
		if i >= len(body) || body[i] != ':' {
			return false
		}
		i = skipSpace(body, i+1)
		stop, end := fn(key, i)
		if stop {
			return true
		}
		if end > i {
			i = end
		} else if i, ok = skipValue(body, i); !ok {
			return false
		}
		i = skipSpace(body, i)
		if i >= len(body) {
			return false
		}
		if body[i] == '}' {
			return true
		}
		if body[i] != ',' {
			return false
		}
		i = skipSpace(body, i+1)
	}
}

// stringEnd returns the offset after the closing quote of the JSON string
// that opens at b[i], searching for quotes with a vectorised scan.
func stringEnd(b []byte, i int) (int, bool) {
	j := jsonscan.StringEnd(str(b), i)
	return j, j >= 0
}

// compactJSON appends src without its insignificant whitespace to dst, as
// encoding/json's Compact does for valid JSON, copying strings whole
// (found with stringEnd) instead of stepping through them byte by byte.
// src must be valid JSON.
func compactJSON(dst, src []byte) []byte {
	for i := 0; i < len(src); {
		switch c := src[i]; c {
		case ' ', '\t', '\n', '\r':
			i++
		case '"':
			j, ok := stringEnd(src, i)
			if !ok {
				return append(dst, src[i:]...)
			}
			dst = append(dst, src[i:j]...)
			i = j
		default:
			j := i + 1
			for j < len(src) && src[j] != '"' && src[j] != ' ' && src[j] != '\t' && src[j] != '\n' && src[j] != '\r' {
				j++
			}
			dst = append(dst, src[i:j]...)
			i = j
		}
	}
	return dst
}
