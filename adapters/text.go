package adapters

import (
	"strings"

	"github.com/tidwall/gjson"
)

// MessageText returns the visible text of an assembled message (a reply
// so far, for a run's partial snapshot): OpenAI chat content (a string, or
// its text parts), Gemini's non-thought text parts, or for the Responses API
// the text of the output message items. Reasoning is left out.
func MessageText(f Format, msg []byte) string {
	m := gjson.ParseBytes(msg)
	var sb strings.Builder
	text := func(parts gjson.Result, skipThoughts bool) {
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
	switch f {
	case FormatGemini:
		text(m.Get("parts"), true)
	case FormatOpenAIResponses:
		m.ForEach(func(_, item gjson.Result) bool {
			if item.Get("type").Str == "message" {
				text(item.Get("content"), false)
			}
			return true
		})
	default:
		if c := m.Get("content"); c.Type == gjson.String {
			return c.Str
		} else {
			text(c, false)
		}
	}
	return sb.String()
}
