package jsonscan

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// MaxDepth is the deepest nesting of objects and arrays Valid accepts, the
// same bound encoding/json's decoder sets. Deeper input is invalid: no
// real request nests that far, and a validator that recursed once per
// level (gjson's does) overflows the goroutine stack, which kills the
// process, on a few megabytes of '['.
const MaxDepth = 10000

// Valid reports whether b is one JSON value, with only whitespace around
// it, nested at most MaxDepth deep. It accepts what gjson.Valid accepts
// (strings are checked for control bytes and escapes, not for UTF-8), in
// one pass without recursion or allocation; string contents, most of the
// bytes of a chat request, are scanned eight bytes at a time.
func Valid(b []byte) bool { return validFrom(b, 0, wholeValue, -1, 0) }

// ValidExcept is Valid for b given that b[at:end] is one valid JSON array,
// object or string already checked (a request's messages array): it reads
// only the bytes around it. An at where no value starts in b is never
// skipped, so the answer is Valid's either way.
func ValidExcept(b []byte, at, end int) bool {
	if at < 0 || end <= at || end > len(b) {
		return Valid(b)
	}
	return validFrom(b, 0, wholeValue, at, end)
}

// ValidArrayRest reports whether b is a valid JSON array (only whitespace
// after it) given that it opens with '[' and that its elements before off
// are valid: it checks only b[off:], where off is the offset of the next
// element or of the closing bracket. A messages array whose leading
// elements repeat stored messages is checked this way without a copy.
func ValidArrayRest(b []byte, off int) bool {
	open := skipWS(b, 0)
	if open >= len(b) || b[open] != '[' || off <= open || off > len(b) {
		return false
	}
	// What may come at off depends on what came before it: after '[' an
	// element or ']', after a comma an element ("[1,]" is not valid),
	// after an element a comma or ']'.
	prev := off - 1
	for prev > open && isSpace(b[prev]) {
		prev--
	}
	switch b[prev] {
	case '[':
		return validFrom(b, off, arrayRest, -1, 0)
	case ',':
		return validFrom(b, off, arrayElement, -1, 0)
	}
	return validFrom(b, off, arrayAfter, -1, 0)
}

// Where validFrom starts.
const (
	wholeValue   = iota // one whole value
	arrayRest           // in an open array: an element or the closing bracket
	arrayElement        // in an open array, after a comma: an element
	arrayAfter          // in an open array, after an element: a comma or the closing bracket
)

// validFrom checks b from i, as start says, taking the value at skipAt
// (up to skipEnd) as valid without reading it; skipAt -1 skips nothing.
func validFrom(b []byte, i int, start int, skipAt, skipEnd int) bool {
	// open holds one bit per open container: 1 object, 0 array.
	var open [MaxDepth/64 + 1]uint64
	depth := 0
	i = skipWS(b, i)
	if start != wholeValue {
		depth = 1 // open[0] is 0: an array
		if start == arrayAfter || start == arrayRest && i < len(b) && b[i] == ']' {
			goto after
		}
	}
value:
	if i >= len(b) {
		return false
	}
	if i == skipAt {
		i = skipEnd
		goto after
	}
	switch c := b[i]; c {
	case '{', '[':
		if depth == MaxDepth {
			return false
		}
		if c == '{' {
			open[depth>>6] |= 1 << (depth & 63)
		} else {
			open[depth>>6] &^= 1 << (depth & 63)
		}
		depth++
		closing := byte(']')
		if c == '{' {
			closing = '}'
		}
		if i = skipWS(b, i+1); i < len(b) && b[i] == closing {
			depth--
			i++
			goto after
		}
		if c == '{' {
			goto key
		}
		goto value
	case '"':
		if i = validString(b, i+1); i < 0 {
			return false
		}
	case 't':
		if i = literal(b, i, "true"); i < 0 {
			return false
		}
	case 'f':
		if i = literal(b, i, "false"); i < 0 {
			return false
		}
	case 'n':
		if i = literal(b, i, "null"); i < 0 {
			return false
		}
	default:
		if i = validNumber(b, i); i < 0 {
			return false
		}
	}
after:
	i = skipWS(b, i)
	if depth == 0 {
		return i == len(b)
	}
	if i >= len(b) {
		return false
	}
	{
		inObject := open[(depth-1)>>6]>>((depth-1)&63)&1 == 1
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
			if inObject {
				goto key
			}
			goto value
		case '}':
			if !inObject {
				return false
			}
		case ']':
			if inObject {
				return false
			}
		default:
			return false
		}
		depth--
		i++
		goto after
	}
key:
	if i >= len(b) || b[i] != '"' {
		return false
	}
	if i = validString(b, i+1); i < 0 {
		return false
	}
	if i = skipWS(b, i); i >= len(b) || b[i] != ':' {
		return false
	}
	i = skipWS(b, i+1)
	goto value
}

// ValidString is Valid for a string, without copying it.
func ValidString(s string) bool {
	return Valid(unsafe.Slice(unsafe.StringData(s), len(s)))
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

func literal(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special marks w's bytes that a string scan stops at: a quote, a
// backslash or a control byte (below 0x20), each flagged by its high bit.
// A flag can be false only above a true one (a borrow runs upward), so the
// lowest flag, if any, is the first such byte (the bit tricks of "Bit
// Twiddling Hacks": a byte below n, a zero byte).
func special(w uint64) uint64 {
	below := (w - ones*0x20) &^ w
	quote := w ^ (ones * '"')
	quote = (quote - ones) &^ quote
	slash := w ^ (ones * '\\')
	slash = (slash - ones) &^ slash
	return (below | quote | slash) & highs
}

// validString checks the string whose opening quote is just before b[i]
// and returns the offset past its closing quote, or -1.
func validString(b []byte, i int) int {
	for i < len(b) {
		if i+8 <= len(b) {
			m := special(binary.LittleEndian.Uint64(b[i:]))
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			i++
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if len(b)-i < 5 || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
					return -1
				}
				i += 5
			default:
				return -1
			}
		default:
			i++
		}
	}
	return -1
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// validNumber checks the number at b[i] (JSON's grammar: an optional
// minus, 0 or a digit run without a leading zero, an optional fraction
// and exponent) and returns the offset past it, or -1.
func validNumber(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i >= len(b) || b[i] < '0' || b[i] > '9' {
		return -1
	}
	if b[i] == '0' {
		i++
	} else {
		i = digits(b, i)
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return -1
		}
		i = digits(b, i)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return -1
		}
		i = digits(b, i)
	}
	return i
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}
