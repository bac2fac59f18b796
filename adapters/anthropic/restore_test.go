package anthropic

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/adapters"
)

const (
	storedThinking = `{"type":"thinking","thinking":"Plan the call.","signature":"U0lH"}`
	storedRedacted = `{"type":"redacted_thinking","data":"UkVE"}`
	callA          = `{"type":"tool_use","id":"toolu_A","name":"get_weather","input":{"city":"Paris"}}`
	resultA        = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_A","content":"sunny"}]}`
	prompt         = `{"role":"user","content":"weather?"}`
)

// TestRestore: the thinking blocks a client dropped, emptied or altered
// come back byte for byte from the stored turn; blocks sent as stored, a
// final (prefill) message and string content are left alone.
func TestRestore(t *testing.T) {
	stored := `[` + prompt + `,{"role":"assistant","content":[` + storedThinking + `,` + callA + `]},` + resultA +
		`,{"role":"assistant","content":[` + storedRedacted + `,{"type":"text","text":"Sunny."}]}]`
	for _, c := range []struct {
		name, assistant string
		last            bool // the assistant message is the last one sent
		want            string
		field           string
	}{
		{"dropped", `[` + callA + `]`, false, `[` + storedThinking + `,` + callA + `]`, FieldThinking},
		{"emptied", `[{"type":"thinking","thinking":"","signature":"U0lH"},` + callA + `]`, false, `[` + storedThinking + `,` + callA + `]`, FieldThinking},
		{"signature lost", `[{"type":"thinking","thinking":"Plan the call.","signature":""},` + callA + `]`, false, `[` + storedThinking + `,` + callA + `]`, FieldThinking},
		{"text changed", `[{"type":"thinking","thinking":"Plan the call!","signature":"U0lH"},` + callA + `]`, false, `[` + storedThinking + `,` + callA + `]`, FieldThinking},
		{"re-encoded, same values", `[{"signature":"U0lH","thinking":"Plan the call.","type":"thinking"},` + callA + `]`, false, "", ""},
		{"as stored", `[` + storedThinking + `,` + callA + `]`, false, "", ""},
		{"prefill", `[` + callA + `]`, true, "", ""},
		{"no match", `[{"type":"tool_use","id":"toolu_Z","name":"f","input":{}}]`, false, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := `[` + prompt + `,{"role":"assistant","content":` + c.assistant + `}`
			if !c.last {
				in += `,` + resultA
			}
			in += `]`
			out, restored, err := ad.Restore([]byte(in), []byte(stored), "claude-sonnet-4-5")
			if err != nil {
				t.Fatal(err)
			}
			if c.want == "" {
				if string(out) != in || restored != nil {
					t.Fatalf("changed: %s (%v)", out, restored)
				}
				return
			}
			if got := gjson.GetBytes(out, "1.content").Raw; got != c.want {
				t.Fatalf("content %s\nwant    %s", got, c.want)
			}
			if len(restored) != 1 || restored[0] != (adapters.Restored{Field: c.field, MessageIndex: 1}) {
				t.Fatalf("restored %v", restored)
			}
			// The other messages keep their bytes.
			if !strings.HasPrefix(string(out), `[`+prompt+`,`) || !strings.HasSuffix(string(out), resultA+`]`) {
				t.Fatalf("other messages changed: %s", out)
			}
		})
	}
	// Matched by position and text where there is no tool_use: the
	// redacted block comes back before the text.
	in := `[` + prompt + `,{"role":"assistant","content":[` + callA + `]},` + resultA + `,{"role":"assistant","content":[{"type":"text","text":"Sunny."}]},{"role":"user","content":"thanks"}]`
	out, restored, err := ad.Restore([]byte(in), []byte(stored), "")
	if err != nil || len(restored) != 2 || restored[1] != (adapters.Restored{Field: FieldRedactedThinking, MessageIndex: 3}) {
		t.Fatalf("restored %v, %v", restored, err)
	}
	if got := gjson.GetBytes(out, "3.content").Raw; got != `[`+storedRedacted+`,{"type":"text","text":"Sunny."}]` {
		t.Fatalf("content %s", got)
	}
	if ad.Restorable([]byte(`[` + prompt + `]`)) {
		t.Fatal("a thread without thinking is restorable")
	}
}
