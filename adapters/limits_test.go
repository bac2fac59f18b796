package adapters

import "testing"

func TestMaxOutputTokens(t *testing.T) {
	for body, want := range map[string]int64{
		`{"model":"m","max_tokens":100}`:                100,
		`{"max_completion_tokens":50,"max_tokens":100}`: 50,
		`{"max_output_tokens":7}`:                       7,
		`{"generationConfig":{"maxOutputTokens":2048}}`: 2048,
		`{"messages":[]}`:                               0,
		`{"max_tokens":-3}`:                             0,
		`not json`:                                      0,
	} {
		if got := MaxOutputTokens([]byte(body)); got != want {
			t.Errorf("MaxOutputTokens(%s) = %d, want %d", body, got, want)
		}
	}
}
