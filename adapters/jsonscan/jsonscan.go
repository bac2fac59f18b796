// Package jsonscan checks and walks raw JSON text without decoding it, for
// the scanners in adapters and repair and for every validity check on a
// request or an answer: Valid (bounded nesting, no recursion, string
// contents eight bytes at a time) and StringEnd (the end of a string, with
// a vectorised search). Long string values (message text, thought
// signatures, pasted documents) are most of the bytes they see.
package jsonscan

import "strings"

// StringEnd returns the offset just past the closing quote of the JSON
// string whose opening quote is s[i]: the next quote that an even run of
// backslashes precedes. It returns -1 when the string is not closed.
func StringEnd(s string, i int) int {
	j := i + 1
	for {
		q := strings.IndexByte(s[j:], '"')
		if q < 0 {
			return -1
		}
		j += q
		bs := 0
		for k := j - 1; k > i && s[k] == '\\'; k-- {
			bs++
		}
		if bs%2 == 0 {
			return j + 1
		}
		j++
	}
}
