package mock

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/cmd/mockllm/fixtures"
	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"
)

// streamRequest returns a path and body asking provider p for a stream.
func streamRequest(p provider, includeUsage bool) (string, []byte) {
	opts := ""
	if includeUsage {
		opts = `,"stream_options":{"include_usage":true}`
	}
	switch p {
	case provOpenAI:
		return pathChat, []byte(`{"model":"gpt-4.1","stream":true,"messages":[{"role":"user","content":"hi"}]` + opts + `}`)
	case provDeepSeek:
		return pathDeepSeek, []byte(`{"model":"deepseek-v4-flash","stream":true,"messages":[{"role":"user","content":"hi"}]` + opts + `}`)
	case provGeminiOpenAI:
		return pathGOAI, []byte(`{"model":"gemini-3-flash-preview","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	case provGemini:
		return "/v1beta/models/gemini-3-pro-preview:streamGenerateContent?alt=sse", []byte(`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`)
	case provAnthropic:
		return pathAnthropic, []byte(`{"model":"claude-sonnet-4-5-20250929","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	default:
		return pathResp, []byte(`{"model":"gpt-5.1","stream":true,"input":"hi"}`)
	}
}

// TestStreamReplayByteIdentical replays every .sse fixture of every provider
// and compares the received body with the file.
func TestStreamReplayByteIdentical(t *testing.T) {
	s := startMock(t)
	for _, p := range allProviders {
		entries, err := fs.ReadDir(fixtures.FS, "providers/"+string(p))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			name, ok := strings.CutSuffix(e.Name(), ".sse")
			if !ok {
				continue
			}
			t.Run(string(p)+"/"+name, func(t *testing.T) {
				path, body := streamRequest(p, true)
				resp, got := post(t, s, path, body, "X-Mock-Scenario", name)
				if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
					t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
				}
				if want := fx(t, string(p)+"/"+e.Name()); !bytes.Equal(want, got) {
					t.Errorf("stream differs from %s (%d vs %d bytes)", e.Name(), len(want), len(got))
				}
			})
		}
	}
}

// TestNonStreamReplay checks the .json bodies and the default scenarios.
func TestNonStreamReplay(t *testing.T) {
	s := startMock(t)
	nonStream := func(b []byte) []byte { return edit(t, b, "stream", false) }
	tests := []struct {
		name, path string
		body       []byte
		want       string // fixture path
	}{
		{"openai text", pathChat, []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`), "openai-chat/text.json"},
		{"openai tools", pathChat, nonStream(fx(t, "openai-chat/request.parallel-tools.json")), "openai-chat/parallel-tools.json"},
		{"openai after tool results", pathChat, nonStream(fx(t, "openai-chat/request.tool-results.json")), "openai-chat/text.json"},
		{"deepseek tools", pathDeepSeek, nonStream(fx(t, "deepseek/request.parallel-tools.json")), "deepseek/tool-call.json"},
		{"gemini tools", pathGemini3, fx(t, "gemini/request.parallel-tools.json"), "gemini/tool-call.json"},
		{"gemini after tool results", pathGemini3, fx(t, "gemini/request.tool-results.json"), "gemini/text.json"},
		{"gemini-openai tools", pathGOAI, []byte(`{"model":"gemini-3-flash-preview","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":"hi"}]}`), "gemini-openai/parallel-tools.json"},
		{"responses tools", pathResp, nonStream(fx(t, "openai-responses/request.parallel-tools.json")), "openai-responses/parallel-tools.json"},
		{"responses after tool results", pathResp, nonStream(fx(t, "openai-responses/request.tool-results.json")), "openai-responses/text.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, got := post(t, s, tt.path, tt.body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, got)
			}
			if diff := cmp.Diff(string(fx(t, tt.want)), string(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	resp, got := post(t, s, pathChat, []byte(`{"model":"gpt-4o","messages":[]}`), "X-Mock-Scenario", "nope")
	if resp.StatusCode != 400 || !bytes.Contains(got, []byte("mock_error")) {
		t.Errorf("unknown scenario: %d %s", resp.StatusCode, got)
	}
}

// TestIncludeUsage: without stream_options.include_usage OpenAI sends no
// usage chunk and no "usage":null fields (wire-formats.md 1.3).
func TestIncludeUsage(t *testing.T) {
	s := startMock(t)
	path, body := streamRequest(provOpenAI, false)
	for _, sc := range []string{"text", "parallel-tools.modern", "text-2024"} {
		_, got := post(t, s, path, body, "X-Mock-Scenario", sc)
		want := fx(t, "openai-chat/"+sc+".sse")
		wantEvents := bytes.Count(want, []byte("\n\n")) - 1
		if n := bytes.Count(got, []byte("\n\n")); n != wantEvents {
			t.Errorf("%s: %d events, want %d (fixture minus the usage chunk)", sc, n, wantEvents)
		}
		if bytes.Contains(got, []byte(`"usage"`)) || bytes.Contains(got, []byte(`"choices":[]`)) {
			t.Errorf("%s: usage left in the stream", sc)
		}
		if !bytes.HasSuffix(got, doneEventBytes) {
			t.Errorf("%s: no [DONE] at the end", sc)
		}
		if !bytes.Equal(bytes.ReplaceAll(want, usageNull, nil)[:len(got)-len(doneEventBytes)], got[:len(got)-len(doneEventBytes)]) {
			t.Errorf("%s: content differs from the fixture beyond the usage fields", sc)
		}
	}
}

// TestGeminiJSONArrayStream: without alt=sse the stream is one JSON array
// whose elements are the SSE events' objects.
func TestGeminiJSONArrayStream(t *testing.T) {
	s := startMock(t)
	resp, got := post(t, s, "/v1beta/models/gemini-3-pro-preview:streamGenerateContent", []byte(`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`),
		"X-Mock-Scenario", "parallel-tools", "x-goog-api-key", "k")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("status %d type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var arr []json.RawMessage
	if err := json.Unmarshal(got, &arr); err != nil {
		t.Fatalf("not a JSON array: %v\n%s", err, got)
	}
	events := splitEvents(fx(t, "gemini/parallel-tools.sse"), "\r\n\r\n")
	if len(arr) != len(events) {
		t.Fatalf("%d elements, want %d", len(arr), len(events))
	}
	for i, ev := range events {
		var a, b bytes.Buffer
		_ = json.Compact(&a, arr[i])
		_ = json.Compact(&b, bytes.TrimSpace(bytes.TrimPrefix(ev, dataPrefix)))
		if a.String() != b.String() {
			t.Errorf("element %d differs", i)
		}
	}
}

// TestSynthetic checks the synthetic scenario of every provider, stream and not.
func TestSynthetic(t *testing.T) {
	s := startMock(t)
	const n = 7
	for _, p := range allProviders {
		t.Run(string(p), func(t *testing.T) {
			path, body := streamRequest(p, true)
			resp, got := post(t, s, path, body, "X-Mock-Scenario", "synthetic", "X-Mock-Chunks", "7")
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, got)
			}
			deltas := bytes.Count(got, []byte(`"`+synthToken+`"`))
			if deltas != n {
				t.Errorf("%d deltas, want %d", deltas, n)
			}
			sep := "\n\n"
			if p == provGemini {
				sep = "\r\n\r\n"
			}
			for i, ev := range splitEvents(got, sep) {
				payload := bytes.TrimSpace(ev[bytes.Index(ev, dataPrefix)+len(dataPrefix):])
				if string(payload) != "[DONE]" && !gjson.ValidBytes(payload) {
					t.Errorf("event %d is not JSON: %s", i, payload)
				}
			}
			switch p {
			case provGemini:
				if bytes.Contains(got, []byte("[DONE]")) || !bytes.HasSuffix(got, []byte("}\r\n\r\n")) {
					t.Error("gemini stream must end with its delimiter and no [DONE]")
				}
			case provResponses:
				if !bytes.Contains(got, []byte(`"sequence_number":14,`)) || !bytes.Contains(got, []byte("event: response.completed")) {
					t.Errorf("responses stream: bad sequence or end:\n%s", got)
				}
			case provAnthropic:
				if bytes.Contains(got, []byte("[DONE]")) || !bytes.HasSuffix(got, []byte("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")) {
					t.Errorf("anthropic stream must end after message_stop, without [DONE]:\n%s", got)
				}
			default:
				if !bytes.HasSuffix(got, doneEventBytes) {
					t.Error("no [DONE]")
				}
			}
			_, whole := post(t, s, path, edit(t, body, "stream", false), "X-Mock-Scenario", "synthetic", "X-Mock-Chunks", "7")
			if p == provGemini {
				_, whole = post(t, s, pathGemini3, body, "X-Mock-Scenario", "synthetic", "X-Mock-Chunks", "7")
			}
			if !gjson.ValidBytes(whole) || !bytes.Contains(whole, []byte(strings.Repeat(synthToken, n))) {
				t.Errorf("non-stream body: %s", whole)
			}
		})
	}
	// The array form without alt=sse parses as JSON.
	_, got := post(t, s, "/v1beta/models/g:streamGenerateContent", []byte(`{}`), "X-Mock-Scenario", "synthetic", "X-Mock-Chunks", "3")
	var arr []json.RawMessage
	if err := json.Unmarshal(got, &arr); err != nil || len(arr) != 4 {
		t.Errorf("array form: %v, %d elements\n%s", err, len(arr), got)
	}
}
