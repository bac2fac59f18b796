package adapters

import "github.com/chronicle-proxy/chronicle/adapters/jsonscan"

// A minimal scanner over raw JSON text for the per-event hot path. gjson
// decodes every string value it visits that holds an escape (one allocation
// each), so the assemblers walk objects with these helpers instead and keep
// strings in their escaped form. Inputs are validated before (jsonscan.Valid);
// on invalid input the helpers stop early, never panic.

// skipWSs returns the index of the first non-space byte at or after i.
func skipWSs(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// valueEnd returns the index just after the JSON value starting at i, or -1.
func valueEnd(s string, i int) int {
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
				k := valueEnd(s, j)
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

// eachMember calls fn with the raw key (quotes included) and raw value of
// each member of the object obj, until fn returns false.
func eachMember(obj string, fn func(key, val string) bool) {
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
		ke := valueEnd(obj, i)
		if ke < 0 {
			return
		}
		key := obj[i:ke]
		i = skipWSs(obj, ke)
		if i >= len(obj) || obj[i] != ':' {
			return
		}
		i = skipWSs(obj, i+1)
		ve := valueEnd(obj, i)
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

// eachElement calls fn with each raw element of the array arr, until fn
// returns false.
func eachElement(arr string, fn func(val string) bool) {
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
		ve := valueEnd(arr, i)
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

// member returns the raw value of key (given with quotes) in obj, "" when
// absent.
func member(obj, key string) string {
	var out string
	eachMember(obj, func(k, v string) bool {
		if k == key {
			out = v
			return false
		}
		return true
	})
	return out
}

func isString(v string) bool { return len(v) >= 2 && v[0] == '"' }
func isNull(v string) bool   { return v == "null" }
func isObject(v string) bool { return len(v) > 0 && v[0] == '{' }
