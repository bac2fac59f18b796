package gemini

import (
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters/internal/formattest"
)

func FuzzGeminiAssembler(f *testing.F) {
	formattest.FuzzAssembler(f, geminiAd,
		`{"candidates": [{"content": {"parts": [{"text": "**T**","thought": true}],"role": "model"},"index": 0}]}`+"\n"+
			`{"candidates": [{"content": {"parts": [{"text": "hi \"x\""},{"functionCall": {"name": "f","args": {"a": 1}},"thoughtSignature": "S"}],"role": "model"}}]}`+"\n"+
			`{"candidates": [{"content": {"parts": [{"text": "","thoughtSignature": "T"}],"role": "model"},"finishReason": "STOP"}],"usageMetadata": {"promptTokenCount": 2,"thoughtsTokenCount": 1}}`,
		`{"contents":[{"role":"model","parts":[{"functionCall":{"name":"f","args":{}},"thoughtSignature":"S"}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]}]}`,
		`[{"candidates": [{"content": {"parts": [{"text": "a"}]},"finishReason": "STOP"}]}]`,
		`{"promptFeedback": {"blockReason": "SAFETY"}}`,
	)
}
