package adapters

import (
	"fmt"
	"strings"

	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// ClassifyPost is Classify for a format whose turns are a POST to a path
// ending in suffix, with the model and "stream": true in the body (the
// OpenAI formats): such a request is a turn, streaming when the body says
// so; anything else passes through.
func ClassifyPost(method, path, suffix string, body []byte) Op {
	if method != "POST" || !strings.HasSuffix(strings.TrimRight(path, "/"), suffix) {
		return Op{Kind: OpPassThrough}
	}
	model, stream := rawjson.ModelAndStream(body)
	op := Op{Kind: OpGenerate, Model: model}
	if stream {
		op.Stream, op.Framing = true, FramingSSE
	}
	return op
}

// SetRaw returns body with the member at path set to value, which must be
// valid JSON (ErrInvalidJSON otherwise).
func SetRaw(body []byte, path string, value []byte) ([]byte, error) {
	if !jsonscan.Valid(value) {
		return nil, fmt.Errorf("set %s: %w", path, ErrInvalidJSON)
	}
	out, err := sjson.SetRawBytes(body, path, value)
	if err != nil {
		return nil, fmt.Errorf("set %s: %w", path, err)
	}
	return out, nil
}

// HistoryShapeProblem is ShapeProblem for a format whose history is the
// top-level member: want, the sentence naming what the format expects,
// unless body is an object whose member is absent or null.
func HistoryShapeProblem(body []byte, member, want string) string {
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return want
	}
	switch v := root.Get(member); {
	case !v.Exists(), v.Type == gjson.Null:
		return ""
	default:
		return want
	}
}
