package responses

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/internal/formattest"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
	"github.com/tidwall/gjson"
)

// walkResponsesReference is Responses' WalkMessages as gjson reads it.
func walkResponsesReference(messages []byte, fn func(adapters.Message) bool) error {
	arr := gjson.Parse(rawjson.Str(messages))
	if !arr.IsArray() {
		return fmt.Errorf("walk input: %w", adapters.ErrNoMessages)
	}
	var calls []adapters.ToolCall
	var results []adapters.ToolResult
	i := 0
	arr.ForEach(func(_, it gjson.Result) bool {
		calls, results = calls[:0], results[:0]
		typ, kind := respItemTypeReference(it)
		msg := adapters.Message{Index: i, Raw: rawjson.RawSlice(messages, it), Role: typ, EmptyText: true}
		switch kind {
		case kindMessage:
			msg.Role = rawjson.Role(it.Get("role"))
			msg.EmptyText = responsesEmptyTextReference(it.Get("content"))
		case kindCall:
			calls = append(calls, adapters.ToolCall{ID: it.Get("call_id").String(), Name: it.Get("name").String()})
		case kindResult:
			results = append(results, adapters.ToolResult{CallID: it.Get("call_id").String()})
		}
		msg.Calls, msg.Results = calls, results
		i++
		return fn(msg)
	})
	return nil
}

// responsesEmptyTextReference reports whether a message content holds no non-empty
// text: null, "", absent, or parts none of which has a non-empty text or
// refusal (input_image/input_file parts count as non-empty).
func responsesEmptyTextReference(c gjson.Result) bool {
	switch {
	case c.Type == gjson.String:
		return c.Raw == `""`
	case c.IsArray():
		empty := true
		c.ForEach(func(_, p gjson.Result) bool {
			switch p.Get("type").String() {
			case "output_text", "input_text", "text", "", "refusal":
				if p.Get("text").String() != "" || p.Get("refusal").String() != "" {
					empty = false
				}
			default:
				empty = false
			}
			return empty
		})
		return empty
	}
	return true
}

// respItemTypeReference is respItemType through gjson.
func respItemTypeReference(it gjson.Result) (string, itemKind) {
	t := it.Get("type")
	switch t.Raw {
	case `"message"`:
		return "message", kindMessage
	case `"function_call"`:
		return "function_call", kindCall
	case `"custom_tool_call"`:
		return "custom_tool_call", kindCall
	case `"function_call_output"`:
		return "function_call_output", kindResult
	case `"custom_tool_call_output"`:
		return "custom_tool_call_output", kindResult
	case `"reasoning"`:
		return "reasoning", kindReasoning
	case "":
		if it.Get("role").Exists() {
			return "message", kindMessage
		}
		return "", kindOther
	}
	return t.String(), kindOther
}

// checkWalkMessages: WalkMessages reads every item as the gjson reference
// does.
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
	fast, slow := collect(respAd.WalkMessages), collect(walkResponsesReference)
	if strings.Join(fast, "\n") != strings.Join(slow, "\n") {
		t.Fatalf("Responses WalkMessages(%s):\nfast %v\nslow %v", msgs, fast, slow)
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
	const msg = `[{"type":"reasoning","summary":[]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Yes."}]}]`
	if got := respAd.MessageText([]byte(msg)); got != "Yes." {
		t.Errorf("MessageText(%s) = %q, want %q", msg, got, "Yes.")
	}
}

// BenchmarkParseResponse reads a real non-stream answer.
func BenchmarkParseResponse(b *testing.B) {
	body := formattest.Fixture(b, "openai-responses/text.json")
	b.Run("openai-responses/text.json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := respAd.ParseResponse(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
