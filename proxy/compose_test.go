package proxy

import (
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/formats"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/google/go-cmp/cmp"
	"github.com/valyala/fasthttp"
)

// storedThread is a thread as StartRun loads it, from raw messages.
func storedThread(system string, msgs ...string) store.Thread {
	th := store.Thread{}
	if system != "" {
		th.System = []byte(system)
	}
	for _, m := range msgs {
		th.Messages = append(th.Messages, []byte(m))
		th.Hashes = append(th.Hashes, store.Hash(adapters.HashValidMessage([]byte(m))))
	}
	return th
}

func noBuf(int) []byte { return nil }

// TestCompose runs the compose stage alone: a stored thread and a request
// in, the plan out; no store, no sockets.
func TestCompose(t *testing.T) {
	const (
		u1 = `{"role":"user","content":"weather?"}`
		a1 = `{"role":"assistant","content":"","reasoning_content":"R1","tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{}"}}]}`
		t1 = `{"role":"tool","tool_call_id":"c1","content":"sunny"}`
		a2 = `{"role":"assistant","content":"It is sunny."}`
		u2 = `{"role":"user","content":"thanks"}`
	)
	deepSeek := formats.ForConnection("deepseek", nil).Adapter([]byte("/v1/chat/completions"))
	geminiAdapter := formats.ForConnection("gemini", nil).Adapter([]byte("/v1beta/models/gemini-2.5-flash:generateContent"))
	tests := []struct {
		name   string
		ad     adapters.Adapter
		thread store.Thread
		mode   string
		model  string
		body   string
		// wantParts is the history as sent, one message each.
		wantParts []string
		// wantBody, when set, is the whole upstream body.
		wantBody    string
		wantHeaders map[string]string
		wantMode    string
	}{
		{
			name: "replace on a new thread sends the request as it is, with the session key",
			ad:   openAIAdapter, mode: modeReplace, model: "gpt-4o",
			body:      `{"model":"gpt-4o","messages":[` + u1 + `]}`,
			wantParts: []string{u1},
			wantBody:  `{"model":"gpt-4o","messages":[` + u1 + `],"prompt_cache_key":"sid-1"}`,
		},
		{
			name: "append puts the stored history in front",
			ad:   openAIAdapter, mode: modeAppend, model: "gpt-4o",
			thread:    storedThread("", u1, a2),
			body:      `{"model":"gpt-4o","messages":[` + u2 + `]}`,
			wantParts: []string{u1, a2, u2},
		},
		{
			name: "an empty history continues the stored thread",
			ad:   openAIAdapter, mode: modeReplace, model: "gpt-4o",
			thread:    storedThread("", u1, a2, u2),
			body:      `{"model":"gpt-4o","messages":[]}`,
			wantParts: []string{u1, a2, u2},
		},
		{
			name: "a call with no result gets one, and the client is told",
			ad:   openAIAdapter, mode: modeReplace, model: "gpt-4o",
			body:        `{"model":"gpt-4o","messages":[` + u1 + `,{"role":"assistant","content":null,"tool_calls":[{"id":"c9","type":"function","function":{"name":"w","arguments":"{}"}}]},` + u2 + `]}`,
			wantHeaders: map[string]string{"X-Repaired": "1", "X-Interrupted-Calls": "c9"},
		},
		{
			name: "reasoning the client dropped in a tool turn comes back from the store",
			ad:   deepSeek, mode: modeReplace, model: "deepseek-reasoner",
			thread:      storedThread("", u1, a1, t1, a2),
			body:        `{"model":"deepseek-reasoner","messages":[` + u1 + `,{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{}"}}]},` + t1 + `,` + a2 + `,` + u2 + `]}`,
			wantParts:   []string{u1, `{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{}"}}],"reasoning_content":"R1"}`, t1, a2, u2},
			wantHeaders: map[string]string{"X-Restored": "reasoning_content"},
		},
		{
			name: "Gemini append without a systemInstruction keeps the stored one",
			ad:   geminiAdapter, mode: modeAppend, model: "gemini-2.5-flash",
			thread:    storedThread(`{"parts":[{"text":"be brief"}]}`, `{"role":"user","parts":[{"text":"hi"}]}`, `{"role":"model","parts":[{"text":"hello"}]}`),
			body:      `{"contents":[{"role":"user","parts":[{"text":"again"}]}]}`,
			wantParts: []string{`{"role":"user","parts":[{"text":"hi"}]}`, `{"role":"model","parts":[{"text":"hello"}]}`, `{"role":"user","parts":[{"text":"again"}]}`},
			wantBody:  `{"contents":[{"role":"user","parts":[{"text":"hi"}]},{"role":"model","parts":[{"text":"hello"}]},{"role":"user","parts":[{"text":"again"}]}],"systemInstruction":{"parts":[{"text":"be brief"}]}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(tt.body)
			messages, ok := tt.ad.Messages(body)
			if !ok {
				t.Fatalf("the test body has no history array")
			}
			in := composeInput{ad: tt.ad, thread: &tt.thread, body: body, messages: messages,
				empty: isEmptyArray(messages), mode: tt.mode, model: tt.model, sessionID: "sid-1", buf: noBuf}
			var p plan
			if err := compose(&in, &p); err != nil {
				t.Fatalf("compose: %v", err)
			}
			if tt.wantParts != nil {
				got := make([]string, len(p.parts))
				for i, m := range p.parts {
					got[i] = string(m)
				}
				if diff := cmp.Diff(tt.wantParts, got); diff != "" {
					t.Errorf("history sent (-want +got):\n%s", diff)
				}
			}
			if len(p.hashes) != len(p.parts) || len(p.infos) != len(p.parts) {
				t.Errorf("%d parts, %d hashes, %d infos: one of each per message", len(p.parts), len(p.hashes), len(p.infos))
			}
			for i, m := range p.parts {
				if want := store.Hash(adapters.HashValidMessage(m)); p.hashes[i] != want {
					t.Errorf("hash of part %d is not the message's", i)
				}
			}
			if tt.wantBody != "" {
				if got := string(p.upstream.Bytes()); got != tt.wantBody {
					t.Errorf("upstream body\n got %s\nwant %s", got, tt.wantBody)
				}
			}
			var h fasthttp.ResponseHeader
			p.writeHeaders(&h)
			for _, name := range []string{"X-Repaired", "X-Interrupted-Calls", "X-Restored"} {
				if got, want := string(h.Peek(name)), tt.wantHeaders[name]; got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
			wantMode := tt.wantMode
			if wantMode == "" {
				wantMode = tt.mode
			}
			if p.mode != wantMode {
				t.Errorf("mode %q, want %q", p.mode, wantMode)
			}
		})
	}
}

// TestComposeKeepsUnknownBytes: compose edits the body in place of its
// history only; every other member reaches the upstream byte for byte.
func TestComposeKeepsUnknownBytes(t *testing.T) {
	const extra = `"temperature":0.25, "x_vendor":{"a":[1,2,{"b":null}]}`
	body := []byte(`{"model":"gpt-4o", ` + extra + `,"messages":[{"role":"user","content":"new"}]}`)
	th := storedThread("", `{"role":"user","content":"old"}`, `{"role":"assistant","content":"ok"}`)
	messages, _ := openAIAdapter.Messages(body)
	in := composeInput{ad: openAIAdapter, thread: &th, body: body, messages: messages, mode: modeAppend,
		model: "gpt-4o", sessionID: "sid-1", buf: noBuf}
	var p plan
	if err := compose(&in, &p); err != nil {
		t.Fatal(err)
	}
	got := string(p.upstream.Bytes())
	if !strings.Contains(got, extra) {
		t.Errorf("the members around the history changed:\n%s", got)
	}
	if !strings.Contains(got, `"messages":[{"role":"user","content":"old"},{"role":"assistant","content":"ok"},{"role":"user","content":"new"}]`) {
		t.Errorf("the stored history is not in front:\n%s", got)
	}
}
