package gemini

import (
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/internal/formattest"
	"github.com/google/go-cmp/cmp"
)

func TestRestoreGemini(t *testing.T) {
	stored := string(formattest.Fixture(t, "gemini/request.tool-results.json"))
	contents, _ := geminiAd.Messages([]byte(stored))
	expected := string(formattest.Fixture(t, "gemini/parallel-tools.expected.json"))
	sig := formattest.JSONValue(t, []byte(expected)).(map[string]any)["parts"].([]any)[1].(map[string]any)["thoughtSignature"].(string)

	// A client (re-serialising args) that dropped the signature, and one
	// that replaced it with the skip placeholder; both get it back.
	for _, in := range []string{
		`[{"role":"user","parts":[{"text":"What's the weather in Paris and in Tokyo?"}]},{"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}},{"functionCall":{"name":"get_weather","args":{"city":"Tokyo"}}}]}]`,
		`[{"role":"user","parts":[{"text":"What's the weather in Paris and in Tokyo?"}]},{"role":"model","parts":[{"text":"**Planning the weather lookups**\n\nThe user asked about two cities, Paris and Tokyo. I'll call ` + "`get_weather`" + ` for each of them in parallel.\n\n\n","thought":true},{"functionCall":{"args":{"city":"Paris"},"name":"get_weather"},"thoughtSignature":"skip_thought_signature_validator"},{"functionCall":{"name":"get_weather","args":{"city":"Tokyo"}}}]}]`,
	} {
		out, restored, err := geminiAd.Restore([]byte(in), contents, "gemini-3-pro-preview")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]adapters.Restored{{Field: adapters.FieldThoughtSignature, MessageIndex: 1}}, restored); diff != "" {
			t.Errorf("restored (-want +got)\n%s", diff)
		}
		got := formattest.JSONValue(t, out).([]any)[1].(map[string]any)["parts"].([]any)
		var fc map[string]any
		for _, p := range got {
			if pm := p.(map[string]any); pm["functionCall"] != nil {
				fc = pm
				break
			}
		}
		if fc["thoughtSignature"] != sig {
			t.Errorf("signature not restored: %s", out)
		}
	}
	// Different args: no match, unchanged.
	in := `[{"role":"user","parts":[{"text":"q"}]},{"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"city":"Rome"}}},{"functionCall":{"name":"get_weather","args":{"city":"Tokyo"}}}]}]`
	out, restored, err := geminiAd.Restore([]byte(in), contents, "")
	if err != nil || string(out) != in || restored != nil {
		t.Errorf("mismatch changed something: %s %v %v", out, restored, err)
	}
}
