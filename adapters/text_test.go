package adapters

import "testing"

func TestMessageText(t *testing.T) {
	tests := []struct {
		f    Format
		msg  string
		want string
	}{
		{FormatOpenAIResponses, `[{"type":"reasoning","summary":[]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Yes."}]}]`, "Yes."},
	}
	for _, tt := range tests {
		ad := map[Format]Adapter{FormatOpenAIResponses: respAd}[tt.f]
		if got := ad.MessageText([]byte(tt.msg)); got != tt.want {
			t.Errorf("MessageText(%s, %s) = %q, want %q", tt.f, tt.msg, got, tt.want)
		}
	}
}
