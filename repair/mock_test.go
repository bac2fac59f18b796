package repair

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/cmd/mockllm/mock"
)

// TestMockUpstream sends every golden case to the strict mock upstream:
// the raw broken history must be refused with 400 (unless the case says
// why the mock accepts it) and the repaired one accepted with 200.
func TestMockUpstream(t *testing.T) {
	srv, err := mock.Start("127.0.0.1:0", mock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	client := &http.Client{}
	send := func(t *testing.T, format string, c *goldenCase, history []byte) (int, string) {
		t.Helper()
		body := map[string]json.RawMessage{}
		if len(c.Request) > 0 {
			if err := json.Unmarshal(c.Request, &body); err != nil {
				t.Fatal(err)
			}
		}
		var url string
		switch format {
		case "openai":
			url = srv.URL() + "/v1/chat/completions"
			body["model"], _ = json.Marshal(c.Model)
			body["messages"] = history
		case "gemini":
			url = srv.URL() + "/v1beta/models/" + c.Model + ":generateContent"
			body["contents"] = history
		case "responses":
			url = srv.URL() + "/v1/responses"
			body["model"], _ = json.Marshal(c.Model)
			body["input"] = history
		}
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatalf("marshal request: %v", err)
		}
		req, err := http.NewRequest("POST", url, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if format == "gemini" {
			req.Header.Set("x-goog-api-key", "x")
		} else {
			req.Header.Set("Authorization", "Bearer x")
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		rb, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(rb)
	}
	for _, f := range formats {
		for name, c := range loadCases(t, f.dir) {
			t.Run(f.dir+"/"+name, func(t *testing.T) {
				got, err := f.fn(c.Input, Options{ReadOnlyTools: c.ReadOnly})
				if err != nil {
					t.Fatal(err)
				}
				wantRaw := http.StatusBadRequest
				if strings.HasPrefix(name, "valid_") || c.MockAcceptsRaw != "" {
					wantRaw = http.StatusOK
				}
				if st, body := send(t, f.dir, c, c.Input); st != wantRaw {
					t.Errorf("raw history: status %d, want %d: %s", st, wantRaw, body)
				}
				if st, body := send(t, f.dir, c, got.Messages); st != http.StatusOK {
					t.Errorf("repaired history: status %d, want 200: %s\n%s", st, body, got.Messages)
				}
			})
		}
	}
}
