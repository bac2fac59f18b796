package main

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestDescribeAnthropicMessage: `chronicle threads show` labels an
// Anthropic message's blocks apart: thinking, tool calls, tool results.
func TestDescribeAnthropicMessage(t *testing.T) {
	for _, c := range []struct{ msg, want string }{
		{`{"role":"user","content":"hi"}`, "[user] hi"},
		{`{"role":"assistant","content":[{"type":"thinking","thinking":"plan","signature":"s"},{"type":"text","text":"ok"},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]}`,
			`[thinking] plan|[assistant] ok|[tool call get_weather toolu_1] {"city":"Paris"}`},
		{`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"sunny"}]}]}`, "[tool result toolu_1] sunny"},
		{`{"role":"assistant","content":[{"type":"redacted_thinking","data":"x"}]}`, "[redacted thinking] [encrypted]"},
	} {
		if got := strings.Join(describeMessage("anthropic-messages", gjson.Parse(c.msg)), "|"); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.msg, got, c.want)
		}
	}
}

// TestRepairCommandAnthropic: `chronicle repair --format anthropic`
// answers an unanswered tool_use in a Messages body.
func TestRepairCommandAnthropic(t *testing.T) {
	in := `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]},{"role":"user","content":"go on"}]}`
	var out, errOut strings.Builder
	if code := repairCmd([]string{"--format", "anthropic", "--json"}, strings.NewReader(in), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if r := gjson.Parse(out.String()); r.Get("messages.2.content.0.type").String() != "tool_result" || r.Get("interrupted.0.call_id").String() != "toolu_1" {
		t.Fatalf("output %s", out.String())
	}
}
