package openaichat

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
	"github.com/tidwall/gjson"
)

// walkOpenAIReference is OpenAI chat's WalkMessages with every field
// looked up through gjson.
func walkOpenAIReference(messages []byte, fn func(adapters.Message) bool) error {
	arr := gjson.Parse(rawjson.Str(messages))
	if !arr.IsArray() {
		return fmt.Errorf("walk messages: %w", adapters.ErrNoMessages)
	}
	i := 0
	arr.ForEach(func(_, m gjson.Result) bool {
		f := openAIFieldsOf(m)
		msg := openAIMessage(&f, rawjson.RawSlice(messages, m), i, nil, nil)
		i++
		return fn(msg)
	})
	return nil
}

// checkWalkMessages: WalkMessages reads every message as the gjson
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
	fast, slow := collect(openAIAd.WalkMessages), collect(walkOpenAIReference)
	if strings.Join(fast, "\n") != strings.Join(slow, "\n") {
		t.Fatalf("WalkMessages(%s):\nfast %v\nslow %v", msgs, fast, slow)
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
