package gemini

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/internal/formattest"
	"github.com/google/go-cmp/cmp"
)

func TestGeminiQuirks(t *testing.T) {
	tests := []struct {
		name     string
		payloads []string
		want     string
		finish   adapters.FinishReason
		terminal bool
	}{
		{"text and function call split across chunks", []string{
			`{"candidates": [{"content": {"parts": [{"text": "Let me "}],"role": "model"},"index": 0}]}`,
			`{"candidates": [{"content": {"parts": [{"text": "check."},{"functionCall": {"name": "f","args": {"a": 1}},"thoughtSignature": "S1"}],"role": "model"},"index": 0}]}`,
			`{"candidates": [{"content": {"parts": [{"functionCall": {"name": "g","args": {}}}],"role": "model"},"index": 0}]}`,
			`{"candidates": [{"content": {"parts": [{"text": ""}],"role": "model"},"finishReason": "STOP","index": 0}]}`,
		}, `{"role":"model","parts":[{"text":"Let me check."},{"functionCall":{"name":"f","args":{"a":1}},"thoughtSignature":"S1"},{"functionCall":{"name":"g","args":{}}}]}`, adapters.FinishToolCalls, true},
		{"thought parts stay apart from text", []string{
			`{"candidates": [{"content": {"parts": [{"text": "**T**","thought": true}],"role": "model"}}]}`,
			`{"candidates": [{"content": {"parts": [{"text": " more","thought": true},{"text": "Answer"}],"role": "model"}}]}`,
			`{"candidates": [{"content": {"parts": [{"text": "","thoughtSignature": "S"}],"role": "model"},"finishReason": "MAX_TOKENS"}]}`,
		}, `{"role":"model","parts":[{"text":"**T** more","thought":true},{"text":"Answer","thoughtSignature":"S"}]}`, adapters.FinishLength, true},
		{"signature after a call keeps its own part", []string{
			`{"candidates": [{"content": {"parts": [{"functionCall": {"name": "f"}}],"role": "model"}}]}`,
			`{"candidates": [{"content": {"parts": [{"text": "","thoughtSignature": "S"}],"role": "model"},"finishReason": "STOP"}]}`,
		}, `{"role":"model","parts":[{"functionCall":{"name":"f"}},{"text":"","thoughtSignature":"S"}]}`, adapters.FinishToolCalls, true},
		{"no finishReason is truncated", []string{
			`{"candidates": [{"content": {"parts": [{"text": "par"}],"role": "model"}}]}`,
		}, `{"role":"model","parts":[{"text":"par"}]}`, adapters.FinishNone, false},
		{"blocked prompt", []string{
			`{"promptFeedback": {"blockReason": "SAFETY"},"usageMetadata": {"promptTokenCount": 4}}`,
		}, `{"role":"model","parts":[]}`, adapters.FinishContentFilter, true},
		{"malformed call is an error", []string{
			`{"candidates": [{"finishReason": "MALFORMED_FUNCTION_CALL"}]}`,
		}, `{"role":"model","parts":[]}`, adapters.FinishError, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			turn := formattest.FeedAll(t, geminiAd, tc.payloads...)
			formattest.MustEqualJSON(t, tc.want, turn.Message)
			if turn.Finish != tc.finish || turn.Terminal != tc.terminal {
				t.Errorf("finish %q terminal %v, want %q %v", turn.Finish, turn.Terminal, tc.finish, tc.terminal)
			}
		})
	}
}

func TestFeedRejectsGarbage(t *testing.T) {
	for _, a := range []adapters.Adapter{geminiAd} {
		for _, p := range []string{"", "not json", `{"a":`, "[1]"} {
			if err := a.NewAssembler().Feed([]byte(p)); !errors.Is(err, adapters.ErrInvalidJSON) {
				t.Errorf("%T Feed(%q) = %v", a, p, err)
			}
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		ad                  adapters.Adapter
		method, path, query string
		body                string
		want                adapters.Op
	}{
		{geminiAd, "POST", "/v1beta/models/gemini-3-pro-preview:generateContent", "", `{}`, adapters.Op{Kind: adapters.OpGenerate, Model: "gemini-3-pro-preview"}},
		{geminiAd, "POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent", "alt=sse", `{}`, adapters.Op{Kind: adapters.OpGenerate, Stream: true, Framing: adapters.FramingSSE, Model: "gemini-2.5-flash"}},
		{geminiAd, "POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent", "key=k", `{}`, adapters.Op{Kind: adapters.OpGenerate, Stream: true, Framing: adapters.FramingJSONArray, Model: "gemini-2.5-flash"}},
		{geminiAd, "POST", "/v1beta/models/gemini-2.5-flash:countTokens", "", `{}`, adapters.Op{}},
		{geminiAd, "GET", "/v1beta/models", "", ``, adapters.Op{}},
	}
	for _, tc := range tests {
		if got := tc.ad.Classify(tc.method, tc.path, tc.query, []byte(tc.body)); got != tc.want {
			t.Errorf("%s %s?%s = %+v, want %+v", tc.method, tc.path, tc.query, got, tc.want)
		}
	}
}

func TestMessagesAndSystem(t *testing.T) {
	g := []byte(`{"contents": [{"role": "user","parts": [{"text": "hi"}]}],"systemInstruction": {"parts": [{"text": "be brief"}]}}`)
	if s := geminiAd.System(g); string(s) != `{"parts": [{"text": "be brief"}]}` {
		t.Errorf("System = %s", s)
	}
	noSys, err := geminiAd.SetSystem(g, nil)
	if err != nil || geminiAd.System(noSys) != nil {
		t.Errorf("SetSystem(nil) = %s %v", noSys, err)
	}
	withSys, err := geminiAd.SetSystem(noSys, []byte(`{"parts":[{"text":"x"}]}`))
	if err != nil || string(geminiAd.System(withSys)) != `{"parts":[{"text":"x"}]}` {
		t.Errorf("SetSystem = %s %v", withSys, err)
	}
	if c, ok := geminiAd.Messages(g); !ok || !bytes.HasPrefix(c, []byte(`[{"role": "user"`)) {
		t.Errorf("contents = %s", c)
	}
}

func TestWalkMessages(t *testing.T) {
	greq := formattest.Fixture(t, "gemini/request.tool-results.json")
	contents, _ := geminiAd.Messages(greq)
	type row struct {
		Index   int
		Role    string
		Calls   []adapters.ToolCall
		Results []adapters.ToolResult
		Empty   bool
	}
	var got []row
	if err := geminiAd.WalkMessages(contents, func(m adapters.Message) bool {
		got = append(got, row{m.Index, m.Role, append([]adapters.ToolCall(nil), m.Calls...), append([]adapters.ToolResult(nil), m.Results...), m.EmptyText})
		return true
	}); err != nil {
		t.Fatal(err)
	}
	want := []row{
		{0, "user", nil, nil, false},
		{1, "model", []adapters.ToolCall{{ID: "", Name: "get_weather"}, {ID: "", Name: "get_weather"}}, nil, true},
		{2, "user", nil, []adapters.ToolResult{{Name: "get_weather"}, {Name: "get_weather"}}, true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("gemini walk (-want +got)\n%s", diff)
	}
}

func TestPrepareUpstream(t *testing.T) {
	body := []byte(`{"model":"gpt-4.1","messages":[],"stream":true}`)
	up, _ := geminiAd.PrepareUpstream(body, adapters.Prepare{SessionID: "thr-1", Stream: true})
	if up.SessionID != "" || up.AddedUsage || len(up.Headers) != 0 {
		t.Errorf("gemini: %+v", up)
	}
}

func TestErrorBodies(t *testing.T) {
	formattest.MustEqualJSON(t, `{"error":{"code":409,"message":"thread is \"busy\"","status":"ABORTED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"THREAD_BUSY","domain":"chronicle"}]}}`,
		geminiAd.ErrorBody(409, "thread_busy", `thread is "busy"`))
	for status, want := range map[int]string{400: "INVALID_ARGUMENT", 413: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND",
		409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED", 500: "INTERNAL"} {
		if got := GoogleStatus(status); got != want {
			t.Errorf("GoogleStatus(%d) = %s", status, got)
		}
	}
	ev := geminiAd.StreamErrorEvent(504, "upstream_timeout", "t")
	if !bytes.HasPrefix(ev, []byte("data: {\"error\":")) || !bytes.HasSuffix(ev, []byte("}\r\n\r\n")) {
		t.Errorf("gemini stream error %q", ev)
	}
	// An assembler that sees chronicle's own stream error reports it.
	turn := formattest.FeedAll(t, geminiAd, strings.TrimSuffix(strings.TrimPrefix(string(ev), "data: "), "\r\n\r\n"))
	if turn.Finish != adapters.FinishError || turn.Error == nil {
		t.Errorf("gemini error turn %+v", turn)
	}
}
