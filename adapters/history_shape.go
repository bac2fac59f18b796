package adapters

import "github.com/tidwall/gjson"

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
