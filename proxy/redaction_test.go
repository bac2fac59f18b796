package proxy

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/store"
)

const redactConfig = `
leases: {ttl: 3s}
admin: {token: adm}
clients: [{key: ck, tenant: t1}]
connections:
  - name: openai
    provider: openai
    base_url: "${MOCK}"
    keys: [up]
    audit: {upstream_body: true}
    redact:
      paths: [name]
      patterns: [{name: email, regex: '[a-z]+@example\.com'}, {name: harmony, regex: 'Harmony'}]
  - {name: plain, provider: openai, base_url: "${MOCK}", keys: [up], audit: {upstream_body: true}}
`

// TestRedaction: a connection's redaction masks what is stored of a turn
// (messages, the stored answer, the audited upstream body, the event
// log) and never what goes upstream or back to the client; the run lists
// what was masked, without the text. A stored message keeps the hash of
// the original, so a client that sends its whole history again (replace)
// matches the stored prefix and the prefix is not written again (the
// second run masks only its own messages); an append turn sends the
// stored, masked, history upstream.
func TestRedaction(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			st := b.open(t)
			p := startProxyWith(t, m, redactConfig, st)
			auth := []string{"Authorization", "Bearer ck"}
			adm := []string{"Authorization", "Bearer adm"}
			url := p.URL + "/openai/v1/chat/completions"
			user := `{"role":"user","name":"alice","content":"mail bob@example.com please"}`
			secrets := []string{"alice", "bob@example.com", "Harmony"}
			lastUpstream := func() string {
				reqs := m.Requests()
				return string(reqs[len(reqs)-1].Body)
			}
			noSecrets := func(what, s string) {
				t.Helper()
				for _, x := range secrets {
					if strings.Contains(s, x) {
						t.Fatalf("%s holds %q:\n%s", what, x, s)
					}
				}
			}

			// A non-stream turn.
			resp, body := do(t, "POST", url, `{"model":"gpt-4o","messages":[`+user+`]}`, hdrs(auth, "X-Thread-Id", "t-red", "X-Mock-Scenario", "text")...)
			if resp.StatusCode != 200 || !strings.Contains(string(body), "Harmony") {
				t.Fatalf("turn 1: %d %s", resp.StatusCode, body)
			}
			if up := lastUpstream(); !strings.Contains(up, "bob@example.com") || !strings.Contains(up, `"name":"alice"`) {
				t.Fatalf("the upstream did not get the original: %s", up)
			}
			reply, err := openAIAdapter.ParseResponse(body)
			if err != nil {
				t.Fatal(err)
			}
			harmonies := int64(strings.Count(string(reply.Message), "Harmony"))
			run1 := resp.Header.Get("X-Run-Id")
			th := apiThreadAuth(t, p, auth, "t-red")
			noSecrets("the stored thread", th.Raw)
			msgs := th.Get("messages").Array()
			if len(msgs) != 2 || msgs[0].Raw != `{"role":"user","name":"[REDACTED]","content":"mail [REDACTED] please"}` ||
				!strings.Contains(msgs[1].Raw, "[REDACTED] Day") {
				t.Fatalf("stored messages: %s", th.Get("messages").Raw)
			}
			want := `[{"rule":"path:name","count":1},{"rule":"pattern:email","count":1},{"rule":"pattern:harmony","count":` + itoa64(harmonies) + `}]`
			if got := th.Get("runs.0.redactions").Raw; got != want {
				t.Fatalf("run 1 redactions = %s, want %s", got, want)
			}
			resp, body = do(t, "GET", p.URL+"/admin/threads/t1/t-red/runs/"+run1, "", adm...)
			if resp.StatusCode != 200 {
				t.Fatalf("admin run: %d %s", resp.StatusCode, body)
			}
			noSecrets("the stored answer and upstream body", string(body))
			if r := gjson.ParseBytes(body); !strings.Contains(r.Get("response").Raw, "[REDACTED] Day") || !strings.Contains(r.Get("upstream_body").Raw, `"name":"[REDACTED]"`) {
				t.Fatalf("admin run: %s", body)
			}
			// The stored hashes are the originals'.
			stored, err := st.LoadThread(context.Background(), store.Key{Tenant: "t1", Thread: "t-red"})
			if err != nil {
				t.Fatal(err)
			}
			if stored.Hashes[0] != store.Hash(adapters.HashMessage([]byte(user))) || stored.Hashes[1] != store.Hash(adapters.HashMessage(reply.Message)) {
				t.Fatal("the stored hashes are not the original messages'")
			}

			// Replace: the whole original history again, and a new message.
			turn2 := `{"model":"gpt-4o","messages":[` + user + `,` + string(reply.Message) + `,{"role":"user","content":"again"}]}`
			resp, body = do(t, "POST", url, turn2, hdrs(auth, "X-Thread-Id", "t-red", "X-Mock-Scenario", "text")...)
			if resp.StatusCode != 200 {
				t.Fatalf("turn 2: %d %s", resp.StatusCode, body)
			}
			th = apiThreadAuth(t, p, auth, "t-red")
			noSecrets("the stored thread after a replace", th.Raw)
			if n := len(th.Get("messages").Array()); n != 4 || th.Get("messages.0").Raw != msgs[0].Raw {
				t.Fatalf("after the replace: %d messages: %s", n, th.Get("messages").Raw)
			}
			// Run 2 wrote (and masked) only its own messages: the kept
			// prefix matched by hash.
			if got, want := th.Get("runs.1.redactions").Raw, `[{"rule":"pattern:harmony","count":`+itoa64(harmonies)+`}]`; got != want {
				t.Fatalf("run 2 redactions = %s, want %s", got, want)
			}

			// Append: the stored history goes upstream, masked.
			resp, body = do(t, "POST", url, `{"model":"gpt-4o","messages":[{"role":"user","content":"more"}]}`, hdrs(auth, "X-Thread-Id", "t-red", "X-Thread-Mode", "append", "X-Mock-Scenario", "text")...)
			if resp.StatusCode != 200 {
				t.Fatalf("turn 3 (append): %d %s", resp.StatusCode, body)
			}
			if up := gjson.Get(lastUpstream(), "messages"); up.Get("0").Raw != msgs[0].Raw || len(up.Array()) != 5 {
				t.Fatalf("append sent upstream: %s", up.Raw)
			}

			// A stream: the client gets the original, the event log and the
			// stored reply the masks.
			resp, body = do(t, "POST", url, `{"model":"gpt-4o","stream":true,"messages":[`+user+`]}`, hdrs(auth, "X-Thread-Id", "t-red-s", "X-Mock-Scenario", "text")...)
			if resp.StatusCode != 200 || !strings.Contains(string(body), "Harmony") {
				t.Fatalf("stream: %d %s", resp.StatusCode, body)
			}
			runS := resp.Header.Get("X-Run-Id")
			resp, events := do(t, "GET", p.URL+"/api/threads/t-red-s/runs/"+runS+"/events", "", auth...)
			if resp.StatusCode != 200 || !strings.Contains(string(events), "[REDACTED]") || !strings.Contains(string(events), "[DONE]") {
				t.Fatalf("events: %d %s", resp.StatusCode, events)
			}
			noSecrets("the event log", string(events))
			th = apiThreadAuth(t, p, auth, "t-red-s")
			noSecrets("the streamed thread", th.Raw)
			if th.Get("runs.0.redactions.#").Int() != 3 || !strings.Contains(th.Get("messages.1").Raw, "[REDACTED] Day") {
				t.Fatalf("streamed thread: %s", th.Raw)
			}

			// A connection without redaction stores what it sent.
			resp, body = do(t, "POST", p.URL+"/plain/v1/chat/completions", `{"model":"gpt-4o","messages":[`+user+`]}`, hdrs(auth, "X-Thread-Id", "t-plain", "X-Mock-Scenario", "text")...)
			if resp.StatusCode != 200 {
				t.Fatalf("plain: %d %s", resp.StatusCode, body)
			}
			th = apiThreadAuth(t, p, auth, "t-plain")
			if th.Get("messages.0").Raw != user || th.Get("runs.0.redactions").Raw != "[]" {
				t.Fatalf("plain thread: %s", th.Raw)
			}
		})
	}
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }
