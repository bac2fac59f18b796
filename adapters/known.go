package adapters

import (
	"bytes"

	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
)

// KnownPrefix reports how many leading elements of the JSON array arr are
// byte-for-byte known[0..k), and the offset in arr of the element after
// them (or of the closing bracket). A stored message is a whole JSON
// value, so an element that starts with its bytes and is followed by a
// comma or the bracket is that message; nothing is parsed.
func KnownPrefix(arr []byte, known [][]byte) (k, off int) {
	i := rawjson.SkipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return 0, 0
	}
	i = rawjson.SkipSpace(arr, i+1)
	for k < len(known) {
		m := known[k]
		if !bytes.HasPrefix(arr[i:], m) {
			break
		}
		j := rawjson.SkipSpace(arr, i+len(m))
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
		i = rawjson.SkipSpace(arr, j+1)
	}
	return k, i
}

// ValidArray reports whether arr, a JSON array, is valid JSON, without
// validating again the leading elements that repeat known byte for byte
// (each known message is a whole JSON value already validated).
func ValidArray(arr []byte, known [][]byte) (Prefix, bool) {
	k, off := KnownPrefix(arr, known)
	if k == 0 {
		return Prefix{}, jsonscan.ValidString(rawjson.Str(arr))
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

// KnownArray returns the array at path, a slice of body, when it is one and
// valid (its known leading elements taken as valid).
func KnownArray(body []byte, path string, known [][]byte) ([]byte, Prefix, bool) {
	// Find the array with one walk over the top-level members, which
	// skips strings with a vectorised search; gjson steps through every
	// byte before it (a long history's text). gjson reads what the walk
	// cannot (an escaped key before it, malformed JSON).
	var raw []byte
	if start, ok := rawjson.TopLevelValue(body, path); ok && start < len(body) && body[start] == '[' {
		if arr, p, ok := knownArrayAt(body, start, known); ok {
			return arr, p, jsonscan.ValidArrayRest(arr, p.TailAt)
		}
		if end, ok := rawjson.SkipValue(body, start); ok {
			raw = body[start:end]
		}
	}
	if raw == nil {
		r := rawjson.Get(body, path)
		if !r.IsArray() {
			return nil, Prefix{}, false
		}
		raw = rawjson.RawSlice(body, r)
	}
	p, ok := ValidArray(raw, known)
	if !ok {
		return nil, Prefix{}, false
	}
	return raw, p, true
}

// ValidAround reports whether body is valid JSON given that sub, a slice
// of body holding one valid array or object (the messages array that
// MessagesKnown returned), is: it reads only the bytes around sub. A sub
// that is not a slice of body (gjson's copy) has body read whole.
func ValidAround(body, sub []byte) bool {
	off, ok := rawjson.OffsetIn(body, sub)
	if !ok {
		return jsonscan.Valid(body)
	}
	return jsonscan.ValidExcept(body, off, off+len(sub))
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
		i = rawjson.SkipSpace(body, i)
		if i >= len(body) {
			return nil, Prefix{}, false
		}
		if body[i] == ']' {
			return body[start : i+1], Prefix{Known: k, TailAt: off}, true
		}
		if i, ok = rawjson.SkipValue(body, i); !ok {
			return nil, Prefix{}, false
		}
		i = rawjson.SkipSpace(body, i)
		if i < len(body) && body[i] == ',' {
			i++
		} else if i >= len(body) || body[i] != ']' {
			return nil, Prefix{}, false
		}
	}
}
