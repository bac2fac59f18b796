package formats

import "github.com/chronicle-proxy/chronicle/adapters"

// responsesWire stands for the Responses package's Wire until that
// format has a package of its own.
var (
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
