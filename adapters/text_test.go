package adapters

import "testing"

func TestMessageText(t *testing.T) {
	tests := []struct {
		f    Format
		msg  string
		want string
	}{
		{FormatGemini, `{"role":"model","parts":[{"text":"think","thought":true},{"text":"Hi"},{"text":" you"}]}`, "Hi you"},
		{FormatOpenAIResponses, `[{"type":"reasoning","summary":[]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Yes."}]}]`, "Yes."},
	}
	for _, tt := range tests {
		ad := map[Format]Adapter{FormatGemini: geminiAd, FormatOpenAIResponses: respAd}[tt.f]
		if got := ad.MessageText([]byte(tt.msg)); got != tt.want {
			t.Errorf("MessageText(%s, %s) = %q, want %q", tt.f, tt.msg, got, tt.want)
		}
	}
}
