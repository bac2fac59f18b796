package formats

import (
	"slices"
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/anthropic"
	"github.com/chronicle-proxy/chronicle/adapters/gemini"
	"github.com/chronicle-proxy/chronicle/adapters/openaichat"
	"github.com/chronicle-proxy/chronicle/adapters/responses"
)

// describe names an adapter's format, dialect and session headers.
func describe(a adapters.Adapter) (adapters.Format, string, []string) {
	switch a := a.(type) {
	case *openaichat.Adapter:
		return a.Format(), a.Dialect().Name, a.Dialect().SessionHeaders
	case *responses.Adapter:
		return a.Format(), a.Dialect().Name, a.Dialect().SessionHeaders
	case *gemini.Adapter:
		return a.Format(), "", a.SessionHeaders
	case *anthropic.Adapter:
		return a.Format(), "", a.SessionHeaders
	}
	return "", "", nil
}

// TestForConnection pins which adapter each provider's connection uses for
// a path: the provider's own format, Gemini's OpenAI-compatible endpoint
// under /openai/, the Responses API on OpenAI-style connections; each with
// the connection's session headers after its dialect's.
func TestForConnection(t *testing.T) {
	hdr := []string{"x-opencode-session"}
	for _, c := range []struct {
		provider, path string
		format         adapters.Format
		dialect        string
	}{
		{"openai", "/v1/chat/completions", adapters.FormatOpenAIChat, "openai"},
		{"openai", "/v1/responses", adapters.FormatOpenAIResponses, "openai"},
		{"openai", "/v1/responses/", adapters.FormatOpenAIResponses, "openai"},
		{"openai", "/v1/responses/resp_1/cancel", adapters.FormatOpenAIResponses, "openai"},
		{"openai", "/v1/models", adapters.FormatOpenAIChat, "openai"},
		{"deepseek", "/chat/completions", adapters.FormatOpenAIChat, "deepseek"},
		{"deepseek", "/v1/responses", adapters.FormatOpenAIChat, "deepseek"},
		{"gemini", "/v1beta/models/gemini-3-pro-preview:generateContent", adapters.FormatGemini, ""},
		{"gemini", "/v1beta/openai/chat/completions", adapters.FormatOpenAIChat, "gemini-openai"},
		{"gemini", "/v1beta/openai/responses", adapters.FormatOpenAIChat, "gemini-openai"},
		{"gemini", "/v1beta/responses", adapters.FormatGemini, ""},
		{"anthropic", "/v1/messages", adapters.FormatAnthropic, ""},
		{"anthropic", "/v1/messages/count_tokens", adapters.FormatAnthropic, ""},
		{"anthropic", "/v1/models", adapters.FormatAnthropic, ""},
		{"openai-compatible", "/v1/chat/completions", adapters.FormatOpenAIChat, "openai-compatible"},
		{"openai-compatible", "/v1/responses", adapters.FormatOpenAIResponses, "openai"},
		{"something-else", "/v1/chat/completions", adapters.FormatOpenAIChat, "openai-compatible"},
	} {
		f, d, h := describe(ForConnection(c.provider, hdr).Adapter([]byte(c.path)))
		if f != c.format || d != c.dialect || !slices.Equal(h, hdr) {
			t.Errorf("%s %s: %s/%q headers %v, want %s/%q headers %v", c.provider, c.path, f, d, h, c.format, c.dialect, hdr)
		}
	}
	// Without session headers, a dialect keeps its own (none here).
	if _, _, h := describe(ForConnection("openai", nil).Adapter([]byte("/v1/responses"))); h != nil {
		t.Errorf("headers %v, want none", h)
	}
	// The connection's slice is copied, not kept.
	mine := []string{"a"}
	c := ForConnection("openai", mine)
	mine[0] = "b"
	if _, _, h := describe(c.Adapter([]byte("/v1/chat/completions"))); h[0] != "a" {
		t.Errorf("headers %v follow the caller's slice", h)
	}
}

// A dialect's own session headers come first.
func TestWireDialects(t *testing.T) {
	a, ok := responses.Wire.New("chatgpt", []string{"x"})
	if _, d, h := describe(a); !ok || d != "chatgpt" || !slices.Equal(h, []string{"session-id", "x"}) {
		t.Errorf("chatgpt: %q %v %v", d, h, ok)
	}
	for _, w := range wires {
		if _, ok := w.New("no-such-dialect", nil); ok {
			t.Errorf("%s has a dialect no-such-dialect", w.Format)
		}
	}
}

func TestForThread(t *testing.T) {
	for _, c := range []struct {
		format  adapters.Format
		want    adapters.Format
		dialect string
	}{
		{adapters.FormatOpenAIChat, adapters.FormatOpenAIChat, "openai"},
		{adapters.FormatGemini, adapters.FormatGemini, ""},
		{adapters.FormatOpenAIResponses, adapters.FormatOpenAIResponses, "openai"},
		{"", adapters.FormatOpenAIChat, "openai"},
		{adapters.FormatAnthropic, adapters.FormatAnthropic, ""},
		{"some-later-format", adapters.FormatOpenAIChat, "openai"},
	} {
		if f, d, _ := describe(ForThread(c.format)); f != c.want || d != c.dialect {
			t.Errorf("ForThread(%q) = %s/%q, want %s/%q", c.format, f, d, c.want, c.dialect)
		}
	}
	if ForThread(adapters.FormatGemini) != ForThread(adapters.FormatGemini) {
		t.Error("ForThread builds a new adapter per call")
	}
}

func TestForPath(t *testing.T) {
	for path, want := range map[string]adapters.Format{
		"/v1beta/models/gemini-2.5-flash:generateContent":       adapters.FormatGemini,
		"/v1beta/models/gemini-2.5-flash:streamGenerateContent": adapters.FormatGemini,
		"/v1/models/gemini-2.5-flash:generateContent":           adapters.FormatGemini,
		"/v1beta/models/gemini-2.5-flash:countTokens":           adapters.FormatGemini,
		"/v1/models/x:countTokens":                              adapters.FormatOpenAIChat,
		"/v1beta/openai/models/x:generateContent":               adapters.FormatOpenAIChat,
		"/v1/chat/completions":                                  adapters.FormatOpenAIChat,
		"/v1/responses":                                         adapters.FormatOpenAIChat,
		"":                                                      adapters.FormatOpenAIChat,
		"/claude/v1/messages":                                   adapters.FormatAnthropic,
		"/claude/v1/messages/count_tokens":                      adapters.FormatAnthropic,
		"/v1/threads/thread_1/messages":                         adapters.FormatOpenAIChat,
	} {
		if got := ForPath([]byte(path)).Format(); got != want {
			t.Errorf("ForPath(%q) = %s, want %s", path, got, want)
		}
	}
}
