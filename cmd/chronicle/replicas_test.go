package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/cmd/mockllm/mock"
	"github.com/chronicle-proxy/chronicle/store/redistest"
	"github.com/tidwall/gjson"
)

// getURL sends a GET and returns the response with its body unread.
func getURL(t *testing.T, url string, headers ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// sseBlock reads one SSE block (through its blank line), skipping comments.
func sseBlock(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	for {
		var sb strings.Builder
		for {
			line, err := r.ReadString('\n')
			sb.WriteString(line)
			if err != nil {
				t.Fatalf("read event: %v (so far %q)", err, sb.String())
			}
			if line == "\n" || line == "\r\n" {
				break
			}
		}
		if b := sb.String(); !strings.HasPrefix(b, ":") {
			return b
		}
	}
}

// waitDone waits, bounded as a hang guard, until the mock finished n requests.
func waitDone(t *testing.T, m *mock.Server, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.WaitRequests(ctx, n); err != nil {
		t.Fatal(err)
	}
}

// TestReplicasFollowAndCancel: two chronicle processes share one Redis. A
// stream started on A is visible and followed on B; a cancel sent to B stops
// it on A (which notices on its next lease renewal): A's upstream request is
// cancelled, A's client gets run_cancelled, B's follower ends, and the run is
// aborted. A run that completes on A is replayed on B byte for byte.
func TestReplicasFollowAndCancel(t *testing.T) {
	rds := redistest.Start(t)
	m, err := mock.Start("127.0.0.1:0", mock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cfg := `
listen: 127.0.0.1:0
store: {driver: redis, url: "` + rds.URL() + `"}
leases: {ttl: 3s}
connections:
  - {name: openai, provider: openai, base_url: "` + m.URL() + `"}
`
	a, b := startChronicle(t, cfg), startChronicle(t, cfg)
	urlA, urlB := "http://"+a.addr, "http://"+b.addr
	auth := []string{"Authorization", "Bearer replica-key"}
	body := `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`

	// A stream on A, held open upstream after its first event.
	resp := post(t, urlA+"/openai/v1/chat/completions", body, append(auth, "X-Thread-Id", "t-replicas", "X-Mock-Gate", "replicas")...)
	runID := resp.Header.Get("X-Run-Id")
	if resp.StatusCode != 200 || runID == "" {
		t.Fatalf("stream on A: %d, X-Run-Id %q", resp.StatusCode, runID)
	}
	client := bufio.NewReader(resp.Body)
	first := sseBlock(t, client)

	// B sees the run as active and follows it.
	act := getURL(t, urlB+"/api/threads/t-replicas/runs/active", auth...)
	if doc := gjson.ParseBytes(readAll(t, act)); act.StatusCode != 200 || doc.Get("id").String() != runID {
		t.Fatalf("runs/active on B: %d %s", act.StatusCode, doc.Raw)
	}
	fol := getURL(t, urlB+"/api/threads/t-replicas/runs/"+runID+"/events", auth...)
	if fol.StatusCode != 200 {
		t.Fatalf("events on B: %d %s", fol.StatusCode, readAll(t, fol))
	}
	folr := bufio.NewReader(fol.Body)
	if ev := sseBlock(t, folr); ev != "id: 1\n"+first {
		t.Fatalf("B's first event %q, A's client got %q", ev, first)
	}

	// Cancel on B.
	cr := post(t, urlB+"/api/threads/t-replicas/runs/"+runID+"/cancel", "", auth...)
	if doc := gjson.ParseBytes(readAll(t, cr)); cr.StatusCode != 202 || doc.Get("id").String() != runID {
		t.Fatalf("cancel on B: %d %s", cr.StatusCode, doc.Raw)
	}
	waitDone(t, m, 1)
	if r := m.Requests()[0]; !r.Canceled {
		t.Fatalf("A's upstream request was not cancelled: %+v", r)
	}
	rest, err := io.ReadAll(client)
	resp.Body.Close()
	if err != nil || !strings.Contains(string(rest), "run_cancelled") || strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("A's client after the cancel: %q, %v", rest, err)
	}
	tail, err := io.ReadAll(folr)
	fol.Body.Close()
	if err != nil || strings.Contains(string(tail), "data:") && !strings.Contains(string(tail), "run_cancelled") {
		t.Fatalf("B's follower after the cancel: %q, %v", tail, err)
	}
	for _, url := range []string{urlA, urlB} {
		th := gjson.ParseBytes(readAll(t, getURL(t, url+"/api/threads/t-replicas", auth...)))
		if run := th.Get("runs.0"); run.Get("status").String() != "aborted" || run.Get("reason").String() != "cancelled" {
			t.Fatalf("run seen from %s: %s", url, run.Raw)
		}
	}

	// A run that completes on A, followed on B from its first event on.
	resp = post(t, urlA+"/openai/v1/chat/completions", body, append(auth, "X-Thread-Id", "t-replicas-2", "X-Mock-Gate", "replicas-2")...)
	runID = resp.Header.Get("X-Run-Id")
	client = bufio.NewReader(resp.Body)
	first = sseBlock(t, client)
	fol = getURL(t, urlB+"/api/threads/t-replicas-2/runs/"+runID+"/events", append(auth, "Last-Event-ID", "1")...)
	m.Release("replicas-2")
	rest, err = io.ReadAll(client)
	resp.Body.Close()
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("A's stream: %q, %v", rest, err)
	}
	replay := readAll(t, fol)
	var got strings.Builder
	n := 1
	for _, block := range strings.SplitAfter(string(replay), "\n\n") {
		if block == "" || strings.HasPrefix(block, ":") {
			continue
		}
		n++
		id := "id: " + strconv.Itoa(n) + "\n"
		if !strings.HasPrefix(block, id) {
			t.Fatalf("B's replayed event %d: %q", n, block)
		}
		got.WriteString(strings.TrimPrefix(block, id))
	}
	if got.String() != string(rest) {
		t.Fatalf("B's replay after event 1 differs from what A's client got:\nB %q\nA %q", got.String(), rest)
	}
}
