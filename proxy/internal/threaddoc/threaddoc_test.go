package threaddoc

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
)

// TestAppend: stored messages are spliced in byte for byte (spacing and
// "&" kept), with oneLine only raw newlines go, and every run key is
// present.
func TestAppend(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.FixedZone("x", 3600))
	msg := `{"role":"user",  "content":"a & b <c>"}`
	pretty := "{\n  \"role\": \"assistant\",\n  \"content\": \"one\\ntwo\"\n}"
	th := store.Thread{Key: store.Key{Tenant: "t", Thread: "th"}, Connection: "openai", Format: "openai-chat",
		CreatedAt: at, UpdatedAt: at, Version: 3, Messages: [][]byte{[]byte(msg), []byte(pretty)}}
	runs := []store.Run{{ID: "r1", Status: store.Completed, StartedAt: at, FinishedAt: at, Error: []byte("not json"),
		Usage: &store.Usage{InputTokens: 1, OutputTokens: 2}}}

	doc := string(Append(nil, th, runs, false))
	if !strings.Contains(doc, `"messages":[`+msg+`,`+pretty+`]`) {
		t.Fatalf("messages not spliced byte for byte:\n%s", doc)
	}
	line := string(Append(nil, th, runs, true))
	if strings.Contains(line, "\n") || !strings.Contains(line, msg) {
		t.Fatalf("one line:\n%s", line)
	}
	var got struct {
		ID, Tenant, CreatedAt string `json:"-"`
		Runs                  []map[string]json.RawMessage
	}
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatal(err)
	}
	r := got.Runs[0]
	for _, k := range []string{"id", "status", "reason", "model", "started_at", "finished_at", "usage", "error", "interrupts",
		"interrupted_calls", "repairs", "restored", "session_id", "resumed_by", "partial"} {
		if _, ok := r[k]; !ok {
			t.Errorf("run document lacks %q", k)
		}
	}
	if string(r["started_at"]) != `"2026-01-02T02:04:05.006Z"` || string(r["error"]) != `"not json"` || string(r["repairs"]) != `[]` {
		t.Errorf("run document: started_at %s, error %s, repairs %s", r["started_at"], r["error"], r["repairs"])
	}
	if !strings.HasPrefix(doc, `{"id":"th","tenant":"t","connection":"openai","format":"openai-chat","created_at":"2026-01-02T02:04:05.006Z"`) {
		t.Errorf("head: %s", doc[:100])
	}
}
