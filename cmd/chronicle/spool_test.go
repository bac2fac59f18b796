package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/cmd/mockllm/mock"
	"github.com/chronicle-proxy/chronicle/store/redistest"
	"github.com/tidwall/gjson"
)

// TestRestartReplaysJournal: Redis dies while a stream is in flight, so
// chronicle spools the turn's finish and the client gets the whole
// answer; chronicle is then SIGKILLed with the journal still full. Redis
// comes back, a new chronicle starts on the same spool path, and the
// thread it serves holds the whole turn, its run completed. Five times.
func TestRestartReplaysJournal(t *testing.T) {
	for i := 0; i < 5; i++ {
		t.Run(fmt.Sprint(i), restartReplaysJournal)
	}
}

func restartReplaysJournal(t *testing.T) {
	m, err := mock.Start("127.0.0.1:0", mock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rd := redistest.Start(t, "--appendonly", "yes")
	spoolDir := t.TempDir()
	cfg := `
listen: 127.0.0.1:0
store: {driver: redis, url: "` + rd.URL() + `", op_timeout: 1s, spool: {path: ` + spoolDir + `}}
connections:
  - {name: openai, provider: openai, base_url: "` + m.URL() + `"}
`
	p := startChronicle(t, cfg)
	auth := []string{"Authorization", "Bearer journal-key", "X-Thread-Id", "t-journal"}
	resp := post(t, "http://"+p.addr+"/openai/v1/chat/completions",
		`{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`, append(auth, "X-Mock-Gate", "journal")...)
	br := bufio.NewReader(resp.Body)
	sseBlock(t, br)
	rd.Kill()
	m.Release("journal")
	var rest strings.Builder
	for {
		line, err := br.ReadString('\n')
		rest.WriteString(line)
		if err != nil {
			break
		}
	}
	resp.Body.Close()
	if !strings.Contains(rest.String(), "data: [DONE]") || strings.Contains(rest.String(), `"error"`) {
		t.Fatalf("the stream with Redis gone: %s", rest.String())
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	if fi, err := os.Stat(filepath.Join(spoolDir, "journal")); err != nil || fi.Size() == 0 {
		t.Fatalf("the journal after the kill: %v %v", fi, err)
	}

	rd.Restart(t)
	p2 := startChronicle(t, cfg)
	body := readAll(t, getURL(t, "http://"+p2.addr+"/api/threads/t-journal", auth[:2]...))
	th := gjson.ParseBytes(body)
	if n := len(th.Get("messages").Array()); n != 2 || th.Get("runs.0.status").String() != "completed" {
		t.Fatalf("the thread after the restart: %s", body)
	}
}
