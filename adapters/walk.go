package adapters

import (
	"fmt"
	"sync"

	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
	"github.com/tidwall/gjson"
)

// ElementReader reads one message (chat message, Gemini content, Responses
// item) of a WalkMessages array; calls and results are reused for its
// lists. Each runs in a frame of its own, gone before WalkMessages' fn
// runs: WalkMessages is on the path of a stream's finish, on the
// connection's goroutine (docs/design.md, "Runtime mechanics").
type ElementReader func(raw []byte, i int, calls []ToolCall, results []ToolResult) Message

// elementSpans holds WalkMessages' element offsets between calls: a
// 64-element array of them on the stack was 1 KiB of the deepest frames of
// a request, which set the stack size its connection's goroutine kept.
var elementSpans = sync.Pool{New: func() any { s := make([][2]int, 0, 64); return &s }}

// WalkElements is WalkMessages for every format: the elements of the
// array found with the vectorised walk (gjson's for an array it declines;
// one that is not an array is ErrNoMessages, naming what), each read by
// read and handed to fn until fn returns false.
func WalkElements(messages []byte, what string, read ElementReader, fn func(Message) bool) error {
	var calls []ToolCall
	var results []ToolResult
	spans := elementSpans.Get().(*[][2]int)
	defer elementSpans.Put(spans)
	elems, ok := rawjson.ArrayElements(messages, (*spans)[:0])
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

// walkElementsGJSON is WalkElements for an array the vectorised walk
// declines, through gjson (a function of its own: its gjson results would
// double WalkElements' frame).
func walkElementsGJSON(messages []byte, what string, read ElementReader, fn func(Message) bool) error {
	arr := gjson.Parse(rawjson.Str(messages))
	if !arr.IsArray() {
		return fmt.Errorf("walk %s: %w", what, ErrNoMessages)
	}
	var calls []ToolCall
	var results []ToolResult
	i := 0
	arr.ForEach(func(_, m gjson.Result) bool {
		msg := read(rawjson.RawSlice(messages, m), i, calls[:0], results[:0])
		calls, results = msg.Calls, msg.Results
		i++
		return fn(msg)
	})
	return nil
}
