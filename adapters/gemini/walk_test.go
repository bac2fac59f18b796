package gemini

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
	"github.com/tidwall/gjson"
)

// walkGeminiReference is Gemini's WalkMessages as gjson reads it (the
// walk before session 11), the reference the raw walk is checked against.
func walkGeminiReference(messages []byte, fn func(adapters.Message) bool) error {
	arr := gjson.Parse(rawjson.Str(messages))
	if !arr.IsArray() {
		return fmt.Errorf("walk contents: %w", adapters.ErrNoMessages)
	}
	var calls []adapters.ToolCall
	var results []adapters.ToolResult
	i := 0
	arr.ForEach(func(_, m gjson.Result) bool {
		calls, results = calls[:0], results[:0]
		empty := true
		m.Get("parts").ForEach(func(_, p gjson.Result) bool {
			if fc := p.Get("functionCall"); fc.IsObject() {
				calls = append(calls, adapters.ToolCall{ID: fc.Get("id").String(), Name: fc.Get("name").String()})
			}
			if fr := p.Get("functionResponse"); fr.IsObject() {
				results = append(results, adapters.ToolResult{CallID: fr.Get("id").String(), Name: fr.Get("name").String()})
			}
			if t := p.Get("text"); t.Type == gjson.String && t.Raw != `""` && !p.Get("thought").Bool() {
				empty = false
			}
			return true
		})
		msg := adapters.Message{Index: i, Raw: rawjson.RawSlice(messages, m), Role: rawjson.Role(m.Get("role")),
			Calls: calls, Results: results, EmptyText: empty}
		i++
		return fn(msg)
	})
	return nil
}

// checkWalkMessages: WalkMessages reads every content as the gjson
// reference does.
func checkWalkMessages(t *testing.T, body []byte) {
	t.Helper()
	if !gjson.ValidBytes(body) {
		return
	}
	msgs, _, ok := adapters.KnownArray(body, "messages", nil)
	if !ok {
		return
	}
	collect := func(walk func([]byte, func(adapters.Message) bool) error) (out []string) {
		_ = walk(msgs, func(m adapters.Message) bool {
			out = append(out, fmt.Sprintf("%d %q %q %v %v %v", m.Index, m.Raw, m.Role, m.Calls, m.Results, m.EmptyText))
			return true
		})
		return out
	}
	fast, slow := collect(geminiAd.WalkMessages), collect(walkGeminiReference)
	if strings.Join(fast, "\n") != strings.Join(slow, "\n") {
		t.Fatalf("Gemini WalkMessages(%s):\nfast %v\nslow %v", msgs, fast, slow)
	}
}

// walkBodies are messages arrays in every format's shape, with escapes,
// duplicates and values of the wrong type.
var walkBodies = []string{
	`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b \"]\" \\"}],"stream":false}`,
	`{"a":{"messages":[1]},"messages":[ {"x":[1,{"y":"]"}]} , "s", 3, true, null ],"b":[1,2]}`,
	`{"messages":[],"messages":[1]}`,
	`{"n":-1.5e3,"t":true,"messages":[{"k":"v"}]}`,
	`{"m\u0065ssages":[1],"messages":[2]}`,
	`{"messages":"text"}`,
	`[1,2]`,
	`{"messages":[{"type":"message","role":"user","content":"hi"},{"role":"assistant","content":[{"type":"output_text","text":""},{"type":"refusal","refusal":"no"}]},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"},{"type":"reasoning","summary":[]},{"type":"custom_tool_call","call_id":7},{"type":"x\u0079"},{"content":[{"type":"input_image"},"s",{"text":""}],"role":"user"},{"type":1}]}`,
	`{"messages":[{"role":"user","parts":[{"text":"hi"}]},{"role":"model","parts":[{"text":"","thought":true},{"text":"t","thought":"true"},{"functionCall":{"id":"c1","name":"f","args":{}}},{"functionCall":{"name":"g"}}]},{"role":"user","parts":{"a":{"functionResponse":{"id":"c1","name":"f","response":{}}}}},{"r\u006fle":"model","parts":[{"text":"x","thought":0},{"text":"\"q\""},"s",null]},{"parts":null},{"parts":[{"functionCall":"no"},{"functionResponse":{"name":1}}]}]}`,
}

func TestWalkMessagesReference(t *testing.T) {
	for _, b := range walkBodies {
		checkWalkMessages(t, []byte(b))
	}
}

func FuzzWalkMessages(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`))
	f.Add([]byte(`{"messages":[{"x":"\\\""},"s\\\\",[[]]],"z":{"messages":1}}`))
	f.Add([]byte(`{"messages":[{"role":"tool","tool_call_id":"c1","content":""},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","function":{"name":"f"}}]},{"role":"function","name":"g","content":[{"type":"text","text":""}]},1,{"r\u006fle":"user","role":"system","role":"user"}]}`))
	for _, b := range walkBodies[7:] {
		f.Add([]byte(b))
	}
	f.Fuzz(checkWalkMessages)
}

func TestMessageText(t *testing.T) {
	const msg = `{"role":"model","parts":[{"text":"think","thought":true},{"text":"Hi"},{"text":" you"}]}`
	if got := geminiAd.MessageText([]byte(msg)); got != "Hi you" {
		t.Errorf("MessageText(%s) = %q, want %q", msg, got, "Hi you")
	}
}
