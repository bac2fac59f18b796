package proxy

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/storetest"
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

// TestEraseSubjectAndTenant erases through the admin API and then scans
// every key and value of the store (and the embedded store's blob files)
// for the erased content, subject, tenant and ids: nothing may be left
// but the other tenant's and subject's data and the tombstones, which
// name nothing in clear.
func TestEraseSubjectAndTenant(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			st := b.open(t)
			p := startProxyWith(t, m, erasureConfig, st)
			url := p.URL + "/openai/v1/chat/completions"
			const marker = "MARKER-5c1d-private"
			turn := func(key, thread, subject, text string) {
				t.Helper()
				body := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + text + `"}]}`
				hdr := []string{"Authorization", "Bearer " + key, "X-Thread-Id", thread}
				if subject != "" {
					hdr = append(hdr, "X-Chronicle-Subject", subject)
				}
				if resp, out := do(t, "POST", url, body, hdr...); resp.StatusCode != 200 {
					t.Fatalf("turn %s: %d %s", thread, resp.StatusCode, out)
				}
			}
			// Large enough for a blob of its own (128 KiB and more).
			big := marker + " " + strings.Repeat("z", 200<<10)
			turn("key-one", "th-gone-1", "subj-ZQX", marker+" one")
			turn("key-one", "th-gone-1", "subj-ZQX", big)
			turn("key-one", "th-gone-2", "subj-ZQX", marker+" two")
			turn("key-one", "th-keep", "subj-kept", "kept text")
			// A fork of one of the subject's threads carries its subjects:
			// erasing the subject erases the fork too.
			if resp, out := do(t, "POST", p.URL+"/api/threads/th-gone-1/fork", `{"at_message":1,"thread":"fork-of-gone"}`,
				"Authorization", "Bearer key-one"); resp.StatusCode != 201 {
				t.Fatalf("fork: %d %s", resp.StatusCode, out)
			}
			turn("key-two", "th-two-1", "", marker+" tenant two")
			turn("key-two", "th-two-2", "subj-two", marker+" tenant two again")

			// A run in flight on one of the subject's threads is left.
			defer m.Release("held")
			held := send(t, "POST", url, streamBody, "Authorization", "Bearer key-one", "X-Thread-Id", "th-gone-busy",
				"X-Chronicle-Subject", "subj-ZQX", "X-Mock-Gate", "held")
			defer held.Body.Close()
			resp, out := do(t, "DELETE", p.URL+"/admin/subjects/app-one/subj-ZQX?reason=ticket-77", "", adminAuth...)
			if resp.StatusCode != 200 {
				t.Fatalf("erase subject: %d %s", resp.StatusCode, out)
			}
			got := gjson.ParseBytes(out)
			if got.Get("threads").Int() != 3 || got.Get("runs").Int() != 3 || got.Get("messages").Int() < 4 ||
				got.Get("complete").Bool() || got.Get("busy").Raw != `["th-gone-busy"]` || got.Get("tombstone").String() == "" {
				t.Fatalf("erase subject answered %s", out)
			}
			m.Release("held")
			io.Copy(io.Discard, held.Body)
			waitFor(t, "the held run to end", func() bool {
				resp, out := do(t, "GET", p.URL+"/admin/threads/app-one/th-gone-busy", "", adminAuth...)
				return resp.StatusCode == 200 && gjson.GetBytes(out, "runs.0.status").String() != "running"
			})
			resp, out = do(t, "DELETE", p.URL+"/admin/subjects/app-one/subj-ZQX", "", adminAuth...)
			if resp.StatusCode != 200 || gjson.GetBytes(out, "threads").Int() != 1 || !gjson.GetBytes(out, "complete").Bool() {
				t.Fatalf("erase subject again: %d %s", resp.StatusCode, out)
			}
			resp, out = do(t, "DELETE", p.URL+"/admin/tenants/app-two?actor=dpo%40example", "", adminAuth...)
			if resp.StatusCode != 200 || gjson.GetBytes(out, "threads").Int() != 2 || !gjson.GetBytes(out, "complete").Bool() {
				t.Fatalf("erase tenant: %d %s", resp.StatusCode, out)
			}

			ctx := context.Background()
			left, err := storetest.Mentions(ctx, st, marker, "subj-ZQX", "th-gone", "app-two", "th-two", "subj-two")
			if err != nil {
				t.Fatal(err)
			}
			if len(left) > 0 {
				t.Fatalf("after the erasures the store still holds:\n%s", strings.Join(left, "\n"))
			}
			if left, _ := storetest.Mentions(ctx, st, "kept text", "subj-kept"); len(left) == 0 {
				t.Fatal("the scan does not see the kept thread either: it proves nothing")
			}

			resp, out = do(t, "GET", p.URL+"/admin/tombstones", "", adminAuth...)
			ts := gjson.GetBytes(out, "tombstones").Array()
			if resp.StatusCode != 200 || len(ts) != 3 {
				t.Fatalf("tombstones: %d %s", resp.StatusCode, out)
			}
			if ts[0].Get("scope").String() != "tenant" || ts[0].Get("actor").String() != "dpo@example" ||
				ts[0].Get("tenant_sha256").String() != store.IDHash("app-two") || ts[0].Get("threads").Int() != 2 {
				t.Fatalf("tenant tombstone: %s", ts[0].Raw)
			}
			if ts[2].Get("scope").String() != "subject" || ts[2].Get("reason").String() != "ticket-77" || ts[2].Get("busy").Int() != 1 ||
				ts[2].Get("subject_sha256").String() != store.IDHash("app-one", "subj-ZQX") || !strings.HasPrefix(ts[2].Get("actor").String(), "admin-token:") {
				t.Fatalf("subject tombstone: %s", ts[2].Raw)
			}
		})
	}
}
