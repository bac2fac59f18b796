package proxy

import (
	"context"
	"slices"
	"testing"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/tidwall/gjson"
)

const erasureConfig = `
leases: {ttl: 3s}
admin: {token: "` + adminToken + `"}
clients:
  - {key: key-one, tenant: app-one}
  - {key: key-two, tenant: app-two}
connections:
  - {name: openai, provider: openai, base_url: "${MOCK}", keys: [pool-key]}
`

// TestSubjectHeader: X-Chronicle-Subject is validated, kept with the
// thread and indexed per tenant, and never reaches the upstream.
func TestSubjectHeader(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			st := b.open(t)
			p := startProxyWith(t, m, erasureConfig, st)
			url := p.URL + "/openai/v1/chat/completions"
			body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
			resp, out := do(t, "POST", url, body, "Authorization", "Bearer key-one", "X-Thread-Id", "t-subj", "X-Chronicle-Subject", "user-42")
			if resp.StatusCode != 200 {
				t.Fatalf("turn: %d %s", resp.StatusCode, out)
			}
			reqs := m.Requests()
			if len(reqs) != 1 || reqs[0].Header.Get("X-Chronicle-Subject") != "" {
				t.Fatalf("the upstream saw the subject header: %v", reqs[len(reqs)-1].Header)
			}
			e := st.(store.Erasure)
			subs, err := e.ThreadSubjects(context.Background(), store.Key{Tenant: "app-one", Thread: "t-subj"})
			if err != nil || !slices.Equal(subs, []string{"user-42"}) {
				t.Fatalf("thread subjects: %v %v", subs, err)
			}
			ths, err := e.SubjectThreads(context.Background(), "app-one", "user-42")
			if err != nil || !slices.Equal(ths, []string{"t-subj"}) {
				t.Fatalf("subject threads: %v %v", ths, err)
			}
			resp, out = do(t, "POST", url, body, "Authorization", "Bearer key-one", "X-Thread-Id", "t-subj2", "X-Chronicle-Subject", "has {brace}")
			if resp.StatusCode != 400 || gjson.GetBytes(out, "error.code").String() != "invalid_subject" {
				t.Fatalf("bad subject: %d %s", resp.StatusCode, out)
			}
			if len(m.Requests()) != 1 {
				t.Fatal("a refused subject went upstream")
			}
		})
	}
}
