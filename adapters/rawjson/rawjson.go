// Package rawjson reads and edits JSON text in place, for the wire
// formats' hot paths: views of bytes as strings, member and element walks
// that skip strings with a vectorised search and keep values in their
// escaped form (gjson decodes every escaped string it visits, one
// allocation each), top-level lookups, and insertions of absent members
// into a body without re-encoding it. Inputs are validated elsewhere
// (adapters/jsonscan); on invalid input the helpers stop early and never
// panic. It knows no wire format.
package rawjson

import (
	"encoding/json"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// Str returns a string that aliases b without copying. The caller must not
// let it outlive b or modify b while it is in use.
func Str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// BytesOf returns bytes that alias s without copying; the caller must not
// modify them.
func BytesOf(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// Get is gjson.GetBytes without the copy gjson makes: the result's Raw
// aliases body.
func Get(body []byte, path string) gjson.Result {
	return gjson.Get(Str(body), path)
}

// RawSlice returns the bytes of r as a slice of body (no copy) when r
// indexes body, else a copy of r.Raw; nil when r does not exist.
func RawSlice(body []byte, r gjson.Result) []byte {
	if !r.Exists() {
		return nil
	}
	if r.Index > 0 || (len(body) >= len(r.Raw) && Str(body[:len(r.Raw)]) == r.Raw) {
		return body[r.Index : r.Index+len(r.Raw)]
	}
	return []byte(r.Raw)
}

// Unquote returns the content of a raw JSON string literal without its
// quotes, still escaped.
func Unquote(raw string) string {
	if len(raw) >= 2 && raw[0] == '"' {
		return raw[1 : len(raw)-1]
	}
	return ""
}

// Role returns a constant for common roles so walking messages does not
// allocate a string per message.
func Role(r gjson.Result) string {
	switch r.Raw {
	case `"user"`:
		return "user"
	case `"assistant"`:
		return "assistant"
	case `"system"`:
		return "system"
	case `"developer"`:
		return "developer"
	case `"tool"`:
		return "tool"
	case `"model"`:
		return "model"
	case `"function"`:
		return "function"
	}
	return r.String()
}

// String is gjson's String of one raw JSON value ("" for none).
func String(v string) string {
	if len(v) >= 2 && v[0] == '"' && strings.IndexByte(v, '\\') < 0 {
		return v[1 : len(v)-1]
	}
	return gjson.Parse(v).String()
}

func AppendString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// KeyName is an object key as EachMember gives it (quoted), unquoted.
func KeyName(key string) string {
	if len(key) >= 2 && strings.IndexByte(key, '\\') < 0 {
		return key[1 : len(key)-1]
	}
	return gjson.Parse(key).Str
}

// Int is gjson's Int of a JSON value, without a float parse for the
// plain integers token counts are.
func Int(v string) int64 {
	if v == "" || len(v) > 18 {
		return gjson.Parse(v).Int()
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return gjson.Parse(v).Int()
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// NonNegative reads a non-negative JSON integer; other values give -1.
func NonNegative(v string) int64 {
	if v == "" {
		return -1
	}
	var n int64
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return -1
		}
		n = n*10 + int64(v[i]-'0')
	}
	return n
}

func AppendQuoted(b, escaped []byte) []byte {
	b = append(b, '"')
	b = append(b, escaped...)
	return append(b, '"')
}

func IsString(v string) bool { return len(v) >= 2 && v[0] == '"' }

func IsNull(v string) bool { return v == "null" }

func IsObject(v string) bool { return len(v) > 0 && v[0] == '{' }
