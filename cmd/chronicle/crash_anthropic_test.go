package main

import (
	"bufio"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/cmd/mockllm/mock"
	"github.com/tidwall/gjson"
)

// TestCrashRecoveryAnthropic: on an Anthropic connection, a thinking turn
// ends in a tool_use; the next turn moves on without its tool_result and
// chronicle is SIGKILLed mid-stream. After a restart on the same store an
// empty continue is accepted by the strict mock: the stored history went
// up repaired (the tool_use answered by an is_error tool_result at the
// start of the next user turn) with the signed thinking block intact.
func TestCrashRecoveryAnthropic(t *testing.T) {
	m, err := mock.Start("127.0.0.1:0", mock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	dir := t.TempDir()
	cfg := `
listen: 127.0.0.1:0
store: {driver: embedded, path: ` + dir + `}
leases: {ttl: 1s}
connections:
  - {name: claude, provider: anthropic, base_url: "` + m.URL() + `"}
`
	p := startChronicle(t, cfg)
	url := "http://" + p.addr + "/claude/v1/messages"
	hdr := []string{"X-Api-Key", "crash-key", "Anthropic-Version", "2023-06-01", "X-Thread-Id", "t-crash-a", "X-Mock-Scenario", "synthetic"}
	head := `"model":"claude-sonnet-4-5","max_tokens":4096,"thinking":{"type":"enabled","budget_tokens":2048},"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}]`

	resp := post(t, url, `{`+head+`,"stream":true,"messages":[{"role":"user","content":"weather in Paris?"}]}`, hdr...)
	if b := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(string(b), `"stop_reason":"tool_use"`) {
		t.Fatalf("turn 1: %d %s", resp.StatusCode, b)
	}

	resp = post(t, url, `{`+head+`,"stream":true,"messages":[{"role":"user","content":"never mind, say hi"}]}`,
		append(hdr, "X-Thread-Mode", "append", "X-Mock-Gate", "crash")...)
	if resp.StatusCode != 200 || resp.Header.Get("X-Repaired") == "" {
		t.Fatalf("turn 2: %d, X-Repaired %q", resp.StatusCode, resp.Header.Get("X-Repaired"))
	}
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "event:") {
		t.Fatalf("turn 2 first line %q %v", line, err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	resp.Body.Close()
	m.Release("crash")

	p = startChronicle(t, cfg)
	url = "http://" + p.addr + "/claude/v1/messages"
	m.Reset()
	var body []byte
	for attempt := 0; ; attempt++ {
		resp = post(t, url, `{`+head+`,"messages":[]}`, hdr...)
		body = readAll(t, resp)
		if resp.StatusCode != 409 {
			break
		}
		if attempt > 20 {
			t.Fatalf("thread still busy after %d attempts", attempt)
		}
		wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		time.Sleep(time.Duration(wait) * time.Second) // honouring Retry-After, as a client does
	}
	if resp.StatusCode != 200 {
		t.Fatalf("continue after restart: %d %s", resp.StatusCode, body)
	}
	sent := gjson.GetBytes(m.Requests()[0].Body, "messages").Array()
	// The interrupted result is a user message of its own right after
	// the tool_use, which the API combines with the user's next words
	// into one turn that opens with the result.
	if len(sent) != 4 || sent[3].Get("content").String() != "never mind, say hi" {
		t.Fatalf("upstream received %s", gjson.GetBytes(m.Requests()[0].Body, "messages").Raw)
	}
	if a := sent[1]; a.Get("content.0.type").String() != "thinking" || a.Get("content.0.signature").String() == "" {
		t.Fatalf("the assistant turn lost its thinking: %s", a.Raw)
	}
	if u := sent[2].Get("content.0"); u.Get("type").String() != "tool_result" || !u.Get("is_error").Bool() {
		t.Fatalf("the next user message does not start with the interrupted result: %s", sent[2].Raw)
	}
}
