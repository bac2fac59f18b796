package adapters

import (
	"bytes"
	"errors"
	"github.com/tidwall/gjson"
	"slices"
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

func TestOpenAIQuirks(t *testing.T) {
	tests := []struct {
		name     string
		ad       Adapter
		payloads []string
		want     string
		finish   FinishReason
		terminal bool
	}{
		{"null delta keeps reasoning", deepSeekAd, []string{
			`{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":""}}]}`,
			`{"choices":[{"index":0,"delta":{"content":null,"reasoning_content":"think"}}]}`,
			`{"choices":[{"index":0,"delta":{"content":"hi","reasoning_content":null}}]}`,
			`{"choices":[{"index":0,"delta":{"content":"","reasoning_content":null},"finish_reason":"stop"}],"usage":{"prompt_tokens":1}}`,
			`[DONE]`,
		}, `{"role":"assistant","content":"hi","reasoning_content":"think"}`, FinishStop, true},
		{"no [DONE] is truncated", openAIAd, []string{
			`{"choices":[{"index":0,"delta":{"content":"partial"}}]}`,
		}, `{"role":"assistant","content":"partial"}`, FinishNone, false},
		{"empty choices and usage-only chunk", openAIAd, []string{
			`{"choices":[],"usage":null}`,
			`{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":null}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"length"}],"usage":null}`,
			`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}`,
			`[DONE]`,
		}, `{"role":"assistant","content":"a"}`, FinishLength, true},
		{"interleaved calls by index", openAIAd, []string{
			`{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","type":"function","function":{"name":"g","arguments":""}}]}}]}`,
			`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\""}}]}}]}`,
			`{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]}}]}`,
			`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]}}]}`,
			`{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}`, `[DONE]`,
		}, `{"role":"assistant","content":null,"tool_calls":[{"id":"b","type":"function","function":{"name":"g","arguments":"{}"}},{"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]}`, FinishToolCalls, true},
		{"gemini-openai: no index, parallel in one delta, stop means tool calls, no [DONE]", gemOAIAd, []string{
			`{"choices":[{"delta":{"role":"assistant","tool_calls":[{"extra_content":{"google":{"thought_signature":"sig"}},"function":{"arguments":"{}","name":"f"},"id":"c1","type":"function"},{"function":{"arguments":"{}","name":"f"},"id":"c2","type":"function"}]},"index":0}]}`,
			`{"choices":[{"delta":{"content":"","role":"assistant"},"finish_reason":"stop","index":0}]}`,
		}, `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"},"extra_content":{"google":{"thought_signature":"sig"}}},{"id":"c2","type":"function","function":{"name":"f","arguments":"{}"}}]}`, FinishToolCalls, true},
		{"unknown delta fields kept, other choices ignored", openAIAd, []string{
			`{"choices":[{"index":1,"delta":{"content":"other"}},{"index":0,"delta":{"content":"x","audio":{"id":"a1"}}}]}`,
			`[DONE]`,
		}, `{"role":"assistant","content":"x","audio":{"id":"a1"}}`, FinishNone, true},
		{"escapes and unicode concatenate", openAIAd, []string{
			`{"choices":[{"delta":{"content":"\ud83d"}}]}`,
			`{"choices":[{"delta":{"content":"\ude00 \"q\"\n"}}]}`,
			`[DONE]`,
		}, `{"role":"assistant","content":"😀 \"q\"\n"}`, FinishNone, true},
		{"error in stream", openAIAd, []string{
			`{"choices":[{"delta":{"content":"x"}}]}`,
			`{"error":{"message":"boom","type":"server_error"}}`,
		}, `{"role":"assistant","content":"x"}`, FinishError, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			turn := feedAll(t, tc.ad, tc.payloads...)
			mustEqualJSON(t, tc.want, turn.Message)
			if turn.Finish != tc.finish || turn.Terminal != tc.terminal {
				t.Errorf("finish %q terminal %v, want %q %v", turn.Finish, turn.Terminal, tc.finish, tc.terminal)
			}
		})
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
	for _, a := range []Adapter{openAIAd, geminiAd} {
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
		{openAIAd, "POST", "/v1/chat/completions", "", `{"model":"gpt-4.1","stream":true}`, Op{Kind: OpGenerate, Stream: true, Framing: FramingSSE, Model: "gpt-4.1"}},
		{deepSeekAd, "POST", "/chat/completions", "", `{"model":"deepseek-v4-flash"}`, Op{Kind: OpGenerate, Model: "deepseek-v4-flash"}},
		{gemOAIAd, "POST", "/v1beta/openai/chat/completions", "", `{"model":"gemini-3-flash-preview","stream":false}`, Op{Kind: OpGenerate, Model: "gemini-3-flash-preview"}},
		{openAIAd, "GET", "/v1/models", "", ``, Op{}},
		{openAIAd, "POST", "/v1/embeddings", "", `{"model":"x"}`, Op{}},
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
	body := []byte(`{"model":"m",  "messages" : [ {"role":"user","content":"hi"} ], "z":1}`)
	msgs, ok := openAIAd.Messages(body)
	if !ok || string(msgs) != `[ {"role":"user","content":"hi"} ]` {
		t.Fatalf("Messages = %q %v", msgs, ok)
	}
	out, err := openAIAd.SetMessages(body, []byte(`[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"model":"m",  "messages" : [{"role":"user","content":"a"},{"role":"assistant","content":"b"}], "z":1}`; string(out) != want {
		t.Errorf("SetMessages = %s", out)
	}
	if _, err := openAIAd.SetMessages(body, []byte(`[`)); !errors.Is(err, ErrInvalidJSON) {
		t.Errorf("invalid messages: %v", err)
	}
	if _, ok := openAIAd.Messages([]byte(`{"messages":null}`)); ok {
		t.Error("null messages reported present")
	}

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
	req := fixture(t, "openai-chat/request.tool-results.json")
	msgs, _ := openAIAd.Messages(req)
	type row struct {
		Index   int
		Role    string
		Calls   []ToolCall
		Results []ToolResult
		Empty   bool
	}
	var got []row
	err := openAIAd.WalkMessages(msgs, func(m Message) bool {
		if !bytes.Equal(m.Raw, msgs[bytes.Index(msgs, m.Raw):][:len(m.Raw)]) || !jsonValid(m.Raw) {
			t.Errorf("raw %d not a slice of the input", m.Index)
		}
		got = append(got, row{m.Index, m.Role, append([]ToolCall(nil), m.Calls...), append([]ToolResult(nil), m.Results...), m.EmptyText})
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []row{
		{0, "user", nil, nil, false},
		{1, "user", nil, nil, false},
		{2, "assistant", []ToolCall{{"call_JMW1whyEaYG438VE1OIflxA2", "GetWeatherArgs"}, {"call_DNYTawLBoN8fj3KN6qU9N1Ou", "get_stock_price"}}, nil, true},
		{3, "tool", nil, []ToolResult{{CallID: "call_JMW1whyEaYG438VE1OIflxA2"}}, false},
		{4, "tool", nil, []ToolResult{{CallID: "call_DNYTawLBoN8fj3KN6qU9N1Ou"}}, false},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("openai walk (-want +got)\n%s", diff)
	}

	greq := fixture(t, "gemini/request.tool-results.json")
	contents, _ := geminiAd.Messages(greq)
	got = nil
	if err := geminiAd.WalkMessages(contents, func(m Message) bool {
		got = append(got, row{m.Index, m.Role, append([]ToolCall(nil), m.Calls...), append([]ToolResult(nil), m.Results...), m.EmptyText})
		return true
	}); err != nil {
		t.Fatal(err)
	}
	want = []row{
		{0, "user", nil, nil, false},
		{1, "model", []ToolCall{{"", "get_weather"}, {"", "get_weather"}}, nil, true},
		{2, "user", nil, []ToolResult{{Name: "get_weather"}, {Name: "get_weather"}}, true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("gemini walk (-want +got)\n%s", diff)
	}
	// Stopping early.
	n := 0
	_ = openAIAd.WalkMessages(msgs, func(Message) bool { n++; return n < 2 })
	if n != 2 {
		t.Errorf("walk did not stop: %d", n)
	}
	if err := openAIAd.WalkMessages([]byte(`{}`), func(Message) bool { return true }); !errors.Is(err, ErrNoMessages) {
		t.Errorf("walk of an object: %v", err)
	}
}

func jsonValid(b []byte) bool { return jsonValueOK(b) }

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
	up, err := openAIAd.PrepareUpstream(body, Prepare{SessionID: "thr-1", Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	if !up.AddedUsage || up.SessionID != "thr-1" || len(up.Headers) != 0 {
		t.Errorf("up = %+v", up)
	}
	mustEqualJSON(t, `{"model":"gpt-4.1","messages":[],"stream":true,"prompt_cache_key":"thr-1","stream_options":{"include_usage":true}}`, up.Body)
	if !bytes.HasPrefix(up.Body, body[:len(body)-1]) {
		t.Errorf("original bytes changed: %s", up.Body)
	}
	// The client's own key and include_usage are kept.
	own := []byte(`{"prompt_cache_key":"mine","stream_options":{"include_usage":true}}`)
	up, _ = openAIAd.PrepareUpstream(own, Prepare{SessionID: "thr-1", Stream: true})
	if up.AddedUsage || up.SessionID != "mine" || string(up.Body) != string(own) {
		t.Errorf("client values: %+v", up)
	}
	// DeepSeek: no session field, no usage injection.
	up, _ = deepSeekAd.PrepareUpstream(body, Prepare{SessionID: "thr-1", Stream: true})
	if up.AddedUsage || up.SessionID != "" || string(up.Body) != string(body) {
		t.Errorf("deepseek: %+v", up)
	}
	// Header-based sessions (OpenCode-style), no field.
	oc := NewOpenAIChat(Dialect{Name: "opencode", SessionHeaders: []string{"x-opencode-session"}})
	up, _ = oc.PrepareUpstream(body, Prepare{SessionID: "thr-9", Stream: false})
	if diff := cmp.Diff([]Header{{"x-opencode-session", "thr-9"}}, up.Headers); diff != "" || up.SessionID != "thr-9" || up.AddedUsage {
		t.Errorf("opencode: %+v %s", up, diff)
	}
	up, _ = geminiAd.PrepareUpstream(body, Prepare{SessionID: "thr-1", Stream: true})
	if up.SessionID != "" || up.AddedUsage || len(up.Headers) != 0 {
		t.Errorf("gemini: %+v", up)
	}
}

func TestStripAddedUsage(t *testing.T) {
	tests := []struct {
		in, want string
		drop     bool
	}{
		{"data: {\"id\":\"x\",\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null,\"obfuscation\":\"q\"}\n\n",
			"data: {\"id\":\"x\",\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"obfuscation\":\"q\"}\n\n", false},
		{"data: {\"usage\":null,\"choices\":[]}\n\n", "data: {\"choices\":[]}\n\n", false},
		{"data: {\"choices\":[{}], \"usage\" : null }\n\n", "data: {\"choices\":[{}] }\n\n", false},
		{"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\n", "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\n", true},
		{"data: {\"choices\":[{\"delta\":{\"content\":\"\\\"usage\\\":null\"}}]}\n\n", "data: {\"choices\":[{\"delta\":{\"content\":\"\\\"usage\\\":null\"}}]}\n\n", false},
		{"data: [DONE]\n\n", "data: [DONE]\n\n", false},
		{": keep-alive\n\n", ": keep-alive\n\n", false},
	}
	for _, tc := range tests {
		out, drop := openAIAd.StripAddedUsage([]byte(tc.in))
		if string(out) != tc.want || drop != tc.drop {
			t.Errorf("Strip(%q) = %q %v, want %q %v", tc.in, out, drop, tc.want, tc.drop)
		}
	}
	// Over a whole recorded stream: the forwarded events are what the
	// client would have received without include_usage.
	body := fixture(t, "openai-chat/text.sse")
	evs := strings.SplitAfter(string(body), "\n\n")
	var fwd []string
	for _, e := range evs {
		if e == "" {
			continue
		}
		out, drop := openAIAd.StripAddedUsage([]byte(e))
		if drop {
			continue
		}
		fwd = append(fwd, string(out))
	}
	if len(fwd) != len(evs)-2 {
		t.Errorf("forwarded %d of %d events", len(fwd), len(evs)-1)
	}
	for _, e := range fwd {
		if strings.Contains(e, `"usage"`) {
			t.Errorf("usage left in %q", e)
		}
		if e != "data: [DONE]\n\n" {
			jsonValue(t, []byte(strings.TrimSuffix(strings.TrimPrefix(e, "data: "), "\n\n")))
		}
	}
}

func TestErrorBodies(t *testing.T) {
	mustEqualJSON(t, `{"error":{"message":"thread is busy","type":"invalid_request_error","param":null,"code":"thread_busy"}}`,
		openAIAd.ErrorBody(409, "thread_busy", "thread is busy"))
	mustEqualJSON(t, `{"error":{"message":"x","type":"server_error","param":null,"code":"store_unavailable"}}`,
		openAIAd.ErrorBody(503, "store_unavailable", "x"))
	mustEqualJSON(t, `{"error":{"code":409,"message":"thread is \"busy\"","status":"ABORTED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"THREAD_BUSY","domain":"chronicle"}]}}`,
		geminiAd.ErrorBody(409, "thread_busy", `thread is "busy"`))
	for status, want := range map[int]string{400: "INVALID_ARGUMENT", 413: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND",
		409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED", 500: "INTERNAL"} {
		if got := GoogleStatus(status); got != want {
			t.Errorf("GoogleStatus(%d) = %s", status, got)
		}
	}
	ev := openAIAd.StreamErrorEvent(504, "upstream_timeout", "t")
	if !bytes.HasPrefix(ev, []byte("data: {\"error\":")) || !bytes.HasSuffix(ev, []byte("}\n\n")) {
		t.Errorf("openai stream error %q", ev)
	}
	ev = geminiAd.StreamErrorEvent(504, "upstream_timeout", "t")
	if !bytes.HasPrefix(ev, []byte("data: {\"error\":")) || !bytes.HasSuffix(ev, []byte("}\r\n\r\n")) {
		t.Errorf("gemini stream error %q", ev)
	}
	// An assembler that sees chronicle's own stream error reports it.
	turn := feedAll(t, geminiAd, strings.TrimSuffix(strings.TrimPrefix(string(ev), "data: "), "\r\n\r\n"))
	if turn.Finish != FinishError || turn.Error == nil {
		t.Errorf("gemini error turn %+v", turn)
	}
}

// TestOpenAIUsage reads usage objects with the raw member walker the way
// gjson's ForEach and Get read them (the reference below, the earlier
// implementation): plain counts, DeepSeek's and OpenAI's cached counts,
// reasoning, escaped keys, numbers written as floats or strings, members
// missing or of the wrong type.
func TestOpenAIUsage(t *testing.T) {
	reference := func(u gjson.Result) Usage {
		if !u.IsObject() {
			return Usage{}
		}
		us := Usage{Present: true}
		u.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "prompt_tokens":
				us.InputTokens = v.Int()
			case "completion_tokens":
				us.OutputTokens = v.Int()
			case "prompt_tokens_details":
				if c := v.Get("cached_tokens"); c.Exists() {
					us.CachedTokens = c.Int()
				}
			case "prompt_cache_hit_tokens":
				if us.CachedTokens == 0 {
					us.CachedTokens = v.Int()
				}
			case "completion_tokens_details":
				us.ReasoningTokens = v.Get("reasoning_tokens").Int()
			}
			return true
		})
		return us
	}
	for _, in := range []string{
		`{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}`,
		`{"prompt_tokens":1200,"completion_tokens":8,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":64}}`,
		`{"prompt_tokens":30,"completion_tokens":5,"prompt_cache_hit_tokens":24,"prompt_cache_miss_tokens":6}`,
		`{"prompt_cache_hit_tokens":24,"prompt_tokens_details":{"cached_tokens":20}}`,
		`{"prompt_tokens_details":{"cached_tokens":20},"prompt_cache_hit_tokens":24}`,
		` { "prompt_tokens" : 7 , "completion_tokens" : 9 } `,
		`{"prompt\u005ftokens":5,"completion_tokens":"6","prompt_tokens_details":{"cached\u005ftokens":2}}`,
		`{"prompt_tokens":12.0,"completion_tokens":1e3,"completion_tokens_details":{"reasoning_tokens":-4}}`,
		`{"prompt_tokens":123456789012345678901,"completion_tokens":null}`,
		`{"prompt_tokens_details":null,"completion_tokens_details":[1,2]}`,
		`{"prompt_tokens_details":{},"completion_tokens_details":{"accepted_prediction_tokens":3}}`,
		`{}`, `[]`, `null`, `12`, ``,
	} {
		if got, want := openAIUsage(gjson.Parse(in)), reference(gjson.Parse(in)); got != want {
			t.Errorf("openAIUsage(%s) = %+v, want %+v", in, got, want)
		}
	}
}

// TestAppendOpenAICalls reads tool_calls arrays with the raw walkers as
// gjson's ForEach and Get read them (the reference, the earlier
// implementation), for arrays. Other values hold no calls: gjson's
// ForEach called its function once for "tool_calls": null, which made a
// message that some clients send with a null member look like a call with
// an empty id.
func TestAppendOpenAICalls(t *testing.T) {
	reference := func(toolCalls string) []ToolCall {
		var calls []ToolCall
		gjson.Parse(toolCalls).ForEach(func(_, c gjson.Result) bool {
			calls = append(calls, ToolCall{ID: c.Get("id").String(), Name: c.Get("function.name").String()})
			return true
		})
		return calls
	}
	for _, in := range []string{
		`[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]`,
		`[{"id":"call_1","function":{"name":"a"}},{"id":"call_2","function":{"name":"b","arguments":"{}"}}]`,
		` [ { "id" : "call\u005f1" , "function" : { "name" : "we\"ird" } } ] `,
		`[{"function":{"name":"no_id"}},{"id":"no_function"},{"id":7,"function":{"name":null}}]`,
		`[{"id":"x","function":"not an object"},1,"str",null,[]]`,
		`[]`, `null`, ``,
	} {
		got := appendOpenAICalls(nil, in)
		want := reference(in)
		if !gjson.Parse(in).IsArray() {
			want = nil
		}
		if !slices.Equal(got, want) {
			t.Errorf("appendOpenAICalls(%s) = %+v, want %+v", in, got, want)
		}
	}
}
