package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/cmd/mockllm/mock"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/tidwall/gjson"
)

// Tests of resumable runs: the events endpoint replays what a client was
// sent, byte for byte, from any point; runs outlive (detach) or stop with
// (abort) the client that started them; a cancel stops them; tenants see
// only their own runs.

const resumeConfig = `
leases: {ttl: 3s}
connections:
  - {name: openai, provider: openai, base_url: "${MOCK}"}
  - {name: deepseek, provider: deepseek, base_url: "${MOCK}"}
  - {name: gemini, provider: gemini, base_url: "${MOCK}"}
`

// resumeCase is one streamed generate request of a wire format.
type resumeCase struct {
	name, path, body string
	auth             []string
	// last is the terminal event as the provider sends it ("" when the
	// format has no separate marker).
	last string
}

var resumeCases = []resumeCase{
	{"openai", "/openai/v1/chat/completions",
		`{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		[]string{"Authorization", "Bearer k-resume"}, "data: [DONE]\n\n"},
	{"openai-usage", "/openai/v1/chat/completions",
		`{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
		[]string{"Authorization", "Bearer k-resume"}, "data: [DONE]\n\n"},
	{"deepseek", "/deepseek/chat/completions",
		`{"model":"deepseek-chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		[]string{"Authorization", "Bearer k-resume"}, "data: [DONE]\n\n"},
	{"gemini", "/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
		`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
		[]string{"X-Goog-Api-Key", "k-resume"}, ""},
}

func hdrs(base []string, more ...string) []string {
	return append(append([]string(nil), base...), more...)
}

// sseBlocks splits an SSE body into its blocks, each with the blank line
// that ends it.
func sseBlocks(t testing.TB, body []byte) []string {
	t.Helper()
	var blocks []string
	r := bufio.NewReader(strings.NewReader(string(body)))
	var sb strings.Builder
	for {
		line, err := r.ReadString('\n')
		sb.WriteString(line)
		if line == "\n" || line == "\r\n" {
			blocks = append(blocks, sb.String())
			sb.Reset()
		}
		if err == io.EOF {
			break
		}
	}
	if sb.Len() > 0 {
		t.Fatalf("stream ends inside a block: %q", sb.String())
	}
	return blocks
}

// isComment reports whether an SSE block holds only comment lines.
func isComment(block string) bool {
	for _, line := range strings.SplitAfter(block, "\n") {
		if l := strings.TrimRight(line, "\r\n"); l != "" && !strings.HasPrefix(l, ":") {
			return false
		}
	}
	return true
}

// replayed checks that every event of an events-endpoint body is preceded
// by "id: <n>" with n counting on from after, and returns the events with
// those lines removed. Comment blocks (chronicle's heartbeats) are not
// events and are dropped.
func replayed(t testing.TB, body []byte, after int) []string {
	t.Helper()
	var out []string
	n := after
	for _, b := range sseBlocks(t, body) {
		if isComment(b) {
			continue
		}
		n++
		eol := "\n"
		if strings.Contains(b, "\r\n") {
			eol = "\r\n"
		}
		idLine := "id: " + strconv.Itoa(n) + eol
		if !strings.HasPrefix(b, idLine) {
			t.Fatalf("replayed event %d does not start with %q: %q", n, idLine, b)
		}
		out = append(out, strings.TrimPrefix(b, idLine))
	}
	return out
}

// readDataEvent reads SSE blocks until one that is not a comment.
func readDataEvent(t testing.TB, r *bufio.Reader) string {
	t.Helper()
	for {
		if ev := readEvent(t, r); !isComment(ev) {
			return ev
		}
	}
}

// eventsURL is the events endpoint of a run.
func eventsURL(p *testProxy, thread, run string) string {
	return p.URL + "/api/threads/" + thread + "/runs/" + run + "/events"
}

// followTransport fails a follow whose response head does not come: the
// events endpoint sends it at once, even while the run is silent. (A hang
// guard far above any real delay, not a timing assertion.)
var followTransport = &http.Transport{ResponseHeaderTimeout: 20 * time.Second}

// follow opens the run's events endpoint after event `after`, asked the way
// how says: "last-event-id" (the header) or "after" (the query).
func follow(t testing.TB, p *testProxy, auth []string, thread, run, how string, after int) *http.Response {
	t.Helper()
	url := eventsURL(p, thread, run)
	h := hdrs(auth)
	switch how {
	case "last-event-id":
		h = append(h, "Last-Event-ID", strconv.Itoa(after))
	case "after":
		url += "?after=" + strconv.Itoa(after)
	default:
		t.Fatalf("how %q", how)
	}
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
	}
	resp, err := followTransport.RoundTrip(req)
	if err != nil {
		t.Fatalf("GET events: %v", err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET events: %d %s", resp.StatusCode, b)
	}
	return resp
}

func readBody(t testing.TB, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return b
}

// activeRun is GET .../runs/active.
func activeRun(t testing.TB, p *testProxy, auth []string, thread string) (int, gjson.Result) {
	t.Helper()
	resp, body := do(t, "GET", p.URL+"/api/threads/"+thread+"/runs/active", "", auth...)
	return resp.StatusCode, gjson.ParseBytes(body)
}

// threadDoc is GET /api/threads/{t} with any credential.
func threadDoc(t testing.TB, p *testProxy, auth []string, thread string) gjson.Result {
	t.Helper()
	resp, body := do(t, "GET", p.URL+"/api/threads/"+thread, "", auth...)
	if resp.StatusCode != 200 {
		t.Fatalf("GET thread %s: %d %s", thread, resp.StatusCode, body)
	}
	return gjson.ParseBytes(body)
}

// mockRequest returns the recorded upstream request that carried the gate.
func mockRequest(t testing.TB, m *mock.Server, gate string) mock.Request {
	t.Helper()
	for _, r := range m.Requests() {
		if r.Header.Get("X-Mock-Gate") == gate {
			return r
		}
	}
	t.Fatalf("the upstream never saw the request with gate %q", gate)
	return mock.Request{}
}

// waitUpstreamDone waits (bounded, as a hang guard, not a timing assertion)
// until the upstream has finished n requests.
func waitUpstreamDone(t testing.TB, m *mock.Server, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.WaitRequests(ctx, n); err != nil {
		t.Fatal(err)
	}
}

// TestResumeReconnect: a client that drops after the first event and
// reconnects to the events endpoint (Last-Event-ID: 1, or ?after=1) while
// the run is still held open upstream receives the rest live, and what it
// got in total is byte-identical to an uninterrupted stream of the same
// request. Once the run has ended, a replay from any N is the rest of that
// stream, and a replay from the start is the whole of it, each event under
// "id: <n>", the terminal [DONE] included.
func TestResumeReconnect(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			// No heartbeat comes to the rescue: a follower's head must not
			// wait for one.
			p := startProxyWith(t, m, resumeConfig+"limits: {heartbeat: 1h}\n", b.open(t))
			for _, c := range resumeCases {
				for _, how := range []string{"last-event-id", "after"} {
					t.Run(c.name+"/"+how, func(t *testing.T) {
						thread := "t-resume-" + c.name + "-" + how
						resp, whole := do(t, "POST", p.URL+c.path, c.body, hdrs(c.auth, "X-Thread-Id", thread+"-ref")...)
						if resp.StatusCode != 200 {
							t.Fatalf("uninterrupted stream: %d %s", resp.StatusCode, whole)
						}
						want := sseBlocks(t, whole)
						if c.last != "" && want[len(want)-1] != c.last {
							t.Fatalf("uninterrupted stream ends with %q", want[len(want)-1])
						}

						gate := thread
						resp = send(t, "POST", p.URL+c.path, c.body,
							hdrs(c.auth, "X-Thread-Id", thread, "X-Mock-Gate", gate, "X-On-Disconnect", "detach")...)
						runID := resp.Header.Get("X-Run-Id")
						if resp.StatusCode != 200 || runID == "" {
							t.Fatalf("stream: %d, X-Run-Id %q", resp.StatusCode, runID)
						}
						first := readEvent(t, bufio.NewReader(resp.Body))
						resp.Body.Close() // the client drops after one event

						code, active := activeRun(t, p, c.auth, thread)
						if code != 200 || active.Get("id").String() != runID || active.Get("status").String() != "running" {
							t.Fatalf("runs/active: %d %s (want run %s running)", code, active.Raw, runID)
						}
						fol := follow(t, p, c.auth, thread, runID, how, 1)
						m.Release(gate)
						rest := replayed(t, readBody(t, fol), 1)
						if got := first + strings.Join(rest, ""); got != string(whole) {
							t.Fatalf("first event + resumed rest differs from the uninterrupted stream:\ngot  %q\nwant %q", got, whole)
						}

						// The run has ended: replay from the start, the edges
						// and the middle (and past the end: nothing).
						for _, n := range []int{0, 1, 2, len(want) / 2, len(want) - 1, len(want), len(want) + 5} {
							got := replayed(t, readBody(t, follow(t, p, c.auth, thread, runID, how, n)), n)
							from := min(n, len(want))
							if strings.Join(got, "") != strings.Join(want[from:], "") {
								t.Fatalf("replay after %d: got %d events %q, want %q", n, len(got), got, want[from:])
							}
						}
						if st := threadDoc(t, p, c.auth, thread).Get("runs.0.status").String(); st != "completed" {
							t.Fatalf("resumed run status %q", st)
						}
					})
				}
			}
		})
	}
}

// TestStreamLogTailGoesWithFinish: the events a stream's log still holds
// when its run ends are stored by the run's finish, in the same step, so
// the client's last event waits for one store write, not two. With a batch
// window far longer than the stream (no chunk delay), it makes no event-log write of
// its own, and its replay is still whole.
func TestStreamLogTailGoesWithFinish(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			p := startProxyWith(t, m, resumeConfig+"store: {event_batch_window: 1s}\n", b.open(t))
			for _, c := range resumeCases {
				thread := "t-tail-" + c.name
				// 20 deltas: fewer events than make a batch due at once.
				resp, whole := do(t, "POST", p.URL+c.path, c.body, hdrs(c.auth, "X-Thread-Id", thread, "X-Mock-Scenario", "synthetic", "X-Mock-Chunks", "20")...)
				runID := resp.Header.Get("X-Run-Id")
				if resp.StatusCode != 200 || runID == "" {
					t.Fatalf("%s: stream %d, X-Run-Id %q: %s", c.name, resp.StatusCode, runID, whole)
				}
				want := sseBlocks(t, whole)
				got := replayed(t, readBody(t, follow(t, p, c.auth, thread, runID, "after", 0)), 0)
				if strings.Join(got, "") != strings.Join(want, "") {
					t.Fatalf("%s: replay has %d events %q, want %q", c.name, len(got), got, want)
				}
			}
			_, metrics := do(t, "GET", p.URL+"/metrics", "")
			// The series exists from the start, at 0.
			if !strings.Contains(string(metrics), `chronicle_store_operation_seconds_count{op="append_events"} 0`) {
				t.Fatalf("short streams wrote their event logs apart from their finish:\n%s", grepLines(string(metrics), "chronicle_store_operation_seconds_count"))
			}
			if want := fmt.Sprintf(`chronicle_store_operation_seconds_count{op="finish"} %d`, len(resumeCases)); !strings.Contains(string(metrics), want) {
				t.Fatalf("metrics lack %s:\n%s", want, grepLines(string(metrics), "chronicle_store_operation_seconds_count"))
			}
		})
	}
}

// grepLines returns text's lines that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestResumeSkipsComments: SSE comments the upstream sends (DeepSeek's
// ": keep-alive") reach the live client but are not events: the replay is
// the live stream without them, and ids count events only.
func TestResumeSkipsComments(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			p := startProxyWith(t, m, resumeConfig, b.open(t))
			auth := []string{"Authorization", "Bearer k-comments"}
			resp, live := do(t, "POST", p.URL+"/deepseek/chat/completions",
				`{"model":"deepseek-reasoner","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
				hdrs(auth, "X-Thread-Id", "t-comments", "X-Mock-Scenario", "text.keepalive")...)
			if resp.StatusCode != 200 {
				t.Fatalf("stream: %d %s", resp.StatusCode, live)
			}
			var want []string
			comments := 0
			for _, b := range sseBlocks(t, live) {
				if isComment(b) {
					comments++
					continue
				}
				want = append(want, b)
			}
			if comments == 0 {
				t.Fatal("the scenario sent no comment; the test proves nothing")
			}
			got := replayed(t, readBody(t, follow(t, p, auth, "t-comments", resp.Header.Get("X-Run-Id"), "after", 0)), 0)
			if strings.Join(got, "") != strings.Join(want, "") {
				t.Fatalf("replay %q\nwant %q", got, want)
			}
		})
	}
}

// TestResumeAbortOnDisconnect: by default a client that leaves stops the
// run: the upstream request is cancelled, the run ends aborted
// (client_disconnected), the events sent so far stay replayable, and the
// transcript holds only the pending input. A short heartbeat is what finds
// the client gone while the upstream is silent.
func TestResumeAbortOnDisconnect(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			p := startProxyWith(t, m, resumeConfig+"limits: {heartbeat: 20ms}\n", b.open(t))
			c := resumeCases[0]
			resp := send(t, "POST", p.URL+c.path, c.body, hdrs(c.auth, "X-Thread-Id", "t-abort", "X-Mock-Gate", "abort")...)
			runID := resp.Header.Get("X-Run-Id")
			first := readDataEvent(t, bufio.NewReader(resp.Body))
			resp.Body.Close()

			waitUpstreamDone(t, m, 1)
			if r := mockRequest(t, m, "abort"); !r.Canceled {
				t.Fatalf("the upstream request was not cancelled: %+v", r)
			}
			// Following an ended run replays it and ends.
			got := replayed(t, readBody(t, follow(t, p, c.auth, "t-abort", runID, "after", 0)), 0)
			if len(got) != 1 || got[0] != first {
				t.Fatalf("replay of the aborted run: %q, want [%q]", got, first)
			}
			th := threadDoc(t, p, c.auth, "t-abort")
			run := th.Get("runs.0")
			if run.Get("status").String() != "aborted" || run.Get("reason").String() != "client_disconnected" {
				t.Fatalf("run: %s", run.Raw)
			}
			if n := len(th.Get("messages").Array()); n != 1 {
				t.Fatalf("the aborted run left %d messages, want the pending input only: %s", n, th.Get("messages").Raw)
			}
			if code, _ := activeRun(t, p, c.auth, "t-abort"); code != 404 {
				t.Fatalf("runs/active after the abort: %d", code)
			}
		})
	}
}

// TestResumeDetachedRunStored: with X-On-Disconnect: detach, a client that
// closes after the first event does not stop the run: it is read to its end
// and its transcript stored after the client left.
func TestResumeDetachedRunStored(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			// The short heartbeat makes sure the proxy notices the client
			// left while the upstream is held, and carries on anyway.
			p := startProxyWith(t, m, resumeConfig+"limits: {heartbeat: 20ms}\n", b.open(t))
			c := resumeCases[0]
			resp := send(t, "POST", p.URL+c.path, c.body,
				hdrs(c.auth, "X-Thread-Id", "t-detach", "X-Mock-Gate", "detach", "X-On-Disconnect", "detach")...)
			runID := resp.Header.Get("X-Run-Id")
			readDataEvent(t, bufio.NewReader(resp.Body))
			resp.Body.Close()
			m.Release("detach")

			body := readBody(t, follow(t, p, c.auth, "t-detach", runID, "last-event-id", 0))
			events := replayed(t, body, 0)
			if len(events) < 3 || events[len(events)-1] != c.last {
				t.Fatalf("replay of the detached run: %q", events)
			}
			if r := mockRequest(t, m, "detach"); r.Canceled || !r.Done {
				t.Fatalf("the detached run's upstream request: %+v", r)
			}
			th := threadDoc(t, p, c.auth, "t-detach")
			if st := th.Get("runs.0.status").String(); st != "completed" {
				t.Fatalf("detached run: %s", th.Get("runs.0").Raw)
			}
			msgs := th.Get("messages").Array()
			reply := assembledStream(t, openAIAdapter, []byte(strings.Join(events, "")))
			if len(msgs) != 2 || msgs[1].Raw != string(reply) {
				t.Fatalf("stored transcript %s, want the user message and %s", th.Get("messages").Raw, reply)
			}
		})
	}
}

// TestStreamReplyStoredWhenUsageAdded: for a stream whose client did not
// ask for usage (chronicle adds stream_options.include_usage and strips what
// that added), the stored reply is the one the client assembles from what it
// was sent.
func TestStreamReplyStoredWhenUsageAdded(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			p := startProxyWith(t, m, resumeConfig, b.open(t))
			c := resumeCases[0]
			resp, body := do(t, "POST", p.URL+c.path, c.body, hdrs(c.auth, "X-Thread-Id", "t-added-usage")...)
			if resp.StatusCode != 200 {
				t.Fatalf("stream: %d %s", resp.StatusCode, body)
			}
			if n := len(m.Requests()); n != 1 || !gjson.GetBytes(m.Requests()[0].Body, "stream_options.include_usage").Bool() {
				t.Fatalf("chronicle did not add include_usage upstream; the test proves nothing")
			}
			want := assembledStream(t, openAIAdapter, body)
			th := threadDoc(t, p, c.auth, "t-added-usage")
			got := th.Get("messages.1").Raw
			// (Once broken: stripping edited the event in place before the
			// assembler read its Data, and the stored reply was empty.)
			if got != string(want) {
				t.Fatalf("stored reply %s\nwant %s", got, want)
			}
		})
	}
}

// TestResumeCancel: POST .../cancel on the replica that relays the run stops
// it at once: the client's stream ends with a run_cancelled error event, the
// upstream request is cancelled, a follower's stream ends, the run is
// aborted (cancelled). Cancelling an ended run changes nothing.
func TestResumeCancel(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			p := startProxyWith(t, m, resumeConfig, b.open(t))
			c := resumeCases[0]
			resp := send(t, "POST", p.URL+c.path, c.body, hdrs(c.auth, "X-Thread-Id", "t-cancel", "X-Mock-Gate", "cancel")...)
			runID := resp.Header.Get("X-Run-Id")
			client := bufio.NewReader(resp.Body)
			first := readEvent(t, client)

			fol := follow(t, p, c.auth, "t-cancel", runID, "after", 0)
			folr := bufio.NewReader(fol.Body)
			if ev := readEvent(t, folr); ev != "id: 1\n"+first {
				t.Fatalf("follower's first event %q", ev)
			}
			cr, cbody := do(t, "POST", p.URL+"/api/threads/t-cancel/runs/"+runID+"/cancel", "", c.auth...)
			if cr.StatusCode != 202 || gjson.GetBytes(cbody, "id").String() != runID {
				t.Fatalf("cancel: %d %s", cr.StatusCode, cbody)
			}
			rest, err := io.ReadAll(client)
			resp.Body.Close()
			if err != nil || !strings.Contains(string(rest), "run_cancelled") || strings.Contains(string(rest), "[DONE]") {
				t.Fatalf("client's stream after the cancel: %q, %v", rest, err)
			}
			// The follower sees what the run's client saw: the cancel event.
			if tail, err := io.ReadAll(folr); err != nil || len(replayed(t, tail, 1)) != 1 || !strings.Contains(string(tail), "run_cancelled") {
				t.Fatalf("follower after the cancel: %q, %v", tail, err)
			}
			fol.Body.Close()
			waitUpstreamDone(t, m, 1)
			if r := mockRequest(t, m, "cancel"); !r.Canceled {
				t.Fatalf("upstream request not cancelled: %+v", r)
			}
			run := threadDoc(t, p, c.auth, "t-cancel").Get("runs.0")
			if run.Get("status").String() != "aborted" || run.Get("reason").String() != "cancelled" {
				t.Fatalf("run: %s", run.Raw)
			}
			cr, cbody = do(t, "POST", p.URL+"/api/threads/t-cancel/runs/"+runID+"/cancel", "", c.auth...)
			if cr.StatusCode != 202 || gjson.GetBytes(cbody, "status").String() != "aborted" {
				t.Fatalf("cancel of an ended run: %d %s", cr.StatusCode, cbody)
			}
			cr, cbody = do(t, "POST", p.URL+"/api/threads/t-cancel/runs/no-such-run/cancel", "", c.auth...)
			if cr.StatusCode != 404 {
				t.Fatalf("cancel of an unknown run: %d %s", cr.StatusCode, cbody)
			}
		})
	}
}

// TestResumeCancelledReplayMatchesLive: the event log holds the events as
// forwarded to the client, so a cancelled run's replay ends with the same
// run_cancelled error event its client saw.
func TestResumeCancelledReplayMatchesLive(t *testing.T) {
	m := startMock(t)
	p := startProxyWith(t, m, resumeConfig, openEmbedded(t, t.TempDir()))
	c := resumeCases[0]
	resp := send(t, "POST", p.URL+c.path, c.body, hdrs(c.auth, "X-Thread-Id", "t-cancel-log", "X-Mock-Gate", "cancel-log")...)
	runID := resp.Header.Get("X-Run-Id")
	client := bufio.NewReader(resp.Body)
	first := readEvent(t, client)
	if cr, b := do(t, "POST", p.URL+"/api/threads/t-cancel-log/runs/"+runID+"/cancel", "", c.auth...); cr.StatusCode != 202 {
		t.Fatalf("cancel: %d %s", cr.StatusCode, b)
	}
	rest, _ := io.ReadAll(client)
	resp.Body.Close()
	live := first + string(rest)
	got := strings.Join(replayed(t, readBody(t, follow(t, p, c.auth, "t-cancel-log", runID, "after", 0)), 0), "")
	if got == live {
		return
	}
	if got == first && strings.Contains(string(rest), "run_cancelled") {
		t.Fatalf("chronicle's own error event is missing from the replay: %q", rest)
	}
	t.Fatalf("replay %q\nlive   %q", got, live)
}

// TestResumeHeartbeatEndsWithReplay: the events endpoint's heartbeat never
// writes after the replay ended (the response writer then belongs to the
// server again; -race catches a late write), and heartbeats are comments,
// never events.
func TestResumeHeartbeatEndsWithReplay(t *testing.T) {
	m := startMock(t)
	p := startProxyWith(t, m, resumeConfig+"limits: {heartbeat: 1ms}\n", openEmbedded(t, t.TempDir()))
	c := resumeCases[0]
	resp, live := do(t, "POST", p.URL+c.path, c.body, hdrs(c.auth, "X-Thread-Id", "t-beat")...)
	runID := resp.Header.Get("X-Run-Id")
	var want []string
	for _, b := range sseBlocks(t, live) {
		if !isComment(b) {
			want = append(want, b)
		}
	}
	for i := 0; i < 100; i++ {
		got := replayed(t, readBody(t, follow(t, p, c.auth, "t-beat", runID, "after", 0)), 0)
		if strings.Join(got, "") != strings.Join(want, "") {
			t.Fatalf("replay %d: %d events, want %d", i, len(got), len(want))
		}
	}
}

// TestResumeTenants: a client key reads and cancels only its own tenant's
// runs. Another tenant's thread, active run, events and cancel are 404 —
// also when that tenant has a thread of the same id — and its cancel does
// not touch the run.
func TestResumeTenants(t *testing.T) {
	cfg := `
leases: {ttl: 3s}
clients:
  - {key: key-a, tenant: tenant-a}
  - {key: key-b, tenant: tenant-b}
connections:
  - {name: openai, provider: openai, base_url: "${MOCK}", keys: [upstream-1]}
`
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			p := startProxyWith(t, m, cfg, b.open(t))
			a, bKey := []string{"Authorization", "Bearer key-a"}, []string{"Authorization", "Bearer key-b"}
			c := resumeCases[0]
			resp := send(t, "POST", p.URL+c.path, c.body, hdrs(a, "X-Thread-Id", "t-shared", "X-Mock-Gate", "tenants")...)
			runID := resp.Header.Get("X-Run-Id")
			client := bufio.NewReader(resp.Body)
			readEvent(t, client)

			runURL := p.URL + "/api/threads/t-shared/runs/" + runID
			check := func(when string) {
				t.Helper()
				for _, q := range []struct{ method, url string }{
					{"GET", p.URL + "/api/threads/t-shared/runs/active"},
					{"GET", runURL + "/events"},
					{"GET", runURL + "/events?after=1"},
					{"POST", runURL + "/cancel"},
				} {
					r, body := do(t, q.method, q.url, "", bKey...)
					if r.StatusCode != 404 {
						t.Fatalf("%s: tenant b: %s %s → %d %s, want 404", when, q.method, q.url, r.StatusCode, body)
					}
				}
			}
			if r, body := do(t, "GET", p.URL+"/api/threads/t-shared", "", bKey...); r.StatusCode != 404 {
				t.Fatalf("tenant b read tenant a's thread: %d %s", r.StatusCode, body)
			}
			check("before b has the thread")
			// Tenant b's own thread of the same id is independent of a's
			// run (no thread_busy), and still shows nothing of a's.
			if r, body := do(t, "POST", p.URL+c.path, `{"model":"gpt-4o","messages":[{"role":"user","content":"mine"}]}`, hdrs(bKey, "X-Thread-Id", "t-shared")...); r.StatusCode != 200 {
				t.Fatalf("tenant b on its own thread: %d %s", r.StatusCode, body)
			}
			check("after b has the thread")
			if r, _ := do(t, "GET", runURL+"/events", "", "Authorization", "Bearer nobody"); r.StatusCode != 401 {
				t.Fatalf("unknown client key: %d", r.StatusCode)
			}
			if r, _ := do(t, "GET", runURL+"/events", ""); r.StatusCode != 401 {
				t.Fatalf("no credential: %d", r.StatusCode)
			}

			// Tenant a's run was not cancelled by b.
			if code, active := activeRun(t, p, a, "t-shared"); code != 200 || active.Get("id").String() != runID || active.Get("status").String() != "running" {
				t.Fatalf("tenant a's run after b's attempts: %d %s", code, active.Raw)
			}
			m.Release("tenants")
			rest, _ := io.ReadAll(client)
			resp.Body.Close()
			if !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
				t.Fatalf("tenant a's stream did not complete: %q", rest)
			}
			if st := threadDoc(t, p, a, "t-shared").Get("runs.0.status").String(); st != "completed" {
				t.Fatalf("tenant a's run: %s", st)
			}
			if n := len(threadDoc(t, p, bKey, "t-shared").Get("runs").Array()); n != 1 {
				t.Fatalf("tenant b's thread has %d runs", n)
			}
		})
	}
}

// TestResumeManyFollowers: 1,000 followers of one run each get every event,
// in order, byte for byte what the run's client got, on both stores (a
// replica shares one store follower per run among its followers). It logs
// the memory each follower costs (client and server side together, both in
// this process).
func TestResumeManyFollowers(t *testing.T) {
	followers := 1000
	if testing.Short() {
		followers = 100
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { manyFollowers(t, b.open(t), followers) })
	}
}

func manyFollowers(t *testing.T, st store.Store, followers int) {
	m := startMock(t)
	// A long lease: under -race on two CPUs, 1,000 followers can slow the
	// run's renewals past a 3s lease, and a swept run ends every follower.
	p := startProxyWith(t, m, strings.Replace(resumeConfig, "ttl: 3s", "ttl: 30s", 1), st)
	auth := []string{"Authorization", "Bearer k-many"}
	resp := send(t, "POST", p.URL+"/openai/v1/chat/completions",
		`{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		hdrs(auth, "X-Thread-Id", "t-many", "X-Mock-Gate", "many", "X-Mock-Scenario", "synthetic", "X-Mock-Chunks", "200")...)
	runID := resp.Header.Get("X-Run-Id")
	client := bufio.NewReader(resp.Body)
	first := readEvent(t, client)

	before := memSample()
	addr := strings.TrimPrefix(p.URL, "http://")
	path := "/api/threads/t-many/runs/" + runID + "/events"
	var connected, finished sync.WaitGroup
	connected.Add(followers)
	finished.Add(followers)
	got := make([][]string, followers)
	errs := make([]error, followers)
	for i := 0; i < followers; i++ {
		go func(i int) {
			defer finished.Done()
			once := sync.OnceFunc(connected.Done)
			defer once()
			got[i], errs[i] = rawFollow(addr, path, "k-many", once)
		}(i)
	}
	connected.Wait() // every follower has its first event
	after := memSample()
	m.Release("many")
	rest, err := io.ReadAll(client)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var want []string // what the client got, without chronicle's heartbeats
	for _, b := range sseBlocks(t, []byte(first+string(rest))) {
		if !isComment(b) {
			want = append(want, b)
		}
	}
	finished.Wait()
	run := threadDoc(t, p, auth, "t-many").Get("runs.0")
	for i := range got {
		if errs[i] != nil {
			t.Fatalf("follower %d: %v", i, errs[i])
		}
		if len(got[i]) != len(want) {
			t.Fatalf("follower %d got %d events, want %d; the run: %s", i, len(got[i]), len(want), run.Raw)
		}
		for j := range want {
			if got[i][j] != "id: "+strconv.Itoa(j+1)+"\n"+want[j] {
				t.Fatalf("follower %d event %d: %q, want %q", i, j+1, got[i][j], want[j])
			}
		}
	}
	n := float64(followers)
	t.Logf("%d followers of %d events: per follower heap in use %+.1f KiB, RSS %+.1f KiB, goroutines %+.1f (client side included)",
		followers, len(want), float64(after.heap-before.heap)/1024/n, float64(after.rss-before.rss)/1024/n, float64(after.goroutines-before.goroutines)/n)
}

type mem struct{ heap, rss, goroutines int64 }

func memSample() mem {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return mem{heap: int64(ms.HeapInuse), rss: rssBytes(), goroutines: int64(runtime.NumGoroutine())}
}

// rssBytes is the process's resident set (Linux), 0 where unknown.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// rawFollow is a lean follower: one TCP connection, one small read buffer.
// It calls firstEvent once the first event arrived and returns every event
// block (id line included) until the stream ends.
func rawFollow(addr, path, key string, firstEvent func()) ([]string, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: chronicle\r\nAuthorization: Bearer %s\r\n\r\n", path, key); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 2048), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	r := bufio.NewReaderSize(resp.Body, 2048)
	var events []string
	var sb strings.Builder
	for {
		line, err := r.ReadString('\n')
		sb.WriteString(line)
		if line == "\n" {
			if b := sb.String(); !isComment(b) {
				events = append(events, b)
				if len(events) == 1 {
					firstEvent()
				}
			}
			sb.Reset()
		}
		if err == io.EOF {
			if sb.Len() > 0 {
				return events, fmt.Errorf("stream ends inside a block: %q", sb.String())
			}
			return events, nil
		}
		if err != nil {
			return events, err
		}
	}
}

// TestResumeFollowOutlivesWriteTimeout: limits.write_timeout bounds one
// write, not a whole stream: a follower of a run that stays open longer than
// it keeps its connection (the heartbeats it counts are the clock: 40 of
// them at 50ms is at least 1.95s, past the 1s write timeout) and then gets
// the rest of the run.
func TestResumeFollowOutlivesWriteTimeout(t *testing.T) {
	m := startMock(t)
	p := startProxyWith(t, m, resumeConfig+"limits: {heartbeat: 50ms, write_timeout: 1s}\n", openEmbedded(t, t.TempDir()))
	c := resumeCases[0]
	resp := send(t, "POST", p.URL+c.path, c.body, hdrs(c.auth, "X-Thread-Id", "t-long", "X-Mock-Gate", "long")...)
	runID := resp.Header.Get("X-Run-Id")
	client := bufio.NewReader(resp.Body)
	readDataEvent(t, client)

	fol := follow(t, p, c.auth, "t-long", runID, "after", 1)
	r := bufio.NewReader(fol.Body)
	for beats := 0; beats < 40; {
		ev := readEvent(t, r)
		if !isComment(ev) {
			t.Fatalf("an event while the run is held: %q", ev)
		}
		beats++
	}
	m.Release("long")
	var live []string
	for {
		line, err := client.ReadString('\n')
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, line)
	}
	resp.Body.Close()
	var want []string
	for _, b := range sseBlocks(t, []byte(strings.Join(live, ""))) {
		if !isComment(b) {
			want = append(want, b)
		}
	}
	rest, err := io.ReadAll(r)
	fol.Body.Close()
	if err != nil {
		t.Fatalf("the follower's stream broke: %v", err)
	}
	if got := replayed(t, rest, 1); strings.Join(got, "") != strings.Join(want, "") {
		t.Fatalf("follower got %d events after the wait, the client %d", len(got), len(want))
	}
}
