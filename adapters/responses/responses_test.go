package responses

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/internal/formattest"
	"github.com/chronicle-proxy/chronicle/adapters/sse"
	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"
)

var (
	respAd    = New(OpenAI)
	chatGPTAd = New(ChatGPT)
)

var responsesGoldens = []formattest.Golden{
	{Dir: "openai-responses", Name: "text", Adapter: respAd, Model: "gpt-5.1-codex-max",
		Usage: adapters.Usage{Present: true, InputTokens: 299, OutputTokens: 12}, Finish: adapters.FinishStop},
	{Dir: "openai-responses", Name: "reasoning-tool", Adapter: respAd, Model: "gpt-5.1-codex-max",
		Usage: adapters.Usage{Present: true, InputTokens: 134, OutputTokens: 28}, Finish: adapters.FinishToolCalls,
		Calls: []adapters.ToolCall{{ID: "call_AB6AaRZ1FYZB2RwS6A5vbdqn", Name: "calculator"}}},
	{Dir: "openai-responses", Name: "parallel-tools", Adapter: respAd, Model: "gpt-5.1-codex-max",
		Usage:  adapters.Usage{Present: true, InputTokens: 1843, OutputTokens: 97, CachedTokens: 1664, ReasoningTokens: 38},
		Finish: adapters.FinishToolCalls,
		Calls:  []adapters.ToolCall{{ID: "call_dsSRzXOROrILG48hJaEy1JSR", Name: "get_weather"}, {ID: "call_XAS6JGzqCNWmO52wVwD9kh8w", Name: "get_weather"}}},
	// The ChatGPT/Codex backend streams the same events (chatgpt-codex/README.md).
	{Dir: "openai-responses", Name: "parallel-tools", Adapter: chatGPTAd, Model: "gpt-5.1-codex-max",
		Usage:  adapters.Usage{Present: true, InputTokens: 1843, OutputTokens: 97, CachedTokens: 1664, ReasoningTokens: 38},
		Finish: adapters.FinishToolCalls,
		Calls:  []adapters.ToolCall{{ID: "call_dsSRzXOROrILG48hJaEy1JSR", Name: "get_weather"}, {ID: "call_XAS6JGzqCNWmO52wVwD9kh8w", Name: "get_weather"}}},
}

// TestResponsesGoldenStreams feeds every Responses fixture stream whole,
// in chunks and one byte at a time through adapters/sse, and through a
// reused assembler; the message must equal .expected.json.
func TestResponsesGoldenStreams(t *testing.T) {
	for _, g := range responsesGoldens {
		body := formattest.Fixture(t, g.Dir+"/"+g.Name+".sse")
		want := formattest.JSONValue(t, formattest.Fixture(t, g.Dir+"/"+g.Name+".expected.json"))
		for _, src := range []struct {
			how string
			r   io.Reader
		}{
			{"whole", bytes.NewReader(body)},
			{"97-byte chunks", &formattest.Chunked{B: body, N: 97}},
			{"5-byte chunks", &formattest.Chunked{B: body, N: 5}},
			{"one byte at a time", iotest.OneByteReader(bytes.NewReader(body))},
		} {
			formattest.CheckTurn(t, g, src.how, formattest.AssembleSSE(t, g.Adapter, src.r), want, true)
		}
		asm := g.Adapter.NewAssembler()
		for range 2 {
			r := sse.NewReader(bytes.NewReader(body), 0)
			for ev, err := r.Next(); err == nil; ev, err = r.Next() {
				if ev.HasData {
					if err := asm.Feed(ev.Data); err != nil {
						t.Fatal(err)
					}
				}
			}
			formattest.CheckTurn(t, g, "reused", asm.Result(), want, true)
			asm.Reset()
		}
	}
}

func TestResponsesGoldenNonStream(t *testing.T) {
	for _, g := range responsesGoldens {
		want := formattest.JSONValue(t, formattest.Fixture(t, g.Dir+"/"+g.Name+".expected.json"))
		turn, err := g.Adapter.ParseResponse(formattest.Fixture(t, g.Dir+"/"+g.Name+".json"))
		if err != nil {
			t.Fatalf("%s: %v", g.ID(), err)
		}
		formattest.CheckTurn(t, g, "non-stream", turn, want, true)
	}
	// The real non-stream recording with its newer fields.
	body := formattest.Fixture(t, "openai-responses/recorded-nonstream.json")
	turn, err := respAd.ParseResponse(body)
	if err != nil {
		t.Fatal(err)
	}
	formattest.MustEqualJSON(t, gjson.GetBytes(body, "output").Raw, turn.Message)
	if !turn.Usage.Present || turn.Usage.InputTokens != gjson.GetBytes(body, "usage.input_tokens").Int() || !turn.Terminal {
		t.Errorf("recorded-nonstream: %+v", turn)
	}
}

// sseEvents returns the data payloads of an SSE body.
func sseEvents(t testing.TB, body []byte) [][]byte {
	t.Helper()
	var out [][]byte
	r := sse.NewReader(bytes.NewReader(body), 0)
	for ev, err := r.Next(); err == nil; ev, err = r.Next() {
		if ev.HasData {
			out = append(out, append([]byte(nil), ev.Data...))
		}
	}
	return out
}

// TestResponsesWithoutCompleted checks the fallbacks: without the terminal
// event the items come from output_item.done (not terminal), and before
// that from output_item.added plus the deltas so far.
func TestResponsesWithoutCompleted(t *testing.T) {
	evs := sseEvents(t, formattest.Fixture(t, "openai-responses/text.sse"))
	want := string(formattest.Fixture(t, "openai-responses/text.expected.json"))
	asm := respAd.NewAssembler()
	for _, ev := range evs[:len(evs)-1] {
		if err := asm.Feed(ev); err != nil {
			t.Fatal(err)
		}
	}
	turn := asm.Result()
	formattest.MustEqualJSON(t, want, turn.Message)
	if turn.Terminal || turn.Finish != adapters.FinishNone || turn.Usage.Present {
		t.Errorf("truncated stream: terminal %v finish %q usage %+v", turn.Terminal, turn.Finish, turn.Usage)
	}

	// Cut before output_text.done: the text so far, in progress.
	asm.Reset()
	for _, ev := range evs {
		if gjson.GetBytes(ev, "type").Str == "response.output_text.done" {
			break
		}
		_ = asm.Feed(ev)
	}
	turn = asm.Result()
	formattest.MustEqualJSON(t, `[{"id":"msg_01830d662ab3856501693c32183a488190a612c410a0a39823","type":"message","status":"in_progress","content":[{"type":"output_text","annotations":[],"text":"The final result is **570**."}],"role":"assistant"}]`, turn.Message)

	// Reasoning summary and arguments so far.
	evs = sseEvents(t, formattest.Fixture(t, "openai-responses/reasoning-tool.sse"))
	asm.Reset()
	for _, ev := range evs {
		if gjson.GetBytes(ev, "sequence_number").Int() == 20 {
			break
		}
		_ = asm.Feed(ev)
	}
	turn = asm.Result()
	if got := gjson.GetBytes(turn.Message, "0.summary.0.text").Str; got != "**Calculating step-by-step using calculator**\n\nI'll compute 12 plus 7, then multiply the" {
		t.Errorf("summary so far %q", got)
	}
	asm.Reset()
	for _, ev := range evs {
		if gjson.GetBytes(ev, "sequence_number").Int() == 46 {
			break
		}
		_ = asm.Feed(ev)
	}
	turn = asm.Result()
	if got := gjson.GetBytes(turn.Message, "1.arguments").Str; got != `{"a":12,"b` {
		t.Errorf("arguments so far %q in %s", got, turn.Message)
	}
	if len(turn.ToolCalls) != 1 || turn.Finish != adapters.FinishNone {
		t.Errorf("calls %v finish %q", turn.ToolCalls, turn.Finish)
	}
}

func TestResponsesErrorStream(t *testing.T) {
	turn := formattest.AssembleSSE(t, respAd, bytes.NewReader(formattest.Fixture(t, "openai-responses/error-stream.sse")))
	if turn.Finish != adapters.FinishError || !turn.Terminal || gjson.GetBytes(turn.Error, "code").Str != "insufficient_quota" ||
		gjson.GetBytes(turn.Error, "type").Str != "insufficient_quota" {
		t.Errorf("error stream: finish %q terminal %v error %s", turn.Finish, turn.Terminal, turn.Error)
	}
	formattest.MustEqualJSON(t, `[]`, turn.Message)

	// chronicle's own error event: a flat error, read back the same way.
	ev := respAd.StreamErrorEvent(409, "thread_busy", `a "busy" thread`)
	r := sse.NewReader(bytes.NewReader(ev), 0)
	e, err := r.Next()
	if err != nil || string(e.Event) != "error" || e.Partial {
		t.Fatalf("event %q: %v", ev, err)
	}
	formattest.MustEqualJSON(t, `{"type":"error","code":"thread_busy","message":"a \"busy\" thread","param":null,"sequence_number":0}`, e.Data)
	turn = formattest.FeedAll(t, respAd, string(e.Data))
	formattest.MustEqualJSON(t, `{"code":"thread_busy","message":"a \"busy\" thread","param":null}`, turn.Error)
	if turn.Finish != adapters.FinishError || turn.Terminal {
		t.Errorf("finish %q terminal %v", turn.Finish, turn.Terminal)
	}

	// response.incomplete and response.failed without an error event.
	turn = formattest.FeedAll(t, respAd, `{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"cut"}]}],"usage":{"input_tokens":5,"output_tokens":7}}}`)
	if turn.Finish != adapters.FinishLength || turn.FinishRaw != "max_output_tokens" || !turn.Terminal || turn.Usage.OutputTokens != 7 {
		t.Errorf("incomplete: %+v", turn)
	}
	turn = formattest.FeedAll(t, respAd, `{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"boom"},"output":[]}}`)
	if turn.Finish != adapters.FinishError || !turn.Terminal || gjson.GetBytes(turn.Error, "code").Str != "server_error" {
		t.Errorf("failed: %+v", turn)
	}
	// Invalid JSON is refused.
	if err := respAd.NewAssembler().Feed([]byte(`{"type":`)); err == nil {
		t.Error("invalid event accepted")
	}
}

func TestResponsesParseErrors(t *testing.T) {
	for _, name := range []string{"error.function-call-without-reasoning.json", "error.insufficient-quota.json",
		"error.item-not-persisted.json", "error.no-tool-call-for-output.json", "error.no-tool-output.json",
		"error.reasoning-without-following-item.json", "error.temperature-unsupported.json"} {
		turn, err := respAd.ParseResponse(formattest.Fixture(t, "openai-responses/"+name))
		if err != nil || turn.Finish != adapters.FinishError || gjson.GetBytes(turn.Error, "message").Str == "" || !turn.Terminal {
			t.Errorf("%s: %+v %v", name, turn, err)
		}
	}
	for _, name := range []string{"error.instructions-not-valid.json", "error.store-must-be-false.json", "error.stream-must-be-true.json"} {
		turn, err := chatGPTAd.ParseResponse(formattest.Fixture(t, "chatgpt-codex/"+name))
		if err != nil || turn.Finish != adapters.FinishError || gjson.GetBytes(turn.Error, "detail").Str == "" {
			t.Errorf("%s: %+v %v", name, turn, err)
		}
	}
	// The Codex request: one user item, a string of tools untouched.
	msgs, ok := chatGPTAd.Messages(formattest.Fixture(t, "chatgpt-codex/request.json"))
	if !ok || gjson.GetBytes(msgs, "#").Int() != 1 || gjson.GetBytes(msgs, "0.role").Str != "user" {
		t.Errorf("codex request input: %s", msgs)
	}
	turn, err := respAd.ParseResponse([]byte(`{"object":"response","id":"resp_1","status":"queued","output":[]}`))
	if err != nil || turn.Terminal || respAd.ResponseID([]byte(`{"object":"response","id":"resp_1"}`)) != "resp_1" {
		t.Errorf("queued: %+v %v", turn, err)
	}
	if _, err := respAd.ParseResponse([]byte(`{"x":1}`)); err == nil {
		t.Error("no output accepted")
	}
	if _, err := respAd.ParseResponse([]byte(`{`)); err == nil {
		t.Error("invalid JSON accepted")
	}
}

func TestResponsesClassify(t *testing.T) {
	body := []byte(`{"model":"gpt-5.1-codex-max","stream":true,"input":"hi"}`)
	tests := []struct {
		method, path string
		body         []byte
		want         adapters.Op
	}{
		{"POST", "/v1/responses", body, adapters.Op{Kind: adapters.OpGenerate, Stream: true, Framing: adapters.FramingSSE, Model: "gpt-5.1-codex-max"}},
		{"POST", "/backend-api/codex/responses/", []byte(`{"model":"m"}`), adapters.Op{Kind: adapters.OpGenerate, Model: "m"}},
		{"GET", "/v1/responses/resp_1", nil, adapters.Op{}},
		{"GET", "/v1/responses/resp_1/input_items", nil, adapters.Op{}},
		{"POST", "/v1/responses/resp_1/cancel", nil, adapters.Op{}},
		{"POST", "/v1/responses/input_tokens", body, adapters.Op{}},
		{"POST", "/v1/chat/completions", body, adapters.Op{}},
		{"GET", "/v1/responses", nil, adapters.Op{}},
	}
	for _, tc := range tests {
		if got := respAd.Classify(tc.method, tc.path, "", tc.body); got != tc.want {
			t.Errorf("%s %s: %+v, want %+v", tc.method, tc.path, got, tc.want)
		}
	}
}

func TestResponsesMessages(t *testing.T) {
	msgs, ok := respAd.Messages([]byte(`{"input":"hi \"there\""}`))
	if !ok {
		t.Fatal("string input not read")
	}
	formattest.MustEqualJSON(t, `[{"type":"message","role":"user","content":"hi \"there\""}]`, msgs)
	body := []byte(`{"model":"m", "input" : [ {"role":"user","content":"x"} ],"z":1}`)
	msgs, ok = respAd.Messages(body)
	if !ok || string(msgs) != `[ {"role":"user","content":"x"} ]` {
		t.Errorf("array input: %q %v", msgs, ok)
	}
	for _, b := range []string{`{"model":"m"}`, `{"input":{"a":1}}`, `{"input":[1,}`} {
		if _, ok := respAd.Messages([]byte(b)); ok {
			t.Errorf("%s: messages found", b)
		}
	}
	out, err := respAd.SetMessages([]byte(`{"model":"m","input":"hi","z":1}`), []byte(`[{"role":"user","content":"x"}]`))
	if err != nil {
		t.Fatal(err)
	}
	formattest.MustEqualJSON(t, `{"model":"m","input":[{"role":"user","content":"x"}],"z":1}`, out)
	if _, err := respAd.SetMessages(body, []byte(`{"a":1}`)); err == nil {
		t.Error("non-array accepted")
	}
	if respAd.System(body) != nil {
		t.Error("system")
	}
	if out, _ := respAd.SetSystem(body, []byte(`"x"`)); !bytes.Equal(out, body) {
		t.Error("SetSystem changed the body")
	}
}

func TestResponsesWalk(t *testing.T) {
	input, _ := respAd.Messages(formattest.Fixture(t, "openai-responses/request.tool-results.json"))
	input = append(input[:len(input)-1:len(input)-1],
		`,{"role":"assistant","content":[{"type":"output_text","text":""}]},{"type":"web_search_call","id":"ws_1"},{"type":"custom_tool_call","call_id":"c9","name":"apply_patch","input":"x"},{"type":"custom_tool_call_output","call_id":"c9","output":"ok"}]`...)
	type row struct {
		Role    string
		Calls   []adapters.ToolCall
		Results []adapters.ToolResult
		Empty   bool
	}
	var got []row
	if err := respAd.WalkMessages(input, func(m adapters.Message) bool {
		if !gjson.ValidBytes(m.Raw) || !bytes.Contains(input, m.Raw) {
			t.Errorf("raw %q not a slice of the input", m.Raw)
		}
		got = append(got, row{m.Role, append([]adapters.ToolCall(nil), m.Calls...), append([]adapters.ToolResult(nil), m.Results...), m.EmptyText})
		return true
	}); err != nil {
		t.Fatal(err)
	}
	want := []row{
		{Role: "user"},
		{Role: "reasoning", Empty: true},
		{Role: "function_call", Calls: []adapters.ToolCall{{ID: "call_dsSRzXOROrILG48hJaEy1JSR", Name: "get_weather"}}, Empty: true},
		{Role: "function_call", Calls: []adapters.ToolCall{{ID: "call_XAS6JGzqCNWmO52wVwD9kh8w", Name: "get_weather"}}, Empty: true},
		{Role: "function_call_output", Results: []adapters.ToolResult{{CallID: "call_dsSRzXOROrILG48hJaEy1JSR"}}, Empty: true},
		{Role: "function_call_output", Results: []adapters.ToolResult{{CallID: "call_XAS6JGzqCNWmO52wVwD9kh8w"}}, Empty: true},
		{Role: "assistant", Empty: true},
		{Role: "web_search_call", Empty: true},
		{Role: "custom_tool_call", Calls: []adapters.ToolCall{{ID: "c9", Name: "apply_patch"}}, Empty: true},
		{Role: "custom_tool_call_output", Results: []adapters.ToolResult{{CallID: "c9"}}, Empty: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("walk (-want +got)\n%s", diff)
	}
	if err := respAd.WalkMessages([]byte(`{}`), func(adapters.Message) bool { return true }); err == nil {
		t.Error("object walked")
	}
}

func TestResponsesPrepareUpstream(t *testing.T) {
	tests := []struct {
		name    string
		ad      *Adapter
		body    string
		sid     string
		want    string
		headers []adapters.Header
		session string
	}{
		{"openai sets prompt_cache_key", respAd, `{"model":"m"}`, "s1", `{"model":"m","prompt_cache_key":"s1"}`, nil, "s1"},
		{"client's key wins", respAd, `{"model":"m","prompt_cache_key":"mine"}`, "s1", `{"model":"m","prompt_cache_key":"mine"}`, nil, "mine"},
		{"no session id", respAd, `{"model":"m"}`, "", `{"model":"m"}`, nil, ""},
		{"chatgpt header follows the body", chatGPTAd, string(formattest.Fixture(t, "chatgpt-codex/request.json")), "s1", "",
			[]adapters.Header{{Name: "session-id", Value: "019c5e2a-7b41-7d23-9f0e-40ec76cd5826"}}, "019c5e2a-7b41-7d23-9f0e-40ec76cd5826"},
		{"chatgpt without a key", chatGPTAd, `{"model":"m"}`, "s1", `{"model":"m","prompt_cache_key":"s1"}`,
			[]adapters.Header{{Name: "session-id", Value: "s1"}}, "s1"},
		{"headers only", New(Dialect{SessionHeaders: []string{"x-session"}}), `{"model":"m"}`, "s1", `{"model":"m"}`,
			[]adapters.Header{{Name: "x-session", Value: "s1"}}, "s1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up, err := tc.ad.PrepareUpstream([]byte(tc.body), adapters.Prepare{SessionID: tc.sid, Stream: true})
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if want == "" {
				want = tc.body
			}
			if want == tc.body && string(up.Body) != tc.body {
				t.Errorf("body changed: %s", up.Body)
			}
			formattest.MustEqualJSON(t, want, up.Body)
			if diff := cmp.Diff(tc.headers, up.Headers); diff != "" {
				t.Errorf("headers (-want +got)\n%s", diff)
			}
			if up.SessionID != tc.session || up.AddedUsage {
				t.Errorf("session %q added usage %v", up.SessionID, up.AddedUsage)
			}
		})
	}
	ev := []byte("event: response.completed\ndata: {}\n\n")
	if out, drop := respAd.StripAddedUsage(ev); drop || !bytes.Equal(out, ev) {
		t.Error("StripAddedUsage is not the identity")
	}
	formattest.MustEqualJSON(t, `{"error":{"message":"busy","type":"rate_limit_error","param":null,"code":"thread_busy"}}`,
		respAd.ErrorBody(429, "thread_busy", "busy"))
}

func TestExpandPreviousResponse(t *testing.T) {
	full := formattest.Fixture(t, "openai-responses/request.tool-results.json")
	prev := formattest.Fixture(t, "openai-responses/request.previous-response-id.json")
	fullInput := gjson.GetBytes(full, "input").Array()
	var stored []string
	for _, it := range fullInput[:4] { // turn 1 input + output items
		stored = append(stored, it.Raw)
	}
	out, err := ExpandPreviousResponse(prev, []byte("["+strings.Join(stored, ",")+"]"))
	if err != nil {
		t.Fatal(err)
	}
	if gjson.GetBytes(out, "previous_response_id").Exists() {
		t.Errorf("previous_response_id kept: %s", out)
	}
	formattest.MustEqualJSON(t, gjson.GetBytes(full, "input").Raw, []byte(gjson.GetBytes(out, "input").Raw))
	if gjson.GetBytes(out, "tools").Raw != gjson.GetBytes(prev, "tools").Raw {
		t.Error("other fields changed")
	}
	// A string input becomes a user item after the stored ones.
	out, err = ExpandPreviousResponse([]byte(`{"previous_response_id":"resp_1","input":"next"}`), []byte(`[{"role":"user","content":"a"}]`))
	if err != nil {
		t.Fatal(err)
	}
	formattest.MustEqualJSON(t, `{"input":[{"role":"user","content":"a"},{"type":"message","role":"user","content":"next"}]}`, out)
	// Nothing to expand.
	body := []byte(`{"input":"x"}`)
	if out, err := ExpandPreviousResponse(body, []byte(`[]`)); err != nil || !bytes.Equal(out, body) {
		t.Errorf("no previous id: %s %v", out, err)
	}
	if _, err := ExpandPreviousResponse([]byte(`{"previous_response_id":"r"}`), []byte(`{}`)); err == nil {
		t.Error("bad stored items accepted")
	}
	// No input at all: the stored items alone.
	out, err = ExpandPreviousResponse([]byte(`{"previous_response_id":"r"}`), []byte(`[{"role":"user","content":"a"}]`))
	if err != nil {
		t.Fatal(err)
	}
	formattest.MustEqualJSON(t, `{"input":[{"role":"user","content":"a"}]}`, out)
}

func TestResponsesRestore(t *testing.T) {
	stored, _ := respAd.Messages(formattest.Fixture(t, "openai-responses/request.tool-results.json"))
	items := gjson.ParseBytes(stored).Array()
	user, rs, fc1, fc2, out1, out2 := items[0].Raw, items[1].Raw, items[2].Raw, items[3].Raw, items[4].Raw, items[5].Raw
	enc := gjson.Get(rs, "encrypted_content").Raw
	// @ai-sdk/openai style: calls without id/status.
	sdk1 := `{"type":"function_call","call_id":"call_dsSRzXOROrILG48hJaEy1JSR","name":"get_weather","arguments":"{\"city\":\"Paris\"}"}`
	sdk2 := `{"type":"function_call","call_id":"call_XAS6JGzqCNWmO52wVwD9kh8w","name":"get_weather","arguments":"{\"city\":\"Tokyo\"}"}`
	stripped := `{"type":"reasoning","id":"rs_0b7f9a603b13ec1501699f02a41b225f9a71722ad6134c47e8","summary":[]}`
	storedText := `[{"role":"user","content":"q"},{"id":"rs_a","type":"reasoning","encrypted_content":"E1","summary":[]},{"id":"msg_a","type":"message","role":"assistant","content":[{"type":"output_text","text":"Hello"}]},{"role":"user","content":"q2"},{"id":"rs_b","type":"reasoning","encrypted_content":"E2","summary":[]},{"id":"fc_1","type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"id":"rs_c","type":"reasoning","encrypted_content":"E3","summary":[]},{"id":"fc_2","type":"function_call","call_id":"c2","name":"f","arguments":"{}"}]`
	arr := func(xs ...string) string { return "[" + strings.Join(xs, ",") + "]" }
	tests := []struct {
		name     string
		stored   string
		incoming string
		want     string // "" = unchanged
		restored []adapters.Restored
	}{
		{"dropped reasoning before parallel calls", string(stored), arr(user, sdk1, sdk2, out1, out2),
			arr(user, rs, sdk1, sdk2, out1, out2), []adapters.Restored{{Field: FieldReasoning, MessageIndex: 1}}},
		{"all present is unchanged", string(stored), string(stored), "", nil},
		{"stripped encrypted_content", string(stored), arr(user, stripped, fc1, fc2, out1, out2),
			arr(user, `{"type":"reasoning","id":"rs_0b7f9a603b13ec1501699f02a41b225f9a71722ad6134c47e8","summary":[],"encrypted_content":`+enc+`}`, fc1, fc2, out1, out2),
			[]adapters.Restored{{Field: FieldEncryptedContent, MessageIndex: 1}}},
		{"unknown call is left alone", string(stored), arr(user, `{"type":"function_call","call_id":"other","name":"f","arguments":"{}"}`), "", nil},
		{"assistant message by position and text", storedText,
			`[{"role":"user","content":"q"},{"role":"assistant","content":"Hello"},{"role":"user","content":"q2"}]`,
			`[{"role":"user","content":"q"},{"id":"rs_a","type":"reasoning","encrypted_content":"E1","summary":[]},{"role":"assistant","content":"Hello"},{"role":"user","content":"q2"}]`,
			[]adapters.Restored{{Field: FieldReasoning, MessageIndex: 1}}},
		{"assistant message with other text", storedText,
			`[{"role":"user","content":"q"},{"role":"assistant","content":"Hi"}]`, "", nil},
		{"each call gets its own reasoning", storedText,
			`[{"role":"user","content":"q2"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call","call_id":"c2","name":"f","arguments":"{}"}]`,
			`[{"role":"user","content":"q2"},{"id":"rs_b","type":"reasoning","encrypted_content":"E2","summary":[]},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"id":"rs_c","type":"reasoning","encrypted_content":"E3","summary":[]},{"type":"function_call","call_id":"c2","name":"f","arguments":"{}"}]`,
			[]adapters.Restored{{Field: FieldReasoning, MessageIndex: 1}, {Field: FieldReasoning, MessageIndex: 3}}},
		{"reasoning moved elsewhere is not duplicated", storedText,
			`[{"id":"rs_b","type":"reasoning","encrypted_content":"E2","summary":[]},{"role":"user","content":"q2"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}]`, "", nil},
		{"another reasoning item stands there", storedText,
			`[{"type":"reasoning","id":"rs_x","summary":[]},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}]`, "", nil},
		{"no reasoning stored", `[{"role":"user","content":"q"}]`, arr(user, sdk1), "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, restored, err := respAd.Restore([]byte(tc.incoming), []byte(tc.stored), "gpt-5")
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if want == "" {
				want = tc.incoming
				if string(out) != tc.incoming {
					t.Errorf("changed: %s", out)
				}
			}
			formattest.MustEqualJSON(t, want, out)
			if diff := cmp.Diff(tc.restored, restored); diff != "" {
				t.Errorf("restored (-want +got)\n%s", diff)
			}
			// Idempotent: restoring the result again changes nothing.
			again, r2, _ := respAd.Restore(out, []byte(tc.stored), "gpt-5")
			if !bytes.Equal(again, out) || len(r2) != 0 {
				t.Errorf("second restore changed %v: %s", r2, again)
			}
		})
	}
	if _, _, err := respAd.Restore([]byte(`{}`), stored, ""); err == nil {
		t.Error("object incoming accepted")
	}
	// Bytes outside the edit are kept.
	in := "[ {\"role\": \"user\", \"content\": \"\\u0041\"} ,\n  " + sdk1 + " ]"
	out, _, _ := respAd.Restore([]byte(in), stored, "")
	if !strings.HasPrefix(string(out), "[ {\"role\": \"user\", \"content\": \"\\u0041\"} ,\n  "+rs+",") || !strings.HasSuffix(string(out), sdk1+" ]") {
		t.Errorf("bytes outside the edit changed: %s", out)
	}
}

// respHot are per-event Responses payloads on the hot path.
var respHot = []struct {
	name, added, data string
}{
	{"responses/text",
		`{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}}`,
		`{"type":"response.output_text.delta","sequence_number":5,"item_id":"msg_01830d662ab3856501693c32183a488190a612c410a0a39823","output_index":0,"content_index":0,"delta":" \"final\"","logprobs":[],"obfuscation":"XVAoDXXbkE"}`},
	{"responses/args",
		`{"type":"response.output_item.added","sequence_number":39,"output_index":1,"item":{"id":"fc_1","type":"function_call","status":"in_progress","arguments":"","call_id":"call_1","name":"calculator"}}`,
		`{"type":"response.function_call_arguments.delta","sequence_number":40,"item_id":"fc_01830d662ab3856501693c32151234819091cfca267e98cc5f","output_index":1,"delta":"{\"","obfuscation":"hKtg6o5cWUSdCa"}`},
	{"responses/summary",
		`{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}`,
		`{"type":"response.reasoning_summary_text.delta","sequence_number":4,"item_id":"rs_01830d662ab3856501693c321405c88190be3ab04d5782d5f9","output_index":0,"summary_index":0,"delta":"**Calcul","obfuscation":"2ajSAGID"}`},
}

// TestResponsesFeedNoAllocs guards the per-event hot path: text, argument
// and summary deltas allocate nothing once buffers have grown.
func TestResponsesFeedNoAllocs(t *testing.T) {
	for _, hp := range respHot {
		asm := respAd.NewAssembler()
		added, data := []byte(hp.added), []byte(hp.data)
		_ = asm.Feed(added)
		for range 3000 {
			_ = asm.Feed(data)
		}
		asm.Reset()
		_ = asm.Feed(added)
		if a := testing.AllocsPerRun(1000, func() {
			if err := asm.Feed(data); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("%s: %v allocs per Feed, want 0", hp.name, a)
		}
	}
}

// responsesStream builds a Responses SSE body of n events: n-6 text deltas
// between the events that open and close a message item.
func responsesStream(n int) []byte {
	var b bytes.Buffer
	ev := func(data string) {
		fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", gjson.Get(data, "type").Str, data)
	}
	ev(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","output":[],"usage":null}}`)
	ev(`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}}`)
	ev(`{"type":"response.content_part.added","sequence_number":2,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}}`)
	for range n - 6 {
		ev(respHot[0].data)
	}
	ev(`{"type":"response.output_text.done","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0,"text":"x","logprobs":[]}`)
	ev(`{"type":"response.output_item.done","sequence_number":4,"output_index":0,"item":{"id":"msg_1","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"x"}],"role":"assistant"}}`)
	ev(`{"type":"response.completed","sequence_number":5,"response":{"id":"resp_1","object":"response","status":"completed","output":[{"id":"msg_1","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"x"}],"role":"assistant"}],"usage":{"input_tokens":299,"input_tokens_details":{"cached_tokens":0},"output_tokens":1994,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":2293}}}`)
	return b.Bytes()
}

// BenchmarkAssembleResponses reads and assembles a 2,000-event Responses
// stream (SSE reader + Feed per event + Result) and reports per-event
// figures, like BenchmarkAssemble.
func BenchmarkAssembleResponses(b *testing.B) {
	const n = 2000
	body := responsesStream(n)
	br := bytes.NewReader(body)
	r := sse.NewReader(br, 0)
	asm := respAd.NewAssembler()
	events := 0
	var before, after runtime.MemStats
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	runtime.ReadMemStats(&before)
	for b.Loop() {
		br.Reset(body)
		r.Reset(br)
		asm.Reset()
		for {
			ev, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			if err := asm.Feed(ev.Data); err != nil {
				b.Fatal(err)
			}
			events++
		}
		if t := asm.Result(); !t.Terminal || t.Usage.OutputTokens != 1994 {
			b.Fatal("not terminal")
		}
	}
	runtime.ReadMemStats(&after)
	if events != b.N*n {
		b.Fatalf("%d events for %d loops", events, b.N)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(events), "allocs/event")
}

func FuzzResponsesAssembler(f *testing.F) {
	formattest.FuzzAssembler(f, respAd,
		`{"type":"response.output_item.added","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}`+"\n"+
			`{"type":"response.reasoning_summary_text.delta","output_index":0,"summary_index":1,"delta":"a\"b"}`+"\n"+
			`{"type":"response.output_item.added","output_index":1,"item":{"type":"function_call","call_id":"c","name":"f","arguments":""}}`+"\n"+
			`{"type":"response.function_call_arguments.delta","output_index":1,"delta":"{\"x"}`+"\n"+
			`{"type":"response.output_text.delta","output_index":2,"content_index":1,"delta":"hi"}`+"\n"+
			`{"type":"response.refusal.delta","output_index":2,"content_index":0,"delta":"no"}`+"\n"+
			`{"type":"response.completed","response":{"status":"completed","output":[],"usage":{"input_tokens":1}}}`,
		`{"input":[{"role":"user","content":"q"},{"type":"reasoning","id":"rs_1","summary":[]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"x"}]}`,
		`{"object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[{"type":"message","role":"assistant","content":[]}]}`,
		`{"type":"error","code":"x","message":"y","param":null}`,
	)
}
