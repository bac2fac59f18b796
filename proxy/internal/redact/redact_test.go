package redact

import (
	"strings"
	"testing"
)

func rules(t *testing.T, paths []string, patterns ...Pattern) *Rules {
	t.Helper()
	r, err := New(paths, patterns, "")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestMessage: paths mask whole values (also through # queries), patterns
// their matches in every string value (escaped ones decoded), the rest of
// the message is kept byte for byte, and a message without a match comes
// back as the same slice.
func TestMessage(t *testing.T) {
	email := Pattern{Name: "email", Regex: `[a-z]+@example\.com`}
	tests := []struct {
		name     string
		paths    []string
		patterns []Pattern
		in, want string
		counts   string
	}{
		{"path string", []string{"name"}, nil,
			`{"role":"user",  "name":"alice","content":"hi"}`, `{"role":"user",  "name":"[REDACTED]","content":"hi"}`, `[{"rule":"path:name","count":1}]`},
		{"path object", []string{"meta"}, nil,
			`{"meta":{"a":[1,2]},"x":1}`, `{"meta":"[REDACTED]","x":1}`, `[{"rule":"path:meta","count":1}]`},
		{"path query", []string{"tool_calls.#.function.arguments"}, nil,
			`{"tool_calls":[{"function":{"arguments":"{\"a\":1}"}},{"function":{"arguments":"{}"}}]}`,
			`{"tool_calls":[{"function":{"arguments":"[REDACTED]"}},{"function":{"arguments":"[REDACTED]"}}]}`, `[{"rule":"path:tool_calls.#.function.arguments","count":2}]`},
		{"pattern nested", nil, []Pattern{email},
			`{"content":[{"type":"text","text":"to bob@example.com and amy@example.com"}],"k":"bob@example.com"}`,
			`{"content":[{"type":"text","text":"to [REDACTED] and [REDACTED]"}],"k":"[REDACTED]"}`, `[{"rule":"pattern:email","count":3}]`},
		{"pattern escaped", nil, []Pattern{email},
			`{"content":"bob\u0040example.com \"quoted\""}`, `{"content":"[REDACTED] \"quoted\""}`, `[{"rule":"pattern:email","count":1}]`},
		{"keys are not values", nil, []Pattern{email},
			`{"bob@example.com":1}`, `{"bob@example.com":1}`, ``},
		{"both", []string{"name"}, []Pattern{email},
			`{"name":"bob@example.com","c":"bob@example.com"}`, `{"name":"[REDACTED]","c":"[REDACTED]"}`, `[{"rule":"path:name","count":1},{"rule":"pattern:email","count":1}]`},
		{"absent", []string{"name"}, []Pattern{email},
			`{"role":"user","content":"nothing here"}`, `{"role":"user","content":"nothing here"}`, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rules(t, tt.paths, tt.patterns...)
			var c Counts
			in := []byte(tt.in)
			got := r.Message(in, &c)
			if string(got) != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			if string(r.JSON(&c)) != tt.counts {
				t.Fatalf("counts %s, want %s", r.JSON(&c), tt.counts)
			}
			if tt.in == tt.want && &got[0] != &in[0] {
				t.Fatal("an unchanged message was copied")
			}
			if string(in) != tt.in {
				t.Fatal("the original was changed in place")
			}
		})
	}
}

// TestBodyAndEvent: a body gets the messages it carries verbatim replaced
// by their masked forms and the patterns everywhere; an SSE event gets
// the patterns in its JSON data; text without JSON gets them on its bytes.
func TestBodyAndEvent(t *testing.T) {
	r := rules(t, []string{"name"}, Pattern{Name: "secret", Regex: `s3cr[e3]t`})
	msg := []byte(`{"role":"user","name":"alice"}`)
	body := []byte(`{"model":"m","messages":[{"role":"user","name":"alice"}],"note":"s3cret"}`)
	got := r.Body(body, [][]byte{msg}, [][]byte{r.Message(msg, nil)})
	if string(got) != `{"model":"m","messages":[{"role":"user","name":"[REDACTED]"}],"note":"[REDACTED]"}` {
		t.Fatalf("body: %s", got)
	}
	ev := []byte("event: delta\ndata: {\"delta\":{\"content\":\"my s3cret\"}}\n\n")
	if got := r.Event(ev); string(got) != "event: delta\ndata: {\"delta\":{\"content\":\"my [REDACTED]\"}}\n\n" {
		t.Fatalf("event: %q", got)
	}
	plain := []byte("data: [DONE]\n\n")
	if got := r.Event(plain); &got[0] != &plain[0] {
		t.Fatal("an event without a match was copied")
	}
	if got := r.Event([]byte("data: not json s3cret\n\n")); string(got) != "data: not json [REDACTED]\n\n" {
		t.Fatalf("raw event: %q", got)
	}
	if got := r.Text("a s3cret b"); got != "a [REDACTED] b" {
		t.Fatalf("text: %q", got)
	}
	var nilRules *Rules
	if nilRules.Text("s3cret") != "s3cret" || string(nilRules.Message(msg, nil)) != string(msg) || nilRules.JSON(&Counts{}) != nil {
		t.Fatal("nil rules changed something")
	}
	if r, err := New(nil, nil, "x"); r != nil || err != nil {
		t.Fatalf("no rules: %v %v", r, err)
	}
	if _, err := New(nil, []Pattern{{Name: "bad", Regex: "[a"}}, ""); err == nil || !strings.Contains(err.Error(), "bad") {
		t.Fatalf("bad pattern: %v", err)
	}
}

// TestBodyNotVerbatim: an answer that carries the stored reply in another
// form (indented, with fields the stored copy drops, as providers send
// them) still gets the path rules: applied to every object of the body.
func TestBodyNotVerbatim(t *testing.T) {
	r := rules(t, []string{"tool_calls.#.function.arguments"})
	stored := []byte(`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"card\":\"4111\"}"}}]}`)
	body := []byte(`{
  "id": "chatcmpl-1",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": null,
        "refusal": null,
        "tool_calls": [
          {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"card\":\"4111\"}"}}
        ]
      },
      "finish_reason": "tool_calls"
    }
  ]
}`)
	got := r.Body(body, [][]byte{stored}, [][]byte{r.Message(stored, nil)})
	if strings.Contains(string(got), "4111") {
		t.Fatalf("the path's value is kept in clear:\n%s", got)
	}
	if !strings.Contains(string(got), `"arguments": "[REDACTED]"`) || !strings.Contains(string(got), `"finish_reason": "tool_calls"`) {
		t.Fatalf("body:\n%s", got)
	}
}
