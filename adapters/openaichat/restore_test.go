package openaichat

import (
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/internal/formattest"
	"github.com/google/go-cmp/cmp"
)

func TestDeepSeekReasoning(t *testing.T) {
	for model, want := range map[string]ReasoningPolicy{
		"deepseek-v4-flash": ReasoningAll, "deepseek-v4-pro": ReasoningAll, "deepseek-flash": ReasoningAll,
		"deepseek-reasoner": ReasoningToolTurns, "deepseek-chat": ReasoningToolTurns,
		"deepseek-r1": ReasoningNever, "deepseek-ai/DeepSeek-R1": ReasoningNever,
	} {
		if got := DeepSeekReasoning(model); got != want {
			t.Errorf("%s: %v, want %v", model, got, want)
		}
	}
}

func TestRestoreOpenAI(t *testing.T) {
	stored := `[{"role":"user","content":"weather?"},` +
		`{"role":"assistant","content":"","reasoning_content":"R1","tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{\"city\": \"Paris\"}"},"extra_content":{"google":{"thought_signature":"SIG1"}}},{"id":"c2","type":"function","function":{"name":"w","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":"x"},{"role":"tool","tool_call_id":"c2","content":"y"},` +
		`{"role":"assistant","content":"done","reasoning_content":"R2"},` +
		`{"role":"user","content":"thanks"},` +
		`{"role":"assistant","content":"bye","reasoning_content":"R3"}]`
	tests := []struct {
		name     string
		ad       *Adapter
		model    string
		incoming string
		want     string // "" = unchanged
		restored []adapters.Restored
	}{
		{"v3.2 restores on the tool exchange only", deepSeekAd, "deepseek-reasoner",
			`[{"role":"user","content":"weather?"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"}},{"id":"c2","type":"function","function":{"name":"w","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"x"},{"role":"tool","tool_call_id":"c2","content":"y"},{"role":"assistant","content":"done"},{"role":"user","content":"thanks"},{"role":"assistant","content":"bye"},{"role":"user","content":"again"}]`,
			`[{"role":"user","content":"weather?"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"},"extra_content":{"google":{"thought_signature":"SIG1"}}},{"id":"c2","type":"function","function":{"name":"w","arguments":"{}"}}],"reasoning_content":"R1"},{"role":"tool","tool_call_id":"c1","content":"x"},{"role":"tool","tool_call_id":"c2","content":"y"},{"role":"assistant","content":"done","reasoning_content":"R2"},{"role":"user","content":"thanks"},{"role":"assistant","content":"bye"},{"role":"user","content":"again"}]`,
			[]adapters.Restored{{Field: FieldReasoningContent, MessageIndex: 1}, {Field: adapters.FieldThoughtSignature, MessageIndex: 1}, {Field: FieldReasoningContent, MessageIndex: 4}}},
		{"v4 restores on every matched assistant message", deepSeekAd, "deepseek-v4-flash",
			`[{"role":"user","content":"thanks"},{"role":"assistant","content":"done","reasoning_content":""},{"role":"user","content":"x"},{"role":"assistant","content":"bye"}]`,
			"", nil}, // positions differ: the 1st incoming assistant is not the 1st stored
		{"v4 restores by position when content matches", deepSeekAd, "deepseek-v4-flash",
			`[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"reasoning_content":"","tool_calls":[{"type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"}},{"type":"function","function":{"name":"w","arguments":"{}"}}]}]`,
			`[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"reasoning_content":"R1","tool_calls":[{"type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"},"extra_content":{"google":{"thought_signature":"SIG1"}}},{"type":"function","function":{"name":"w","arguments":"{}"}}]}]`,
			[]adapters.Restored{{Field: FieldReasoningContent, MessageIndex: 1}, {Field: adapters.FieldThoughtSignature, MessageIndex: 1}}},
		{"R1 never gets reasoning back", deepSeekAd, "deepseek-r1",
			`[{"role":"user","content":"weather?"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{}"},"extra_content":{"google":{"thought_signature":"KEEP"}}}]}]`,
			"", nil},
		{"skip placeholder is replaced", gemOAIAd, "gemini-3-flash-preview",
			`[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{}"},"extra_content":{"google":{"thought_signature":"skip_thought_signature_validator"}}}]}]`,
			`[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{}"},"extra_content":{"google":{"thought_signature":"SIG1"}}}]}]`,
			[]adapters.Restored{{Field: adapters.FieldThoughtSignature, MessageIndex: 0}}},
		{"different content does not match", deepSeekAd, "deepseek-v4-flash",
			`[{"role":"user","content":"weather?"},{"role":"assistant","content":"something else"}]`, "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, restored, err := tc.ad.Restore([]byte(tc.incoming), []byte(stored), tc.model)
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
		})
	}
}

// TestRestoreKeepsBytes checks that bytes outside the edited message stay
// identical.
func TestRestoreKeepsBytes(t *testing.T) {
	stored := `[{"role":"assistant","content":"","reasoning_content":"R","tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{}"}}]}]`
	in := "[ {\"role\": \"user\",  \"content\": \"\\u0041\"},\n  {\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"w\",\"arguments\":\"{}\"}}]} ,\n {\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"x\"} ]"
	out, restored, err := deepSeekAd.Restore([]byte(in), []byte(stored), "deepseek-reasoner")
	if err != nil || len(restored) != 1 {
		t.Fatalf("%v %v", restored, err)
	}
	head := "[ {\"role\": \"user\",  \"content\": \"\\u0041\"},\n  "
	tail := " ,\n {\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"x\"} ]"
	if !strings.HasPrefix(string(out), head) || !strings.HasSuffix(string(out), tail) {
		t.Errorf("bytes outside the edit changed: %s", out)
	}
}
