package adapters

import (
	"fmt"
	"sync"

	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
)

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

// elementReader reads one message (chat message, Gemini content, Responses
// item) of a WalkMessages array; calls and results are reused for its
// lists. Each runs in a frame of its own, gone before WalkMessages' fn
// runs: WalkMessages is on the path of a stream's finish, on the
// connection's goroutine (docs/design.md, an open stream's stack).
type elementReader func(raw []byte, i int, calls []ToolCall, results []ToolResult) Message

// elementSpans holds WalkMessages' element offsets between calls: a
// 64-element array of them on the stack was 1 KiB of the deepest frames of
// a request, which set the stack size its connection's goroutine kept.
var elementSpans = sync.Pool{New: func() any { s := make([][2]int, 0, 64); return &s }}

// walkElements is WalkMessages for every format: the elements of the
// array found with the vectorised walk (gjson's for an array it declines;
// one that is not an array is ErrNoMessages, naming what), each read by
// read and handed to fn until fn returns false.
func walkElements(messages []byte, what string, read elementReader, fn func(Message) bool) error {
	var calls []ToolCall
	var results []ToolResult
	spans := elementSpans.Get().(*[][2]int)
	defer elementSpans.Put(spans)
	elems, ok := arrayElements(messages, (*spans)[:0])
	*spans = elems[:0]
	if ok {
		for i, e := range elems {
			msg := read(messages[e[0]:e[1]], i, calls[:0], results[:0])
			calls, results = msg.Calls, msg.Results
			if !fn(msg) {
				return nil
			}
		}
		return nil
	}
	return walkElementsGJSON(messages, what, read, fn)
}

// walkElementsGJSON is walkElements for an array the vectorised walk
// declines, through gjson (a function of its own: its gjson results would
// double walkElements' frame).
func walkElementsGJSON(messages []byte, what string, read elementReader, fn func(Message) bool) error {
	arr := gjson.Parse(str(messages))
	if !arr.IsArray() {
		return fmt.Errorf("walk %s: %w", what, ErrNoMessages)
	}
	var calls []ToolCall
	var results []ToolResult
	i := 0
	arr.ForEach(func(_, m gjson.Result) bool {
		msg := read(rawSlice(messages, m), i, calls[:0], results[:0])
		calls, results = msg.Calls, msg.Results
		i++
		return fn(msg)
	})
	return nil
}
