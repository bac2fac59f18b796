package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestRepairCommand(t *testing.T) {
	history := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"},
{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"search","arguments":"{}"}}]},
{"role":"user","content":"next"}]}`
	tests := []struct {
		name string
		args []string
		in   string
		code int
		want []string
	}{
		{"text", []string{"--read-only-tools", "search"}, history, 0, []string{`changed nothing and is safe to call again`}},
		{"json", []string{"--json"}, history, 0, []string{`"interrupted":[{"call_id":"c1","name":"search"}]`, `"kind":"synthetic_result"`}},
		{"gemini", []string{"--format", "gemini"}, `[{"role":"user","parts":[{"text":"x"}]},{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}}]},{"role":"user","parts":[{"text":"y"}]}]`, 0, []string{`functionResponse`}},
		{"bad format", []string{"--format", "claude"}, history, 2, nil},
		{"not an array", nil, `"nope"`, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := repairCmd(tt.args, strings.NewReader(tt.in), &out, &errb)
			if code != tt.code {
				t.Fatalf("code %d, want %d (%s)", code, tt.code, errb.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %s:\n%s", w, out.String())
				}
			}
			if code == 0 && tt.name == "text" {
				if n := len(gjson.Parse(strings.TrimSpace(out.String())).Array()); n != 4 {
					t.Fatalf("repaired history has %d messages", n)
				}
				if !strings.Contains(errb.String(), "interrupted calls: c1") {
					t.Fatalf("stderr: %s", errb.String())
				}
			}
		})
	}
}
