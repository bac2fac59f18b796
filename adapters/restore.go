package adapters

import (
	"fmt"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// SkipSignature is Google's placeholder thought signature; like a missing or
// empty one, it counts as dropped and is replaced by the stored signature.
const SkipSignature = "skip_thought_signature_validator"

// FieldThoughtSignature is the Restored field of a thought signature put
// back (a Gemini part's thoughtSignature, or the extra_content of Gemini's
// OpenAI-compatible endpoint).
const FieldThoughtSignature = "thought_signature"

// dropped reports whether a restorable field counts as dropped: missing,
// null, "" or Google's skip placeholder.
func Dropped(r gjson.Result) bool {
	switch r.Type {
	case gjson.Null:
		return true
	case gjson.String:
		return r.Str == "" || r.Str == SkipSignature
	}
	return !r.Exists()
}

// usable reports whether a stored field is worth restoring.
func Usable(r gjson.Result) bool { return r.Type == gjson.String && !Dropped(r) }

// edit replaces incoming[start:end] with val.
type Replacement struct {
	Start, End int
	Val        []byte
}

// splice applies non-overlapping edits given in order. Bytes outside the
// edited ranges are copied unchanged.
func Splice(src []byte, edits []Replacement) []byte {
	if len(edits) == 0 {
		return src
	}
	size := len(src)
	for _, e := range edits {
		size += len(e.Val) - (e.End - e.Start)
	}
	out := make([]byte, 0, size)
	prev := 0
	for _, e := range edits {
		out = append(out, src[prev:e.Start]...)
		out = append(out, e.Val...)
		prev = e.End
	}
	return append(out, src[prev:]...)
}

// setField sets path in msg (a private copy) to the raw value.
func SetField(msg []byte, path string, raw string) ([]byte, error) {
	out, err := sjson.SetRawBytes(msg, path, []byte(raw))
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", path, err)
	}
	return out, nil
}

func Elements(arr gjson.Result) []gjson.Result {
	var out []gjson.Result
	arr.ForEach(func(_, v gjson.Result) bool {
		out = append(out, v)
		return true
	})
	return out
}
