package repair

import (
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
)

// What a format's rules read and write histories with. A history was
// checked (jsonscan) before it is read, so these helpers skip values
// without validating them and never decode a value they only pass over;
// on malformed input they stop early and never panic.

// str views b as a string without copying; the bytes must not change while
// the string is in use.
func str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// Each calls fn with each element of the JSON array arr until fn
// returns false. arr must be valid JSON (parseArray checked it). gjson's
// ForEach steps through every byte of an element to find its end; this
// skips strings with a vectorised search, and a message's text is most
// of its bytes.
//
// A value that is not an array goes through ForEach as before (one value,
// or an object's member values), so malformed histories read as they did.
func Each(arr gjson.Result, fn func(v gjson.Result) bool) {
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

// Members calls fn with each member of the JSON object raw: the key
// (unescaped) and the raw value. Unlike gjson's ForEach it never
// unescapes values, so it does not allocate for them. raw must be valid
// JSON (parseArray checked it).
func Members(raw string, fn func(key, val string) bool) {
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

// StringValue is the string a raw JSON value holds ("" for a non-string); it
// allocates only when the string has escapes.
func StringValue(raw string) string {
	if len(raw) < 2 || raw[0] != '"' {
		return ""
	}
	if !containsByte(raw, '\\') {
		return raw[1 : len(raw)-1]
	}
	return gjson.Parse(raw).Str
}

// Blank reports whether the raw value is absent, null, "", [] or {}.
func Blank(raw string) bool {
	switch {
	case raw == "" || raw == "null" || raw == `""`:
		return true
	case raw[0] == '[' || raw[0] == '{':
		return EmptyContainer(raw)
	}
	return false
}

// EmptyContainer reports whether raw, an array or object, is [] or {}
// (with any whitespace).
func EmptyContainer(raw string) bool {
	for i := 1; i < len(raw); i++ {
		if raw[i] > ' ' {
			return raw[i] == ']' || raw[i] == '}'
		}
	}
	return true
}

// AppendString appends s as a JSON string.
func AppendString(dst []byte, s string) []byte {
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
