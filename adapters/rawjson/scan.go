package rawjson

import "github.com/chronicle-proxy/chronicle/adapters/jsonscan"

func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// SkipValue returns the offset just past the JSON value at b[i:]. It
// follows strings and nesting only; the value is validated elsewhere.
func SkipValue(b []byte, i int) (int, bool) {
	depth := 0
	for i < len(b) {
		switch c := b[i]; c {
		case '"':
			j, ok := StringEnd(b, i)
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

// StringEnd returns the offset after the closing quote of the JSON string
// that opens at b[i], searching for quotes with a vectorised scan.
func StringEnd(b []byte, i int) (int, bool) {
	j := jsonscan.StringEnd(Str(b), i)
	return j, j >= 0
}

// Compact appends src without its insignificant whitespace to dst, as
// encoding/json's Compact does for valid JSON, copying strings whole
// (found with StringEnd) instead of stepping through them byte by byte.
// src must be valid JSON.
func Compact(dst, src []byte) []byte {
	for i := 0; i < len(src); {
		switch c := src[i]; c {
		case ' ', '\t', '\n', '\r':
			i++
		case '"':
			j, ok := StringEnd(src, i)
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

// ArrayElements appends the [start, end) offsets of each element of the
// JSON array arr to spans, with the vectorised skip; ok is false when arr
// is not an array it can read.
func ArrayElements(arr []byte, spans [][2]int) ([][2]int, bool) {
	i := SkipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return nil, false
	}
	i = SkipSpace(arr, i+1)
	if i < len(arr) && arr[i] == ']' {
		return spans, SkipSpace(arr, i+1) == len(arr)
	}
	for {
		end, ok := SkipValue(arr, i)
		if !ok || end <= i {
			return nil, false
		}
		spans = append(spans, [2]int{i, end})
		i = SkipSpace(arr, end)
		if i >= len(arr) {
			return nil, false
		}
		switch arr[i] {
		case ']':
			return spans, SkipSpace(arr, i+1) == len(arr)
		case ',':
			i = SkipSpace(arr, i+1)
		default:
			return nil, false
		}
	}
}

// MemberValues returns the raw values of the named top-level members of
// the JSON object obj (nil for a missing one; the first of duplicates), in
// one walk. ok is false when WalkTopLevel cannot read obj.
func MemberValues(obj []byte, names ...string) (vals [8][]byte, ok bool) {
	ok = WalkMembers(obj, func(key []byte, at int) (bool, int) {
		for n, name := range names {
			if vals[n] == nil && string(key) == name {
				end, fine := SkipValue(obj, at)
				if !fine {
					return false, 0
				}
				vals[n] = obj[at:end]
				return false, end
			}
		}
		return false, 0
	})
	return vals, ok
}

// Member is the value of the member name of the object obj, if any.
func Member(obj, name string) (val string, ok bool) {
	EachMember(obj, func(key, v string) bool {
		if KeyName(key) == name {
			val, ok = v, true
			return false
		}
		return true
	})
	return val, ok
}

// skipWSs returns the index of the first non-space byte at or after i.
func skipWSs(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// ValueEnd returns the index just after the JSON value starting at i, or -1.
func ValueEnd(s string, i int) int {
	if i >= len(s) {
		return -1
	}
	switch s[i] {
	case '"':
		return jsonscan.StringEnd(s, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(s); j++ {
			switch s[j] {
			case '"':
				k := ValueEnd(s, j)
				if k < 0 {
					return -1
				}
				j = k - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(s) {
		c := s[j]
		if c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			break
		}
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// EachMember calls fn with the raw key (quotes included) and raw value of
// each member of the object obj, until fn returns false.
func EachMember(obj string, fn func(key, val string) bool) {
	i := skipWSs(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return
	}
	i++
	for {
		i = skipWSs(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return
		}
		ke := ValueEnd(obj, i)
		if ke < 0 {
			return
		}
		key := obj[i:ke]
		i = skipWSs(obj, ke)
		if i >= len(obj) || obj[i] != ':' {
			return
		}
		i = skipWSs(obj, i+1)
		ve := ValueEnd(obj, i)
		if ve < 0 {
			return
		}
		if !fn(key, obj[i:ve]) {
			return
		}
		i = skipWSs(obj, ve)
		if i >= len(obj) || obj[i] != ',' {
			return
		}
		i++
	}
}

// EachElement calls fn with each raw element of the array arr, until fn
// returns false.
func EachElement(arr string, fn func(val string) bool) {
	i := skipWSs(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return
	}
	i++
	for {
		i = skipWSs(arr, i)
		if i >= len(arr) || arr[i] == ']' {
			return
		}
		ve := ValueEnd(arr, i)
		if ve < 0 {
			return
		}
		if !fn(arr[i:ve]) {
			return
		}
		i = skipWSs(arr, ve)
		if i >= len(arr) || arr[i] != ',' {
			return
		}
		i++
	}
}

// MemberRaw returns the raw value of key (given with quotes) in obj, "" when
// absent.
func MemberRaw(obj, key string) string {
	var out string
	EachMember(obj, func(k, v string) bool {
		if k == key {
			out = v
			return false
		}
		return true
	})
	return out
}
