package main

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/cmd/mockllm/mock"
	"github.com/tidwall/gjson"
)

func post(t *testing.T, url, body string, headers ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCrashRecovery: chronicle is killed with SIGKILL mid-stream and
// restarted on the same store. The lost run ends failed/proxy_lost, and an
// empty-messages request continues the thread: the upstream receives the
// stored history, repaired (the tool call that never got its result is
// answered), and accepts it. The session id survives the restart.
func TestCrashRecovery(t *testing.T) {
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
  - {name: openai, provider: openai, base_url: "` + m.URL() + `"}
`
	p := startChronicle(t, cfg)
	url := "http://" + p.addr + "/openai/v1/chat/completions"
	hdr := []string{"Authorization", "Bearer crash-key", "X-Thread-Id", "t-crash"}
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{}}}}]`

	// Turn 1 ends in a tool call: the run parks as interrupted.
	resp := post(t, url, `{"model":"gpt-4o",`+tools+`,"messages":[{"role":"user","content":"weather in Paris?"}]}`, hdr...)
	if b := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(string(b), "tool_calls") {
		t.Fatalf("turn 1: %d %s", resp.StatusCode, b)
	}
	sid1 := gjson.GetBytes(m.Requests()[0].Body, "prompt_cache_key").String()

	// Turn 2 (append) moves on without the tool result, and chronicle is
	// killed while its stream is held open.
	resp = post(t, url, `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"never mind, say hi"}]}`,
		append(hdr, "X-Thread-Mode", "append", "X-Mock-Gate", "crash")...)
	calls := strings.Split(resp.Header.Get("X-Interrupted-Calls"), ",")
	if resp.Header.Get("X-Repaired") != strconv.Itoa(len(calls)) || calls[0] == "" {
		t.Fatalf("turn 2 was not repaired: X-Repaired=%q X-Interrupted-Calls=%q", resp.Header.Get("X-Repaired"), resp.Header.Get("X-Interrupted-Calls"))
	}
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data:") {
		t.Fatalf("turn 2 first line %q %v", line, err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	resp.Body.Close()
	m.Release("crash")

	// Restart on the same store.
	p = startChronicle(t, cfg)
	url = "http://" + p.addr + "/openai/v1/chat/completions"
	m.Reset()
	// The lost run holds the thread until its lease lapses; a client
	// honours Retry-After, as an SDK would.
	var body []byte
	for attempt := 0; ; attempt++ {
		resp = post(t, url, `{"model":"gpt-4o","messages":[]}`, hdr...)
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
	// The pending turn saved at turn 2's start is what went upstream then:
	// already repaired, so the continue needs no new edit and is valid.
	sent := gjson.GetBytes(m.Requests()[0].Body, "messages").Array()
	if len(sent) != 3+len(calls) || sent[2].Get("role").String() != "tool" || !strings.Contains(sent[2].Get("content").String(), "interrupted") ||
		sent[len(sent)-1].Get("content").String() != "never mind, say hi" {
		t.Fatalf("upstream received %s", gjson.GetBytes(m.Requests()[0].Body, "messages").Raw)
	}
	if sid := gjson.GetBytes(m.Requests()[0].Body, "prompt_cache_key").String(); sid != sid1 || sid == "" {
		t.Fatalf("session id changed across the restart: %q then %q", sid1, sid)
	}

	// The thread's runs: interrupted (cancelled: the thread moved on), the
	// lost one, and the continue.
	req, _ := http.NewRequest("GET", "http://"+p.addr+"/api/threads/t-crash", nil)
	req.Header.Set("Authorization", "Bearer crash-key")
	tr, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	th := gjson.ParseBytes(readAll(t, tr))
	runs := th.Get("runs").Array()
	if len(runs) != 3 {
		t.Fatalf("runs: %s", th.Get("runs").Raw)
	}
	if runs[1].Get("status").String() != "failed" || runs[1].Get("reason").String() != "proxy_lost" {
		t.Fatalf("lost run: %s", runs[1].Raw)
	}
	if runs[0].Get("status").String() != "interrupted" || runs[0].Get("interrupts.0.status").String() != "cancelled" {
		t.Fatalf("parked run: %s", runs[0].Raw)
	}
	if runs[2].Get("status").String() != "completed" {
		t.Fatalf("continue run: %s", runs[2].Raw)
	}
}

// TestInstanceSessionIDSurvivesRestart: requests that name no thread get the
// connection's per-model session id, the same before and after a restart.
func TestInstanceSessionIDSurvivesRestart(t *testing.T) {
	m, err := mock.Start("127.0.0.1:0", mock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cfg := `
listen: 127.0.0.1:0
store: {driver: embedded, path: ` + t.TempDir() + `}
connections:
  - {name: openai, provider: openai, base_url: "` + m.URL() + `"}
`
	var sids []string
	for i := 0; i < 2; i++ {
		p := startChronicle(t, cfg)
		for j := 0; j < 2; j++ {
			resp := post(t, "http://"+p.addr+"/openai/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, "Authorization", "Bearer k")
			readAll(t, resp)
			if resp.Header.Get("X-Thread-Id") == "" {
				t.Fatal("no thread id made")
			}
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.cmd.Wait()
	}
	for _, r := range m.Requests() {
		sids = append(sids, gjson.GetBytes(r.Body, "prompt_cache_key").String())
	}
	if len(sids) != 4 || sids[0] == "" || sids[0] != sids[1] || sids[1] != sids[2] || sids[2] != sids[3] {
		t.Fatalf("session ids: %v", sids)
	}
}
