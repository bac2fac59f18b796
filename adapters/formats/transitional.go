package formats

import "github.com/chronicle-proxy/chronicle/adapters"

// geminiWire and responsesWire stand for the Gemini and Responses
// packages' Wire until those formats have packages of their own.
var (
	geminiWire = adapters.Wire{Format: adapters.FormatGemini, New: func(dialect string, sessionHeaders []string) (adapters.Adapter, bool) {
		if dialect != "" {
			return nil, false
		}
		g := adapters.NewGemini()
		g.SessionHeaders = append([]string(nil), sessionHeaders...)
		return g, true
	}}
	responsesWire = adapters.Wire{Format: adapters.FormatOpenAIResponses, New: func(dialect string, sessionHeaders []string) (adapters.Adapter, bool) {
		d := adapters.ResponsesOpenAI
		if dialect == adapters.ResponsesChatGPT.Name {
			d = adapters.ResponsesChatGPT
		} else if dialect != "" && dialect != d.Name {
			return nil, false
		}
		d.SessionHeaders = append(append([]string(nil), d.SessionHeaders...), sessionHeaders...)
		return adapters.NewResponses(d), true
	}}
)
