package openaichat

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/internal/formattest"
	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"
)

func TestOpenAIQuirks(t *testing.T) {
	tests := []struct {
		name     string
		ad       adapters.Adapter
		payloads []string
		want     string
		finish   adapters.FinishReason
		terminal bool
	}{
		{"null delta keeps reasoning", deepSeekAd, []string{
			`{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":""}}]}`,
			`{"choices":[{"index":0,"delta":{"content":null,"reasoning_content":"think"}}]}`,
			`{"choices":[{"index":0,"delta":{"content":"hi","reasoning_content":null}}]}`,
			`{"choices":[{"index":0,"delta":{"content":"","reasoning_content":null},"finish_reason":"stop"}],"usage":{"prompt_tokens":1}}`,
			`[DONE]`,
		}, `{"role":"assistant","content":"hi","reasoning_content":"think"}`, adapters.FinishStop, true},
		{"no [DONE] is truncated", openAIAd, []string{
			`{"choices":[{"index":0,"delta":{"content":"partial"}}]}`,
		}, `{"role":"assistant","content":"partial"}`, adapters.FinishNone, false},
		{"empty choices and usage-only chunk", openAIAd, []string{
			`{"choices":[],"usage":null}`,
			`{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":null}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"length"}],"usage":null}`,
			`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}`,
			`[DONE]`,
		}, `{"role":"assistant","content":"a"}`, adapters.FinishLength, true},
		{"interleaved calls by index", openAIAd, []string{
			`{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","type":"function","function":{"name":"g","arguments":""}}]}}]}`,
			`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\""}}]}}]}`,
			`{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]}}]}`,
			`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]}}]}`,
			`{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}`, `[DONE]`,
		}, `{"role":"assistant","content":null,"tool_calls":[{"id":"b","type":"function","function":{"name":"g","arguments":"{}"}},{"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]}`, adapters.FinishToolCalls, true},
		{"gemini-openai: no index, parallel in one delta, stop means tool calls, no [DONE]", gemOAIAd, []string{
			`{"choices":[{"delta":{"role":"assistant","tool_calls":[{"extra_content":{"google":{"thought_signature":"sig"}},"function":{"arguments":"{}","name":"f"},"id":"c1","type":"function"},{"function":{"arguments":"{}","name":"f"},"id":"c2","type":"function"}]},"index":0}]}`,
			`{"choices":[{"delta":{"content":"","role":"assistant"},"finish_reason":"stop","index":0}]}`,
		}, `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"},"extra_content":{"google":{"thought_signature":"sig"}}},{"id":"c2","type":"function","function":{"name":"f","arguments":"{}"}}]}`, adapters.FinishToolCalls, true},
		{"unknown delta fields kept, other choices ignored", openAIAd, []string{
			`{"choices":[{"index":1,"delta":{"content":"other"}},{"index":0,"delta":{"content":"x","audio":{"id":"a1"}}}]}`,
			`[DONE]`,
		}, `{"role":"assistant","content":"x","audio":{"id":"a1"}}`, adapters.FinishNone, true},
		{"escapes and unicode concatenate", openAIAd, []string{
			`{"choices":[{"delta":{"content":"\ud83d"}}]}`,
			`{"choices":[{"delta":{"content":"\ude00 \"q\"\n"}}]}`,
			`[DONE]`,
		}, `{"role":"assistant","content":"😀 \"q\"\n"}`, adapters.FinishNone, true},
		{"error in stream", openAIAd, []string{
			`{"choices":[{"delta":{"content":"x"}}]}`,
			`{"error":{"message":"boom","type":"server_error"}}`,
		}, `{"role":"assistant","content":"x"}`, adapters.FinishError, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			turn := formattest.FeedAll(t, tc.ad, tc.payloads...)
			formattest.MustEqualJSON(t, tc.want, turn.Message)
			if turn.Finish != tc.finish || turn.Terminal != tc.terminal {
				t.Errorf("finish %q terminal %v, want %q %v", turn.Finish, turn.Terminal, tc.finish, tc.terminal)
			}
		})
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
	body := formattest.Fixture(t, "openai-chat/text.sse")
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
			formattest.JSONValue(t, []byte(strings.TrimSuffix(strings.TrimPrefix(e, "data: "), "\n\n")))
		}
	}
}

// TestOpenAIUsage reads usage objects with the raw member walker the way
// gjson's ForEach and Get read them (the reference below, the earlier
// implementation): plain counts, DeepSeek's and OpenAI's cached counts,
// reasoning, escaped keys, numbers written as floats or strings, members
// missing or of the wrong type.
func TestOpenAIUsage(t *testing.T) {
	reference := func(u gjson.Result) adapters.Usage {
		if !u.IsObject() {
			return adapters.Usage{}
		}
		us := adapters.Usage{Present: true}
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
	reference := func(toolCalls string) []adapters.ToolCall {
		var calls []adapters.ToolCall
		gjson.Parse(toolCalls).ForEach(func(_, c gjson.Result) bool {
			calls = append(calls, adapters.ToolCall{ID: c.Get("id").String(), Name: c.Get("function.name").String()})
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

func TestFeedRejectsGarbage(t *testing.T) {
	for _, a := range []adapters.Adapter{openAIAd} {
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
		{openAIAd, "POST", "/v1/chat/completions", "", `{"model":"gpt-4.1","stream":true}`, adapters.Op{Kind: adapters.OpGenerate, Stream: true, Framing: adapters.FramingSSE, Model: "gpt-4.1"}},
		{deepSeekAd, "POST", "/chat/completions", "", `{"model":"deepseek-v4-flash"}`, adapters.Op{Kind: adapters.OpGenerate, Model: "deepseek-v4-flash"}},
		{gemOAIAd, "POST", "/v1beta/openai/chat/completions", "", `{"model":"gemini-3-flash-preview","stream":false}`, adapters.Op{Kind: adapters.OpGenerate, Model: "gemini-3-flash-preview"}},
		{openAIAd, "GET", "/v1/models", "", ``, adapters.Op{}},
		{openAIAd, "POST", "/v1/embeddings", "", `{"model":"x"}`, adapters.Op{}},
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
	if _, err := openAIAd.SetMessages(body, []byte(`[`)); !errors.Is(err, adapters.ErrInvalidJSON) {
		t.Errorf("invalid messages: %v", err)
	}
	if _, ok := openAIAd.Messages([]byte(`{"messages":null}`)); ok {
		t.Error("null messages reported present")
	}
}

func TestWalkMessages(t *testing.T) {
	req := formattest.Fixture(t, "openai-chat/request.tool-results.json")
	msgs, _ := openAIAd.Messages(req)
	type row struct {
		Index   int
		Role    string
		Calls   []adapters.ToolCall
		Results []adapters.ToolResult
		Empty   bool
	}
	var got []row
	err := openAIAd.WalkMessages(msgs, func(m adapters.Message) bool {
		if !bytes.Equal(m.Raw, msgs[bytes.Index(msgs, m.Raw):][:len(m.Raw)]) || !json.Valid(m.Raw) {
			t.Errorf("raw %d not a slice of the input", m.Index)
		}
		got = append(got, row{m.Index, m.Role, append([]adapters.ToolCall(nil), m.Calls...), append([]adapters.ToolResult(nil), m.Results...), m.EmptyText})
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []row{
		{0, "user", nil, nil, false},
		{1, "user", nil, nil, false},
		{2, "assistant", []adapters.ToolCall{{ID: "call_JMW1whyEaYG438VE1OIflxA2", Name: "GetWeatherArgs"}, {ID: "call_DNYTawLBoN8fj3KN6qU9N1Ou", Name: "get_stock_price"}}, nil, true},
		{3, "tool", nil, []adapters.ToolResult{{CallID: "call_JMW1whyEaYG438VE1OIflxA2"}}, false},
		{4, "tool", nil, []adapters.ToolResult{{CallID: "call_DNYTawLBoN8fj3KN6qU9N1Ou"}}, false},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("openai walk (-want +got)\n%s", diff)
	}
	// Stopping early.
	n := 0
	_ = openAIAd.WalkMessages(msgs, func(adapters.Message) bool { n++; return n < 2 })
	if n != 2 {
		t.Errorf("walk did not stop: %d", n)
	}
	if err := openAIAd.WalkMessages([]byte(`{}`), func(adapters.Message) bool { return true }); !errors.Is(err, adapters.ErrNoMessages) {
		t.Errorf("walk of an object: %v", err)
	}
}

func TestPrepareUpstream(t *testing.T) {
	body := []byte(`{"model":"gpt-4.1","messages":[],"stream":true}`)
	up, err := openAIAd.PrepareUpstream(body, adapters.Prepare{SessionID: "thr-1", Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	if !up.AddedUsage || up.SessionID != "thr-1" || len(up.Headers) != 0 {
		t.Errorf("up = %+v", up)
	}
	formattest.MustEqualJSON(t, `{"model":"gpt-4.1","messages":[],"stream":true,"prompt_cache_key":"thr-1","stream_options":{"include_usage":true}}`, up.Body)
	if !bytes.HasPrefix(up.Body, body[:len(body)-1]) {
		t.Errorf("original bytes changed: %s", up.Body)
	}
	// The client's own key and include_usage are kept.
	own := []byte(`{"prompt_cache_key":"mine","stream_options":{"include_usage":true}}`)
	up, _ = openAIAd.PrepareUpstream(own, adapters.Prepare{SessionID: "thr-1", Stream: true})
	if up.AddedUsage || up.SessionID != "mine" || string(up.Body) != string(own) {
		t.Errorf("client values: %+v", up)
	}
	// DeepSeek: no session field, no usage injection.
	up, _ = deepSeekAd.PrepareUpstream(body, adapters.Prepare{SessionID: "thr-1", Stream: true})
	if up.AddedUsage || up.SessionID != "" || string(up.Body) != string(body) {
		t.Errorf("deepseek: %+v", up)
	}
	// adapters.Header-based sessions (OpenCode-style), no field.
	oc := New(Dialect{Name: "opencode", SessionHeaders: []string{"x-opencode-session"}})
	up, _ = oc.PrepareUpstream(body, adapters.Prepare{SessionID: "thr-9", Stream: false})
	if diff := cmp.Diff([]adapters.Header{{Name: "x-opencode-session", Value: "thr-9"}}, up.Headers); diff != "" || up.SessionID != "thr-9" || up.AddedUsage {
		t.Errorf("opencode: %+v %s", up, diff)
	}
}

func TestErrorBodies(t *testing.T) {
	formattest.MustEqualJSON(t, `{"error":{"message":"thread is busy","type":"invalid_request_error","param":null,"code":"thread_busy"}}`,
		openAIAd.ErrorBody(409, "thread_busy", "thread is busy"))
	formattest.MustEqualJSON(t, `{"error":{"message":"x","type":"server_error","param":null,"code":"store_unavailable"}}`,
		openAIAd.ErrorBody(503, "store_unavailable", "x"))
	ev := openAIAd.StreamErrorEvent(504, "upstream_timeout", "t")
	if !bytes.HasPrefix(ev, []byte("data: {\"error\":")) || !bytes.HasSuffix(ev, []byte("}\n\n")) {
		t.Errorf("openai stream error %q", ev)
	}
}

func TestMessageText(t *testing.T) {
	tests := []struct {
		msg  string
		want string
	}{
		{`{"role":"assistant","content":"Hello there"}`, "Hello there"},
		{`{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`, "ab"},
		{`{"role":"assistant","content":null,"tool_calls":[]}`, ""},
	}
	for _, tt := range tests {
		if got := openAIAd.MessageText([]byte(tt.msg)); got != tt.want {
			t.Errorf("MessageText(%s) = %q, want %q", tt.msg, got, tt.want)
		}
	}
}
