package adapters

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func feedAll(t *testing.T, a Adapter, payloads ...string) Turn {
	t.Helper()
	asm := a.NewAssembler()
	for _, p := range payloads {
		if err := asm.Feed([]byte(p)); err != nil {
			t.Fatalf("feed %s: %v", p, err)
		}
	}
	return asm.Result()
}

func mustEqualJSON(t *testing.T, want string, got []byte) {
	t.Helper()
	if diff := cmp.Diff(jsonValue(t, []byte(want)), jsonValue(t, got)); diff != "" {
		t.Errorf("(-want +got)\n%s\ngot %s", diff, got)
	}
}

func TestGeminiQuirks(t *testing.T) {
	tests := []struct {
		name     string
		payloads []string
		want     string
		finish   FinishReason
		terminal bool
	}{
		{"text and function call split across chunks", []string{
			`{"candidates": [{"content": {"parts": [{"text": "Let me "}],"role": "model"},"index": 0}]}`,
			`{"candidates": [{"content": {"parts": [{"text": "check."},{"functionCall": {"name": "f","args": {"a": 1}},"thoughtSignature": "S1"}],"role": "model"},"index": 0}]}`,
			`{"candidates": [{"content": {"parts": [{"functionCall": {"name": "g","args": {}}}],"role": "model"},"index": 0}]}`,
			`{"candidates": [{"content": {"parts": [{"text": ""}],"role": "model"},"finishReason": "STOP","index": 0}]}`,
		}, `{"role":"model","parts":[{"text":"Let me check."},{"functionCall":{"name":"f","args":{"a":1}},"thoughtSignature":"S1"},{"functionCall":{"name":"g","args":{}}}]}`, FinishToolCalls, true},
		{"thought parts stay apart from text", []string{
			`{"candidates": [{"content": {"parts": [{"text": "**T**","thought": true}],"role": "model"}}]}`,
			`{"candidates": [{"content": {"parts": [{"text": " more","thought": true},{"text": "Answer"}],"role": "model"}}]}`,
			`{"candidates": [{"content": {"parts": [{"text": "","thoughtSignature": "S"}],"role": "model"},"finishReason": "MAX_TOKENS"}]}`,
		}, `{"role":"model","parts":[{"text":"**T** more","thought":true},{"text":"Answer","thoughtSignature":"S"}]}`, FinishLength, true},
		{"signature after a call keeps its own part", []string{
			`{"candidates": [{"content": {"parts": [{"functionCall": {"name": "f"}}],"role": "model"}}]}`,
			`{"candidates": [{"content": {"parts": [{"text": "","thoughtSignature": "S"}],"role": "model"},"finishReason": "STOP"}]}`,
		}, `{"role":"model","parts":[{"functionCall":{"name":"f"}},{"text":"","thoughtSignature":"S"}]}`, FinishToolCalls, true},
		{"no finishReason is truncated", []string{
			`{"candidates": [{"content": {"parts": [{"text": "par"}],"role": "model"}}]}`,
		}, `{"role":"model","parts":[{"text":"par"}]}`, FinishNone, false},
		{"blocked prompt", []string{
			`{"promptFeedback": {"blockReason": "SAFETY"},"usageMetadata": {"promptTokenCount": 4}}`,
		}, `{"role":"model","parts":[]}`, FinishContentFilter, true},
		{"malformed call is an error", []string{
			`{"candidates": [{"finishReason": "MALFORMED_FUNCTION_CALL"}]}`,
		}, `{"role":"model","parts":[]}`, FinishError, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			turn := feedAll(t, geminiAd, tc.payloads...)
			mustEqualJSON(t, tc.want, turn.Message)
			if turn.Finish != tc.finish || turn.Terminal != tc.terminal {
				t.Errorf("finish %q terminal %v, want %q %v", turn.Finish, turn.Terminal, tc.finish, tc.terminal)
			}
		})
	}
}

func TestFeedRejectsGarbage(t *testing.T) {
	for _, a := range []Adapter{geminiAd} {
		for _, p := range []string{"", "not json", `{"a":`, "[1]"} {
			if err := a.NewAssembler().Feed([]byte(p)); !errors.Is(err, ErrInvalidJSON) {
				t.Errorf("%T Feed(%q) = %v", a, p, err)
			}
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		ad                  Adapter
		method, path, query string
		body                string
		want                Op
	}{
		{geminiAd, "POST", "/v1beta/models/gemini-3-pro-preview:generateContent", "", `{}`, Op{Kind: OpGenerate, Model: "gemini-3-pro-preview"}},
		{geminiAd, "POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent", "alt=sse", `{}`, Op{Kind: OpGenerate, Stream: true, Framing: FramingSSE, Model: "gemini-2.5-flash"}},
		{geminiAd, "POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent", "key=k", `{}`, Op{Kind: OpGenerate, Stream: true, Framing: FramingJSONArray, Model: "gemini-2.5-flash"}},
		{geminiAd, "POST", "/v1beta/models/gemini-2.5-flash:countTokens", "", `{}`, Op{}},
		{geminiAd, "GET", "/v1beta/models", "", ``, Op{}},
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
	greq := fixture(t, "gemini/request.tool-results.json")
	contents, _ := geminiAd.Messages(greq)
	type row struct {
		Index   int
		Role    string
		Calls   []ToolCall
		Results []ToolResult
		Empty   bool
	}
	var got []row
	if err := geminiAd.WalkMessages(contents, func(m Message) bool {
		got = append(got, row{m.Index, m.Role, append([]ToolCall(nil), m.Calls...), append([]ToolResult(nil), m.Results...), m.EmptyText})
		return true
	}); err != nil {
		t.Fatal(err)
	}
	want := []row{
		{0, "user", nil, nil, false},
		{1, "model", []ToolCall{{"", "get_weather"}, {"", "get_weather"}}, nil, true},
		{2, "user", nil, []ToolResult{{Name: "get_weather"}, {Name: "get_weather"}}, true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("gemini walk (-want +got)\n%s", diff)
	}
}

func TestHashMessage(t *testing.T) {
	same := [][2]string{
		{`{"role":"user","content":"hi"}`, "{ \"content\" : \"hi\",\n \"role\":\"user\" }"},
		{`{"a":"A"}`, `{"a":"\u0041"}`},
		{`[1,{"b":2,"a":[true,null]}]`, `[ 1 , {"a":[true, null],"b":2} ]`},
	}
	for _, p := range same {
		if HashMessage([]byte(p[0])) != HashMessage([]byte(p[1])) {
			t.Errorf("%s and %s hash differently", p[0], p[1])
		}
	}
	differ := [][2]string{
		{`{"a":1}`, `{"a":1.0}`},
		{`{"a":"1"}`, `{"a":1}`},
		{`{"a":[1,2]}`, `{"a":[2,1]}`},
		{`{"a":{"b":1}}`, `{"a":{"b":1},"c":null}`},
		{`{"ab":"c"}`, `{"a":"bc"}`},
		{`not json`, `"not json"`},
	}
	for _, p := range differ {
		if HashMessage([]byte(p[0])) == HashMessage([]byte(p[1])) {
			t.Errorf("%s and %s hash equal", p[0], p[1])
		}
	}
	// Stable across versions: a fixed value.
	if got := HashMessage([]byte(`{"role":"user","content":"hi"}`)).String(); len(got) != 32 {
		t.Errorf("hash string %q", got)
	}
}

func TestPrepareUpstream(t *testing.T) {
	body := []byte(`{"model":"gpt-4.1","messages":[],"stream":true}`)
	up, _ := geminiAd.PrepareUpstream(body, Prepare{SessionID: "thr-1", Stream: true})
	if up.SessionID != "" || up.AddedUsage || len(up.Headers) != 0 {
		t.Errorf("gemini: %+v", up)
	}
}

func TestErrorBodies(t *testing.T) {
	mustEqualJSON(t, `{"error":{"code":409,"message":"thread is \"busy\"","status":"ABORTED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"THREAD_BUSY","domain":"chronicle"}]}}`,
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
	turn := feedAll(t, geminiAd, strings.TrimSuffix(strings.TrimPrefix(string(ev), "data: "), "\r\n\r\n"))
	if turn.Finish != FinishError || turn.Error == nil {
		t.Errorf("gemini error turn %+v", turn)
	}
}
