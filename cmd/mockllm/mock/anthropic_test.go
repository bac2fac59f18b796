package mock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"
)

// anthStream is an Anthropic SSE body checked for its framing and
// reassembled the way the SDKs do it.
type anthStream struct {
	names      []string
	message    gjson.Result // message_start's message
	content    []map[string]any
	stop       string
	startUsage gjson.Result
	deltaUsage gjson.Result
	errorEvent gjson.Result
}

// parseAnthStream checks that every event is exactly
// "event: <type>\ndata: <compact JSON whose type is <type>>\n\n", that no
// [DONE] or id: line appears and that the body ends after message_stop (or
// an error event), and reassembles the assistant content.
func parseAnthStream(t *testing.T, body []byte) *anthStream {
	t.Helper()
	if !bytes.HasSuffix(body, []byte("\n\n")) {
		t.Fatalf("stream does not end with a blank line: %q", body[max(0, len(body)-40):])
	}
	st := &anthStream{}
	partial := map[int]string{}
	for i, ev := range splitEvents(body, "\n\n") {
		name, rest, ok := bytes.Cut(ev, []byte("\n"))
		typ, ok2 := bytes.CutPrefix(name, []byte("event: "))
		data, ok3 := bytes.CutPrefix(bytes.TrimSuffix(rest, []byte("\n\n")), []byte("data: "))
		if !ok || !ok2 || !ok3 || bytes.ContainsAny(data, "\n\r") {
			t.Fatalf("event %d is not one event: line and one data: line: %q", i, ev)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, data); err != nil || !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("event %d: data is not compact JSON (%v): %s", i, err, data)
		}
		d := gjson.ParseBytes(data)
		if d.Get("type").String() != string(typ) {
			t.Fatalf("event %d: event %q carries type %q", i, typ, d.Get("type").String())
		}
		if st.errorEvent.Exists() || len(st.names) > 0 && st.names[len(st.names)-1] == "message_stop" {
			t.Fatalf("event %d (%s) after the end of the stream", i, typ)
		}
		st.names = append(st.names, string(typ))
		idx := int(d.Get("index").Int())
		switch string(typ) {
		case "message_start":
			st.message = d.Get("message")
			st.startUsage = d.Get("message.usage")
		case "content_block_start":
			if idx != len(st.content) {
				t.Fatalf("block %d starts at position %d", idx, len(st.content))
			}
			var b map[string]any
			_ = json.Unmarshal([]byte(d.Get("content_block").Raw), &b)
			st.content = append(st.content, b)
		case "content_block_delta":
			b := st.content[idx]
			switch dl := d.Get("delta"); dl.Get("type").String() {
			case "text_delta":
				b["text"] = b["text"].(string) + dl.Get("text").String()
			case "thinking_delta":
				b["thinking"] = b["thinking"].(string) + dl.Get("thinking").String()
			case "signature_delta":
				b["signature"] = dl.Get("signature").String()
			case "input_json_delta":
				partial[idx] += dl.Get("partial_json").String()
			default:
				t.Fatalf("unknown delta %s", dl.Raw)
			}
		case "content_block_stop":
			if b := st.content[idx]; b["type"] == "tool_use" {
				var in map[string]any
				if p := partial[idx]; p != "" {
					if err := json.Unmarshal([]byte(p), &in); err != nil {
						t.Fatalf("tool input %q: %v", p, err)
					}
				} else {
					in = map[string]any{}
				}
				b["input"] = in
			}
		case "message_delta":
			st.stop = d.Get("delta.stop_reason").String()
			st.deltaUsage = d.Get("usage")
		case "error":
			st.errorEvent = d
		case "ping", "message_stop":
		default:
			t.Fatalf("unknown event %q", typ)
		}
	}
	if bytes.Contains(body, []byte("[DONE]")) || bytes.Contains(body, []byte("\nid:")) {
		t.Error("stream carries [DONE] or id: lines")
	}
	if last := st.names[len(st.names)-1]; last != "message_stop" && last != "error" {
		t.Errorf("stream ends with %q", last)
	}
	return st
}

func (st *anthStream) types() []string {
	var out []string
	for _, b := range st.content {
		out = append(out, b["type"].(string))
	}
	return out
}

func (st *anthStream) assistant() map[string]any {
	c := make([]any, len(st.content))
	for i, b := range st.content {
		c[i] = b
	}
	return map[string]any{"role": "assistant", "content": c}
}

// toolResults answers every tool_use of the content.
func toolResults(content []map[string]any) map[string]any {
	var rs []any
	for _, b := range content {
		if b["type"] == "tool_use" {
			rs = append(rs, map[string]any{"type": "tool_result", "tool_use_id": b["id"], "content": "ok"})
		}
	}
	return map[string]any{"role": "user", "content": rs}
}

// TestAnthropicFixtureReplay: non-stream bodies are the .json files byte for
// byte, the default scenarios follow the request, and every fixture stream
// has intact event: lines and reassembles to its .expected.json.
func TestAnthropicFixtureReplay(t *testing.T) {
	s := startMock(t)
	plain := []byte(`{"model":"` + anthModelID + `","max_tokens":1024,"messages":[{"role":"user","content":"hi"}]}`)
	for _, name := range []string{"text", "thinking", "parallel-tools", "text.recorded", "thinking.recorded"} {
		t.Run("json/"+name, func(t *testing.T) {
			resp, got := post(t, s, pathAnthropic, plain, "X-Mock-Scenario", name)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("request-id") == "" {
				t.Fatalf("status %d, type %q, request-id %q", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("request-id"))
			}
			if diff := cmp.Diff(string(fx(t, "anthropic/"+name+".json")), string(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	pt, tr := fx(t, "anthropic/request.parallel-tools.json"), fx(t, "anthropic/request.tool-results.json")
	for _, tt := range []struct {
		name string
		body []byte
		want string
	}{
		{"tools and a prompt", pt, "parallel-tools.sse"},
		{"tools, not streamed", edit(t, pt, "stream", false), "parallel-tools.json"},
		{"after tool results, thinking on", tr, "thinking.sse"},
		{"plain prompt", edit(t, plain, "stream", true), "text.sse"},
	} {
		t.Run("default/"+tt.name, func(t *testing.T) {
			resp, got := post(t, s, pathAnthropic, tt.body)
			if resp.StatusCode != 200 || !bytes.Equal(got, fx(t, "anthropic/"+tt.want)) {
				t.Errorf("status %d; body is not %s:\n%s", resp.StatusCode, tt.want, got)
			}
		})
	}
	for _, name := range []string{"text", "thinking", "parallel-tools"} {
		t.Run("assemble/"+name, func(t *testing.T) {
			_, got := post(t, s, pathAnthropic, edit(t, plain, "stream", true), "X-Mock-Scenario", name)
			st := parseAnthStream(t, got)
			var want, have any
			_ = json.Unmarshal(fx(t, "anthropic/"+name+".expected.json"), &want)
			b, _ := json.Marshal(st.assistant())
			_ = json.Unmarshal(b, &have)
			if diff := cmp.Diff(want, have); diff != "" {
				t.Errorf("reassembled message differs from %s.expected.json (-want +got):\n%s", name, diff)
			}
			if st.names[0] != "message_start" || st.names[2] != "ping" {
				t.Errorf("events %v", st.names)
			}
		})
	}
}

// anthTurn1 asks for a synthetic tool call with thinking on.
func anthTurn1(t *testing.T) []byte {
	return fx(t, "anthropic/request.parallel-tools.json")
}

func appendMsgs(t *testing.T, body []byte, msgs ...any) []byte {
	t.Helper()
	for _, m := range msgs {
		body = edit(t, body, "messages.-1", m)
	}
	return body
}

// TestAnthropicSyntheticToolLoop runs a thinking tool loop on the synthetic
// answers: the mock's signatures verify on the way back, and any change to
// the signed blocks is refused as the real API refuses it.
func TestAnthropicSyntheticToolLoop(t *testing.T) {
	s := startMock(t)
	syn := []string{"X-Mock-Scenario", "synthetic"}
	req1 := anthTurn1(t)
	resp, got := post(t, s, pathAnthropic, req1, syn...)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("turn 1: %d %s", resp.StatusCode, got)
	}
	st := parseAnthStream(t, got)
	if diff := cmp.Diff([]string{"thinking", "text", "tool_use"}, st.types()); diff != "" {
		t.Fatalf("turn 1 blocks (-want +got):\n%s", diff)
	}
	if st.stop != "tool_use" || st.message.Get("model").String() != anthModelID || !strings.HasPrefix(st.message.Get("id").String(), "msg_01") {
		t.Errorf("turn 1: stop %q, message %s", st.stop, st.message.Raw)
	}
	th, call := st.content[0], st.content[2]
	if !verifyThinkingSignature(anthModelID, th["signature"].(string), th["thinking"].(string)) || th["thinking"] == "" {
		t.Errorf("the emitted signature does not verify: %v", th)
	}
	if diff := cmp.Diff(map[string]any{"city": "mock"}, call["input"]); diff != "" || !strings.HasPrefix(call["id"].(string), "toolu_01") || call["name"] != "get_weather" {
		t.Errorf("tool call %v", call)
	}
	if st.startUsage.Get("output_tokens").Int() != 1 || st.deltaUsage.Get("output_tokens").Int() <= 1 ||
		st.startUsage.Get("input_tokens").Int() != st.deltaUsage.Get("input_tokens").Int() {
		t.Errorf("usage: start %s, delta %s", st.startUsage.Raw, st.deltaUsage.Raw)
	}

	turn2 := appendMsgs(t, req1, st.assistant(), toolResults(st.content))
	resp, got = post(t, s, pathAnthropic, turn2, syn...)
	if resp.StatusCode != 200 {
		t.Fatalf("turn 2: %d %s", resp.StatusCode, got)
	}
	st2 := parseAnthStream(t, got)
	if diff := cmp.Diff([]string{"text"}, st2.types()); diff != "" || st2.stop != "end_turn" {
		t.Errorf("turn 2 without interleaved thinking: blocks %v stop %q", st2.types(), st2.stop)
	}
	_, got = post(t, s, pathAnthropic, turn2, "X-Mock-Scenario", "synthetic", "anthropic-beta", "interleaved-thinking-2025-05-14")
	if types := parseAnthStream(t, got).types(); len(types) != 2 || types[0] != "thinking" {
		t.Errorf("turn 2 with interleaved thinking: %v", types)
	}
	// Turn 3: a new prompt after the answer; the old thinking still verifies.
	turn3 := appendMsgs(t, turn2, st2.assistant(), map[string]any{"role": "user", "content": "and Rome?"})
	resp, got = post(t, s, pathAnthropic, turn3, syn...)
	if resp.StatusCode != 200 {
		t.Fatalf("turn 3: %d %s", resp.StatusCode, got)
	}
	if id := parseAnthStream(t, got).content[2]["id"]; id == call["id"] {
		t.Error("turn 3 reused the tool_use id of turn 1")
	}

	sig := th["signature"].(string)
	tampered := sig[:20] + string(rune(sig[20]^1)) + sig[21:]
	for _, tt := range []struct {
		name, rule string
		body       []byte
		wantBody   []byte
		wantMsg    string
	}{
		{name: "tampered signature", rule: "anthropic-invalid-thinking-signature", body: edit(t, turn2, "messages.1.content.0.signature", tampered),
			wantBody: fx(t, "anthropic/error.invalid-thinking-signature.json")},
		{name: "edited thinking", rule: "anthropic-invalid-thinking-signature", body: edit(t, turn2, "messages.1.content.0.thinking", "I changed my mind."),
			wantBody: fx(t, "anthropic/error.invalid-thinking-signature.json")},
		{name: "another model", rule: "anthropic-invalid-thinking-signature", body: edit(t, turn2, "model", "claude-opus-4-5-20251101"),
			wantBody: fx(t, "anthropic/error.invalid-thinking-signature.json")},
		{name: "thinking dropped", rule: "anthropic-thinking-required", body: edit(t, turn2, "messages.1.content.0", nil),
			wantMsg: "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`."},
		{name: "thinking emptied", rule: "anthropic-invalid-thinking-signature", body: edit(t, turn2, "messages.1.content.0.thinking", ""),
			wantBody: fx(t, "anthropic/error.invalid-thinking-signature.json")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, s, pathAnthropic, tt.body, syn...)
			if resp.StatusCode != 400 || resp.Header.Get("X-Mock-Rule") != tt.rule {
				t.Fatalf("status %d rule %q: %s", resp.StatusCode, resp.Header.Get("X-Mock-Rule"), body)
			}
			if tt.wantBody != nil && !bytes.Equal(body, tt.wantBody) {
				t.Errorf("body is not the fixture:\n%s", body)
			}
			if !strings.HasPrefix(anthMsgText(body), tt.wantMsg) {
				t.Errorf("message %q", anthMsgText(body))
			}
		})
	}

	// Non-stream: the same answer as one JSON body, which round-trips too.
	resp, got = post(t, s, pathAnthropic, edit(t, req1, "stream", false), syn...)
	msg := gjson.ParseBytes(got)
	if resp.StatusCode != 200 || msg.Get("content.#").Int() != 3 || msg.Get("stop_reason").String() != "tool_use" ||
		msg.Get("usage.cache_creation.ephemeral_5m_input_tokens").Type != gjson.Number || msg.Get("usage.service_tier").String() != "standard" {
		t.Fatalf("non-stream: %d %s", resp.StatusCode, got)
	}
	var content []map[string]any
	_ = json.Unmarshal([]byte(msg.Get("content").Raw), &content)
	var asst map[string]any
	_ = json.Unmarshal([]byte(`{"role":"assistant","content":`+msg.Get("content").Raw+`}`), &asst)
	if resp, body := post(t, s, pathAnthropic, appendMsgs(t, edit(t, req1, "stream", false), asst, toolResults(content)), syn...); resp.StatusCode != 200 {
		t.Errorf("non-stream round trip: %d %s", resp.StatusCode, body)
	}
}

// TestAnthropicSyntheticShapes: the synthetic answer follows the request.
func TestAnthropicSyntheticShapes(t *testing.T) {
	s := startMock(t)
	req1 := anthTurn1(t)
	noThink := edit(t, req1, "thinking", nil)
	tests := []struct {
		name      string
		body      []byte
		header    []string
		wantTypes []string
		wantStop  string
		check     func(t *testing.T, st *anthStream)
	}{
		{name: "parallel tool calls", body: req1, header: []string{"X-Mock-Tool-Calls", "3"},
			wantTypes: []string{"thinking", "text", "tool_use", "tool_use", "tool_use"}, wantStop: "tool_use",
			check: func(t *testing.T, st *anthStream) {
				ids := map[any]bool{st.content[2]["id"]: true, st.content[3]["id"]: true, st.content[4]["id"]: true}
				if len(ids) != 3 {
					t.Errorf("tool_use ids not distinct: %v", ids)
				}
				// Two of three answered: the API's 400.
				rs := toolResults(st.content)
				rs["content"] = rs["content"].([]any)[:2]
				resp, body := post(t, s, pathAnthropic, appendMsgs(t, req1, st.assistant(), rs), "X-Mock-Scenario", "synthetic")
				if want := "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: " + st.content[4]["id"].(string) + "."; resp.StatusCode != 400 || !strings.HasPrefix(anthMsgText(body), want) {
					t.Errorf("%d %s", resp.StatusCode, body)
				}
			}},
		{name: "disable_parallel_tool_use", body: edit(t, noThink, "tool_choice", map[string]any{"type": "auto", "disable_parallel_tool_use": true}),
			header: []string{"X-Mock-Tool-Calls", "3"}, wantTypes: []string{"text", "tool_use"}, wantStop: "tool_use"},
		{name: "tool_choice none", body: edit(t, noThink, "tool_choice", map[string]any{"type": "none"}), wantTypes: []string{"text"}, wantStop: "end_turn"},
		{name: "forced tool, no text", body: edit(t, noThink, "tool_choice", map[string]any{"type": "tool", "name": "get_weather"}),
			header: []string{"X-Mock-Chunks", "0"}, wantTypes: []string{"tool_use"}, wantStop: "tool_use"},
		{name: "chunks", body: edit(t, noThink, "tools", nil), header: []string{"X-Mock-Chunks", "5"}, wantTypes: []string{"text"}, wantStop: "end_turn",
			check: func(t *testing.T, st *anthStream) {
				if st.content[0]["text"] != strings.Repeat(synthToken, 5) {
					t.Errorf("text %q", st.content[0]["text"])
				}
			}},
		{name: "schema-built input", body: edit(t, noThink, "tools.0.input_schema", map[string]any{"type": "object",
			"properties": map[string]any{"unit": map[string]any{"type": "string", "enum": []any{"c", "f"}}, "days": map[string]any{"type": "integer"}, "city": map[string]any{"type": "string"}},
			"required":   []any{"city", "unit", "days"}}),
			wantTypes: []string{"text", "tool_use"}, wantStop: "tool_use",
			check: func(t *testing.T, st *anthStream) {
				if diff := cmp.Diff(map[string]any{"city": "mock", "unit": "c", "days": float64(1)}, st.content[1]["input"]); diff != "" {
					t.Errorf("input (-want +got):\n%s", diff)
				}
			}},
		{name: "display omitted", body: edit(t, req1, "thinking.display", "omitted"), wantTypes: []string{"thinking", "text", "tool_use"}, wantStop: "tool_use",
			check: func(t *testing.T, st *anthStream) {
				if st.content[0]["thinking"] != "" || st.content[0]["signature"] == "" {
					t.Fatalf("omitted block %v", st.content[0])
				}
				turn2 := appendMsgs(t, edit(t, req1, "thinking.display", "omitted"), st.assistant(), toolResults(st.content))
				if resp, body := post(t, s, pathAnthropic, turn2, "X-Mock-Scenario", "synthetic"); resp.StatusCode != 200 {
					t.Errorf("empty signed block refused: %s", body)
				}
				if resp, _ := post(t, s, pathAnthropic, edit(t, turn2, "messages.1.content.0.thinking", "filled in"), "X-Mock-Scenario", "synthetic"); resp.StatusCode != 400 {
					t.Errorf("filled-in omitted block accepted: %d", resp.StatusCode)
				}
			}},
		{name: "redacted thinking", body: edit(t, req1, "messages.0.content", "weather? "+anthropicRedactedTrigger),
			wantTypes: []string{"redacted_thinking", "thinking", "text", "tool_use"}, wantStop: "tool_use",
			check: func(t *testing.T, st *anthStream) {
				turn2 := appendMsgs(t, edit(t, req1, "messages.0.content", "weather? "+anthropicRedactedTrigger), st.assistant(), toolResults(st.content))
				if resp, body := post(t, s, pathAnthropic, turn2, "X-Mock-Scenario", "synthetic"); resp.StatusCode != 200 {
					t.Errorf("round trip: %s", body)
				}
				resp, body := post(t, s, pathAnthropic, edit(t, turn2, "messages.1.content.0", nil), "X-Mock-Scenario", "synthetic")
				if resp.StatusCode != 400 || resp.Header.Get("X-Mock-Rule") != "anthropic-thinking-modified" ||
					anthMsgText(body) != "messages.1.content.0: `thinking` or `redacted_thinking` blocks in the latest assistant message cannot be modified. These blocks must remain as they were in the original response." {
					t.Errorf("dropped redacted block: %d %s", resp.StatusCode, body)
				}
				resp, _ = post(t, s, pathAnthropic, edit(t, turn2, "messages.1.content.0.data", st.content[1]["signature"]), "X-Mock-Scenario", "synthetic")
				if resp.StatusCode != 400 || resp.Header.Get("X-Mock-Rule") != "anthropic-invalid-thinking-signature" {
					t.Errorf("a thinking signature passed as redacted data: %d", resp.StatusCode)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, got := post(t, s, pathAnthropic, tt.body, append([]string{"X-Mock-Scenario", "synthetic"}, tt.header...)...)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, got)
			}
			st := parseAnthStream(t, got)
			if diff := cmp.Diff(tt.wantTypes, st.types()); diff != "" || st.stop != tt.wantStop {
				t.Fatalf("blocks (-want +got):\n%s\nstop %q", diff, st.stop)
			}
			if tt.check != nil {
				tt.check(t, st)
			}
		})
	}
}

// anthUsage is the usage of a non-stream synthetic answer.
func anthUsage(t *testing.T, s *Server, body []byte, h ...string) gjson.Result {
	t.Helper()
	resp, got := post(t, s, pathAnthropic, edit(t, body, "stream", false), append([]string{"X-Mock-Scenario", "synthetic"}, h...)...)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	return gjson.GetBytes(got, "usage")
}

func TestAnthropicPromptCache(t *testing.T) {
	s := startMock(t)
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	s.anth.mu.Lock()
	s.anth.now = func() time.Time { return time.Unix(0, clock.Load()) }
	s.anth.mu.Unlock()

	long := strings.Repeat("You are a careful assistant. ", 200) // ~1450 tokens
	body := func(ttl string, msgs ...any) []byte {
		cc := map[string]any{"type": "ephemeral"}
		if ttl != "" {
			cc["ttl"] = ttl
		}
		b := []byte(`{"model":"` + anthModelID + `","max_tokens":1024,"messages":[]}`)
		b = edit(t, b, "system", []any{map[string]any{"type": "text", "text": long, "cache_control": cc}})
		return appendMsgs(t, b, msgs...)
	}
	hi := map[string]any{"role": "user", "content": "hi"}
	type usage struct{ in, create, read, c5m, c1h int64 }
	get := func(g gjson.Result) usage {
		return usage{g.Get("input_tokens").Int(), g.Get("cache_creation_input_tokens").Int(), g.Get("cache_read_input_tokens").Int(),
			g.Get("cache_creation.ephemeral_5m_input_tokens").Int(), g.Get("cache_creation.ephemeral_1h_input_tokens").Int()}
	}

	first := get(anthUsage(t, s, body("", hi)))
	if first.create < defaultCacheMinTokens || first.read != 0 || first.c5m != first.create || first.in == 0 {
		t.Fatalf("first request: %+v", first)
	}
	again := get(anthUsage(t, s, body("", hi)))
	if again.read != first.create || again.create != 0 || again.in != first.in {
		t.Errorf("same prefix again: %+v (first %+v)", again, first)
	}
	// The conversation grows with a moving breakpoint on the last user block.
	grown := body("", hi, map[string]any{"role": "assistant", "content": "hello"},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "more", "cache_control": map[string]any{"type": "ephemeral"}}}})
	g := get(anthUsage(t, s, grown))
	if g.read != first.create || g.create == 0 {
		t.Errorf("grown conversation: %+v", g)
	}
	if g2 := get(anthUsage(t, s, grown)); g2.read != g.read+g.create || g2.create != 0 {
		t.Errorf("grown conversation again: %+v", g2)
	}
	// Whitespace in the JSON does not matter; a changed system prompt does.
	if w := get(anthUsage(t, s, bytes.ReplaceAll(body("", hi), []byte(`":`), []byte(`": `)))); w.read != first.create {
		t.Errorf("re-indented body missed: %+v", w)
	}
	if c := get(anthUsage(t, s, edit(t, body("", hi), "system.0.text", long+"!"))); c.read != 0 || c.create == 0 {
		t.Errorf("changed system prompt: %+v", c)
	}
	if m := get(anthUsage(t, s, edit(t, body("", hi), "model", "claude-opus-4-5-20251101"))); m.read != 0 {
		t.Errorf("another model read the cache: %+v", m)
	}

	// TTLs: 5m entries expire, 1h entries survive, reads refresh.
	clock.Add(int64(6 * time.Minute))
	if e := get(anthUsage(t, s, body("", hi))); e.read != 0 || e.create != first.create {
		t.Errorf("after 6 minutes: %+v", e)
	}
	hour := edit(t, body("1h", hi), "system.0.text", "Hourly. "+long)
	h1 := get(anthUsage(t, s, hour))
	if h1.c1h == 0 || h1.c5m != 0 {
		t.Errorf("1h write: %+v", h1)
	}
	clock.Add(int64(30 * time.Minute))
	if r := get(anthUsage(t, s, hour)); r.read == 0 {
		t.Errorf("1h entry gone after 30 minutes: %+v", r)
	}

	// Short prefixes are not cached unless X-Mock-Cache-Min-Tokens allows it.
	short := []byte(`{"model":"` + anthModelID + `","max_tokens":1024,"cache_control":{"type":"ephemeral"},"messages":[{"role":"user","content":"hi"}]}`)
	if sh := get(anthUsage(t, s, short)); sh.create != 0 || sh.read != 0 {
		t.Errorf("short prompt cached: %+v", sh)
	}
	get(anthUsage(t, s, short, "X-Mock-Cache-Min-Tokens", "0"))
	if sh := get(anthUsage(t, s, short, "X-Mock-Cache-Min-Tokens", "0")); sh.read == 0 || sh.in != 0 {
		t.Errorf("automatic breakpoint: %+v", sh)
	}

	// The stream reports the same numbers in message_start and message_delta
	// (the first request writes again: the 5m entry expired meanwhile).
	post(t, s, pathAnthropic, edit(t, body("", hi), "stream", true), "X-Mock-Scenario", "synthetic")
	_, got := post(t, s, pathAnthropic, edit(t, body("", hi), "stream", true), "X-Mock-Scenario", "synthetic")
	st := parseAnthStream(t, got)
	for _, k := range []string{"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"} {
		if a, b := st.startUsage.Get(k).Int(), st.deltaUsage.Get(k).Int(); a != b {
			t.Errorf("%s: start %d, delta %d", k, a, b)
		}
	}
	if st.startUsage.Get("cache_read_input_tokens").Int() == 0 {
		t.Error("stream did not read the cache")
	}

	s.Reset()
	if r := get(anthUsage(t, s, body("", hi))); r.read != 0 {
		t.Errorf("Reset kept the cache: %+v", r)
	}
}

func TestAnthropicEndpoints(t *testing.T) {
	s := startMock(t)
	tr := fx(t, "anthropic/request.tool-results.json")
	resp, got := post(t, s, pathAnthropicCount, edit(t, tr, "max_tokens", nil, "stream", nil))
	n := gjson.GetBytes(got, "input_tokens").Int()
	if resp.StatusCode != 200 || n <= 0 || !bytes.Equal(got, []byte(`{"input_tokens":`+gjson.GetBytes(got, "input_tokens").Raw+`}`)) {
		t.Fatalf("count_tokens: %d %s", resp.StatusCode, got)
	}
	if u := anthUsage(t, s, tr); u.Get("input_tokens").Int() != n {
		t.Errorf("count_tokens %d, synthetic input_tokens %s", n, u.Raw)
	}

	resp, got = get(t, s, "/v1/models")
	ids := gjson.GetBytes(got, "data.#.id").Array()
	if resp.StatusCode != 200 || len(ids) != len(anthropicModelList) || gjson.GetBytes(got, "has_more").Bool() ||
		gjson.GetBytes(got, "data.0.type").String() != "model" || gjson.GetBytes(got, "first_id").String() != ids[0].String() {
		t.Fatalf("models: %d %s", resp.StatusCode, got)
	}
	_, page := get(t, s, "/v1/models?limit=2")
	if gjson.GetBytes(page, "data.#").Int() != 2 || !gjson.GetBytes(page, "has_more").Bool() || gjson.GetBytes(page, "last_id").String() != ids[1].String() {
		t.Errorf("page 1: %s", page)
	}
	_, page = get(t, s, "/v1/models?limit=2&after_id="+ids[1].String())
	if gjson.GetBytes(page, "data.0.id").String() != ids[2].String() || gjson.GetBytes(page, "has_more").Bool() {
		t.Errorf("page 2: %s", page)
	}
	_, page = get(t, s, "/v1/models?limit=1&before_id="+ids[2].String())
	if gjson.GetBytes(page, "data.0.id").String() != ids[1].String() || !gjson.GetBytes(page, "has_more").Bool() {
		t.Errorf("before_id: %s", page)
	}
	resp, got = get(t, s, "/v1/models/"+anthModelID)
	if resp.StatusCode != 200 || gjson.GetBytes(got, "id").String() != anthModelID || gjson.GetBytes(got, "display_name").String() != "Claude Sonnet 4.5" {
		t.Errorf("model: %d %s", resp.StatusCode, got)
	}
	resp, got = get(t, s, "/v1/models/claude-nope")
	if resp.StatusCode != 404 || gjson.GetBytes(got, "error.type").String() != "not_found_error" || anthMsgText(got) != "model: claude-nope" {
		t.Errorf("unknown model: %d %s", resp.StatusCode, got)
	}
	if resp, _ := post(t, s, "/v1/models", nil); resp.StatusCode != 405 {
		t.Errorf("POST /v1/models: %d", resp.StatusCode)
	}
	if resp, _ := get(t, s, pathAnthropic); resp.StatusCode != 405 {
		t.Errorf("GET /v1/messages: %d", resp.StatusCode)
	}
	// Claude Code's ?beta=true is the same endpoint.
	if resp, body := post(t, s, pathAnthropic+"?beta=true", tr); resp.StatusCode != 200 || !bytes.Equal(body, fx(t, "anthropic/thinking.sse")) {
		t.Errorf("?beta=true: %d", resp.StatusCode)
	}
	// Gemini's /v1/models/{model}:generateContent is still Gemini.
	if resp, _ := post(t, s, "/v1/models/gemini-2.5-flash:generateContent", []byte(`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`)); resp.StatusCode != 200 {
		t.Errorf("gemini path: %d", resp.StatusCode)
	}
}

func TestAnthropicKnobs(t *testing.T) {
	s := startMock(t)
	plain := []byte(`{"model":"` + anthModelID + `","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	events := splitEvents(fx(t, "anthropic/text.sse"), "\n\n")

	resp, got := post(t, s, pathAnthropic, plain, "X-Mock-Stream-Error", "3")
	want := bytes.Join(events[:3], nil)
	if resp.StatusCode != 200 || !bytes.HasPrefix(got, want) {
		t.Fatalf("stream error: %d %s", resp.StatusCode, got)
	}
	st := parseAnthStream(t, got)
	if e := st.errorEvent; e.Get("error.type").String() != "overloaded_error" || e.Get("error.message").String() != "Overloaded" ||
		e.Get("error.details").Type != gjson.Null || e.Get("request_id").String() != resp.Header.Get("request-id") || len(st.names) != 4 {
		t.Errorf("error event %s (events %v)", e.Raw, st.names)
	}
	_, got = post(t, s, pathAnthropic, plain, "X-Mock-Stream-Error", "0", "X-Mock-Scenario", "synthetic", "X-Mock-Error-Body", "overloaded")
	if want := "event: error\ndata: " + `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CBbsvAnvsjKXw8K0OpLiF"}` + "\n\n"; string(got) != want {
		t.Errorf("error at once: %q", got)
	}
	for _, h := range [][]string{
		{"X-Mock-Stream-Error", "1", "X-Mock-Error-Body", "nope"},
		{"X-Mock-Tool-Calls", "many"},
	} {
		if resp, body := post(t, s, pathAnthropic, plain, h...); resp.StatusCode != 400 || !bytes.Contains(body, []byte("mock_error")) {
			t.Errorf("%v: %d %s", h, resp.StatusCode, body)
		}
	}
	if resp, body := post(t, s, pathAnthropic, edit(t, plain, "stream", false), "X-Mock-Stream-Error", "1"); resp.StatusCode != 400 || !bytes.Contains(body, []byte("mock_error")) {
		t.Errorf("stream error on a non-stream request: %d %s", resp.StatusCode, body)
	}

	resp, got = post(t, s, pathAnthropic, plain, "X-Mock-Status", "529", "X-Mock-Retry-After", "3")
	if resp.StatusCode != 529 || !bytes.Equal(got, fx(t, "anthropic/error.overloaded.json")) ||
		resp.Header.Get("request-id") != "req_011CBbsvAnvsjKXw8K0OpLiF" || resp.Header.Get("Retry-After") != "3" {
		t.Errorf("529: %d %v %s", resp.StatusCode, resp.Header, got)
	}
	for status, typ := range map[int]string{429: "rate_limit_error", 500: "api_error", 401: "authentication_error", 413: "request_too_large", 403: "permission_error"} {
		resp, got := post(t, s, pathAnthropic, plain, "X-Mock-Status", strconv.Itoa(status))
		if resp.StatusCode != status || gjson.GetBytes(got, "error.type").String() != typ || gjson.GetBytes(got, "type").String() != "error" {
			t.Errorf("%d: %d %s", status, resp.StatusCode, got)
		}
	}
	resp, got = get(t, s, "/v1/models", "X-Mock-Status", "500")
	if resp.StatusCode != 500 || gjson.GetBytes(got, "error.type").String() != "api_error" {
		t.Errorf("models 500: %d %s", resp.StatusCode, got)
	}

	// Cut after two events: the fixture's first two, then a broken connection.
	r, err := http.DefaultClient.Do(newReq(t, context.Background(), s, pathAnthropic, plain, hdr{"X-Mock-Cut-After", "2"}))
	if err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(r.Body)
	r.Body.Close()
	if err == nil || errors.Is(err, io.EOF) || !bytes.Equal(got, bytes.Join(events[:2], nil)) {
		t.Errorf("cut: err %v, got %q", err, got)
	}
}
