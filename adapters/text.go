package adapters

import (
	"strings"

	"github.com/tidwall/gjson"
)

// AppendPartsText appends to sb the text of each part that has one (the
// parts of a message, for MessageText), leaving out thought parts when
// skipThoughts.
func AppendPartsText(sb *strings.Builder, parts gjson.Result, skipThoughts bool) {
	parts.ForEach(func(_, p gjson.Result) bool {
		if skipThoughts && p.Get("thought").Bool() {
			return true
		}
		if t := p.Get("text"); t.Type == gjson.String {
			sb.WriteString(t.Str)
		}
		return true
	})
}
