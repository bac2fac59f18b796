package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
	redisstore "github.com/chronicle-proxy/chronicle/store/redis"
	"github.com/chronicle-proxy/chronicle/store/redistest"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"github.com/tidwall/gjson"
)

const adminToken = "admin-secret-token-3f9a"

const adminConfig = `
leases: {ttl: 3s}
admin: {token: "` + adminToken + `"}
connections:
  - {name: openai, provider: openai, base_url: "${MOCK}"}
  - {name: gemini, provider: gemini, base_url: "${MOCK}"}
`

var adminAuth = []string{"Authorization", "Bearer " + adminToken}

// seedRun is one run of a seeded thread.
type seedRun struct {
	status store.Status
	model  string
	usage  *store.Usage
	// resumes: this run answers the previous run's pending call and
	// resumes it.
	resumes bool
}

// seedThread is a thread written straight through the store API (StartRun
// + Finish with a Transcript), which is much faster than going through the
// proxy and sets exactly what a test needs.
type seedThread struct {
	key    store.Key
	conn   string
	format string
	model  string
	system string
	msgs   []string
	runs   []seedRun
}

func hashOf(b []byte) store.Hash {
	s := sha256.Sum256(b)
	var h store.Hash
	copy(h[:], s[:])
	return h
}

func seed(t testing.TB, st store.Store, s seedThread) {
	t.Helper()
	ctx := context.Background()
	if len(s.runs) == 0 {
		s.runs = []seedRun{{status: store.Completed}}
	}
	for i, r := range s.runs {
		model := r.model
		if model == "" {
			model = s.model
		}
		started, err := st.StartRun(ctx, store.StartRun{Key: s.key, RunID: fmt.Sprintf("%s-r%d", s.key.Thread, i), Owner: "seed", TTL: time.Minute, Model: model})
		if err != nil {
			t.Fatalf("seed %s: start: %v", s.key, err)
		}
		f := store.Finish{Status: r.status, Usage: r.usage, Model: model}
		if i == 0 {
			tr := &store.Transcript{Connection: s.conn, Format: s.format, Model: s.model}
			for _, m := range s.msgs {
				tr.Messages = append(tr.Messages, []byte(m))
				tr.Hashes = append(tr.Hashes, hashOf([]byte(m)))
			}
			if s.system != "" {
				tr.System = []byte(s.system)
			}
			f.Transcript = tr
		}
		if r.status == store.Interrupted {
			f.Interrupts = []store.Interrupt{{CallID: fmt.Sprintf("call_%d", i), Name: "get_weather", Status: store.Pending}}
		}
		if r.resumes && i > 0 {
			f.Resolve = []string{fmt.Sprintf("call_%d", i-1)}
			f.Resumes = fmt.Sprintf("%s-r%d", s.key.Thread, i-1)
		}
		if err := st.Finish(ctx, started.Lease, &f); err != nil {
			t.Fatalf("seed %s: finish: %v", s.key, err)
		}
	}
}

func startAdminProxy(t *testing.T, st store.Store) *testProxy {
	t.Helper()
	return startProxyWith(t, startMock(t), adminConfig, st)
}

func adminGet(t *testing.T, p *testProxy, path string) gjson.Result {
	t.Helper()
	resp, body := do(t, "GET", p.URL+path, "", adminAuth...)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	return gjson.ParseBytes(body)
}

// listAll follows next_cursor to the end and returns "tenant/id" in order.
func listAll(t *testing.T, p *testProxy, query url.Values) []string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("pagination does not end")
		}
		page := adminGet(t, p, "/admin/threads?"+query.Encode())
		for _, th := range page.Get("threads").Array() {
			k := th.Get("tenant").String() + "/" + th.Get("id").String()
			if seen[k] {
				t.Fatalf("%s listed twice", k)
			}
			seen[k] = true
			out = append(out, k)
		}
		next := page.Get("next_cursor")
		if next.Type == gjson.Null {
			return out
		}
		query.Set("cursor", next.String())
	}
}

// auditCorpus is the fixture threads of the filter tests.
func auditCorpus() []seedThread {
	u := func(in, out int64) *store.Usage {
		return &store.Usage{InputTokens: in, OutputTokens: out, CachedTokens: in / 10, ReasoningTokens: out / 4}
	}
	chat := func(user, reply string) []string {
		return []string{`{"role":"user","content":` + jsonString(user) + `}`, `{"role":"assistant","content":` + jsonString(reply) + `}`}
	}
	return []seedThread{
		{key: store.Key{Tenant: "acme", Thread: "a1"}, conn: "openai", format: "openai-chat", model: "gpt-4o",
			msgs: chat("where is the purple elephant?", "In the garden."), runs: []seedRun{{status: store.Completed, usage: u(100, 20)}}},
		{key: store.Key{Tenant: "acme", Thread: "a2"}, conn: "openai", format: "openai-chat", model: "gpt-4o-mini",
			msgs: []string{`{"role":"user","content":"weather in Paris?"}`,
				`{"role":"assistant","content":null,"tool_calls":[{"id":"call_0","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}`},
			runs: []seedRun{{status: store.Completed, usage: u(50, 5)}, {status: store.Interrupted, usage: u(70, 9)}}},
		{key: store.Key{Tenant: "acme", Thread: "a3"}, conn: "gemini", format: "gemini", model: "gemini-2.5-flash",
			system: `{"parts":[{"text":"You speak like a Zeppelin captain."}]}`,
			msgs:   []string{`{"role":"user","parts":[{"text":"hello"}]}`, `{"role":"model","parts":[{"text":"thinking about it","thought":true},{"text":"Ahoy!"}]}`},
			runs:   []seedRun{{status: store.Completed, usage: u(30, 40)}}},
		{key: store.Key{Tenant: "beta", Thread: "b1"}, conn: "openai", format: "openai-chat", model: "gpt-4o",
			msgs: chat("Grüße aus Köln", "Hallo!"), runs: []seedRun{{status: store.Failed}}},
		// The same text, JSON-escaped: a search must see through escapes.
		{key: store.Key{Tenant: "beta", Thread: "b2"}, conn: "openai", format: "openai-chat", model: "gpt-4o",
			msgs: []string{`{"role":"user","content":"Gr\u00fc\u00dfe again"}`}, runs: []seedRun{{status: store.Aborted, usage: u(5, 0)}}},
		{key: store.Key{Tenant: "beta", Thread: "b3"}, conn: "gemini", format: "gemini", model: "gemini-2.5-pro",
			msgs: []string{`{"role":"user","parts":[{"text":"the PURPLE elephant again"}]}`}, runs: []seedRun{{status: store.Completed, usage: u(11, 22)}, {status: store.Completed, usage: u(33, 44)}}},
		// A tenant that needs URL escaping in a path.
		{key: store.Key{Tenant: "org/team%1", Thread: "c1"}, conn: "openai", format: "openai-chat", model: "gpt-4o",
			msgs: chat("escaping test", "ok"), runs: []seedRun{{status: store.Completed, usage: u(1, 1)}}},
		// A signature holds the needle but is not text.
		{key: store.Key{Tenant: "beta", Thread: "b4"}, conn: "gemini", format: "gemini", model: "gemini-2.5-pro",
			msgs: []string{`{"role":"model","parts":[{"functionCall":{"name":"f","args":{}},"thoughtSignature":"elephant"}]}`}},
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestAdminListFilters(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := b.open(t)
			corpus := auditCorpus()
			for _, s := range corpus {
				seed(t, st, s)
			}
			p := startAdminProxy(t, st)
			all := adminGet(t, p, "/admin/threads?limit=500")
			entries := all.Get("threads").Array()
			if len(entries) != len(corpus) || all.Get("next_cursor").Type != gjson.Null {
				t.Fatalf("listed %d of %d threads: %s", len(entries), len(corpus), all.Raw)
			}
			// Newest-updated first.
			for i := 1; i < len(entries); i++ {
				if entries[i-1].Get("updated_at").String() < entries[i].Get("updated_at").String() {
					t.Fatalf("not newest-updated first: %s", all.Raw)
				}
			}
			byKey := map[string]gjson.Result{}
			for _, e := range entries {
				byKey[e.Get("tenant").String()+"/"+e.Get("id").String()] = e
			}
			// An entry: every key, runs as a count, usage the sum.
			a2 := byKey["acme/a2"]
			for _, key := range []string{"tenant", "id", "connection", "format", "model", "created_at", "updated_at", "runs", "last_status", "usage"} {
				if !a2.Get(key).Exists() {
					t.Fatalf("entry lacks %q: %s", key, a2.Raw)
				}
			}
			if a2.Get("runs").Int() != 2 || a2.Get("last_status").String() != "interrupted" || a2.Get("usage.input_tokens").Int() != 120 ||
				a2.Get("usage.output_tokens").Int() != 14 || a2.Get("format").String() != "openai-chat" || a2.Get("connection").String() != "openai" {
				t.Fatalf("entry a2: %s", a2.Raw)
			}
			// Time filters: pick boundaries from the stored times.
			times := make([]string, 0, len(entries))
			for _, e := range entries {
				times = append(times, e.Get("updated_at").String())
			}
			sort.Strings(times)
			mid := times[len(times)/2]
			midT, _ := time.Parse(time.RFC3339Nano, mid)
			keysWhere := func(f func(e gjson.Result) bool) []string {
				var out []string
				for _, e := range entries {
					if f(e) {
						out = append(out, e.Get("tenant").String()+"/"+e.Get("id").String())
					}
				}
				sort.Strings(out)
				return out
			}
			cases := []struct {
				name  string
				query url.Values
				want  []string
			}{
				{"tenant", url.Values{"tenant": {"acme"}}, []string{"acme/a1", "acme/a2", "acme/a3"}},
				{"escaped tenant", url.Values{"tenant": {"org/team%1"}}, []string{"org/team%1/c1"}},
				{"connection", url.Values{"connection": {"gemini"}}, []string{"acme/a3", "beta/b3", "beta/b4"}},
				{"model", url.Values{"model": {"gpt-4o"}}, []string{"acme/a1", "beta/b1", "beta/b2", "org/team%1/c1"}},
				{"status", url.Values{"status": {"interrupted"}}, []string{"acme/a2"}},
				{"status failed", url.Values{"status": {"failed"}}, []string{"beta/b1"}},
				{"tenant and connection", url.Values{"tenant": {"beta"}, "connection": {"gemini"}}, []string{"beta/b3", "beta/b4"}},
				{"q case-insensitive", url.Values{"q": {"purple ELEPHANT"}}, []string{"acme/a1", "beta/b3"}},
				{"q not in signatures", url.Values{"q": {"elephant"}, "tenant": {"beta"}}, []string{"beta/b3"}},
				{"q through escapes", url.Values{"q": {"grüße"}}, []string{"beta/b1", "beta/b2"}},
				{"q in gemini system", url.Values{"q": {"zeppelin"}}, []string{"acme/a3"}},
				{"q in tool arguments", url.Values{"q": {"paris"}}, []string{"acme/a2"}},
				{"q with filters", url.Values{"q": {"elephant"}, "connection": {"openai"}}, []string{"acme/a1"}},
				{"q no match", url.Values{"q": {"no such words"}}, nil},
				{"since", url.Values{"since": {mid}}, keysWhere(func(e gjson.Result) bool { return e.Get("updated_at").String() >= mid })},
				{"until", url.Values{"until": {mid}}, keysWhere(func(e gjson.Result) bool { return e.Get("updated_at").String() <= mid })},
				{"since until", url.Values{"since": {times[1]}, "until": {midT.Format(time.RFC3339Nano)}},
					keysWhere(func(e gjson.Result) bool { u := e.Get("updated_at").String(); return u >= times[1] && u <= mid })},
			}
			for _, c := range cases {
				for _, limit := range []string{"500", "1"} {
					q := url.Values{}
					for k, v := range c.query {
						q[k] = v
					}
					q.Set("limit", limit)
					got := listAll(t, p, q)
					sort.Strings(got)
					if diff := cmp.Diff(c.want, got); diff != "" {
						t.Errorf("%s (limit %s): -want +got\n%s", c.name, limit, diff)
					}
				}
			}
		})
	}
}

func TestAdminPaginationToTheEnd(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := b.open(t)
			const n = 57
			for i := 0; i < n; i++ {
				seed(t, st, seedThread{key: store.Key{Tenant: fmt.Sprintf("t%d", i%3), Thread: fmt.Sprintf("th-%03d", i)}, conn: "openai",
					format: "openai-chat", model: "gpt-4o", msgs: []string{fmt.Sprintf(`{"role":"user","content":"msg %d %s"}`, i, map[bool]string{true: "needle", false: "hay"}[i%4 == 0])}})
			}
			p := startAdminProxy(t, st)
			full := listAll(t, p, url.Values{"limit": {"500"}})
			if len(full) != n {
				t.Fatalf("one page: %d threads", len(full))
			}
			for _, limit := range []string{"1", "7", "50"} {
				if got := listAll(t, p, url.Values{"limit": {limit}}); !cmp.Equal(full, got) {
					t.Fatalf("limit %s: pages differ from one page:\n%v\n%v", limit, full, got)
				}
			}
			// Default limit 50, and a next cursor.
			page := adminGet(t, p, "/admin/threads")
			if len(page.Get("threads").Array()) != 50 || page.Get("next_cursor").String() == "" {
				t.Fatalf("default page: %d threads, cursor %q", len(page.Get("threads").Array()), page.Get("next_cursor").String())
			}
			// Text search with a bounded scan is proxy/admin's
			// TestAuditBoundedTextSearch.
		})
	}
}

func TestAdminBadInput(t *testing.T) {
	p := startAdminProxy(t, backends[0].open(t))
	for _, path := range []string{
		"/admin/threads?status=done", "/admin/threads?since=yesterday", "/admin/threads?until=2026-13-01",
		"/admin/threads?limit=-1", "/admin/threads?limit=x", "/admin/threads?cursor=%%%", "/admin/threads?cursor=bm9wZQ",
		"/admin/usage?group_by=week", "/admin/threads?since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z",
		"/admin/threads/acme/bad%20id", "/admin/export?status=x",
	} {
		resp, body := do(t, "GET", p.URL+path, "", adminAuth...)
		if resp.StatusCode != 400 || gjson.GetBytes(body, "error.code").String() == "" || gjson.GetBytes(body, "error.message").String() == "" {
			t.Errorf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	for _, path := range []string{"/admin/threads/acme/nope", "/admin/threads/acme/nope/export", "/admin/nothing"} {
		resp, body := do(t, "GET", p.URL+path, "", adminAuth...)
		if resp.StatusCode != 404 || !gjson.GetBytes(body, "error.type").Exists() {
			t.Errorf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	// Limit above the maximum is capped, not refused.
	if resp, body := do(t, "GET", p.URL+"/admin/threads?limit=100000", "", adminAuth...); resp.StatusCode != 200 {
		t.Errorf("limit over max: %d %s", resp.StatusCode, body)
	}
}

// TestAdminThreadDocument: the admin thread document is the tenant API's,
// byte for byte, and the export line is the same document on one line.
func TestAdminThreadDocument(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			p := startProxyWith(t, m, adminConfig, b.open(t))
			broken := `{"model":"gpt-4o","messages":[{"role":"user","content":"weather?"},
{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},
{"role":"user","content":"and now? a & b"}]}`
			resp, body := do(t, "POST", p.URL+"/openai/v1/chat/completions", broken, "Authorization", "Bearer tenant-key-1", "X-Thread-Id", "doc-1")
			if resp.StatusCode != 200 {
				t.Fatalf("turn: %d %s", resp.StatusCode, body)
			}
			tenant := passThroughTenant([]byte("tenant-key-1"))
			_, api := do(t, "GET", p.URL+"/api/threads/doc-1", "", "Authorization", "Bearer tenant-key-1")
			resp, adm := do(t, "GET", p.URL+"/admin/threads/"+tenant+"/doc-1", "", adminAuth...)
			if resp.StatusCode != 200 || string(api) != string(adm) {
				t.Fatalf("admin document differs from the tenant API's:\n%s\n%s", api, adm)
			}
			run := gjson.GetBytes(adm, "runs.0")
			if len(run.Get("repairs").Array()) != 1 || !run.Get("session_id").Exists() || run.Get("usage.input_tokens").Int() == 0 {
				t.Fatalf("run record: %s", run.Raw)
			}
			resp, line := do(t, "GET", p.URL+"/admin/threads/"+tenant+"/doc-1/export", "", adminAuth...)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" ||
				strings.Count(string(line), "\n") != 1 || !gjson.ValidBytes(line) {
				t.Fatalf("export: %d %q", resp.StatusCode, line)
			}
			if !jsonEqual(t, line, adm) {
				t.Fatalf("export line differs from the document:\n%s\n%s", line, adm)
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return cmp.Equal(x, y)
}

// TestAdminExportJSONL: a filtered export holds exactly the filtered
// threads, one valid document per line, raw newlines in stored messages
// compacted away.
func TestAdminExportJSONL(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := b.open(t)
			for _, s := range auditCorpus() {
				seed(t, st, s)
			}
			seed(t, st, seedThread{key: store.Key{Tenant: "acme", Thread: "pretty"}, conn: "openai", format: "openai-chat", model: "gpt-4o",
				msgs: []string{"{\n  \"role\": \"user\",\n  \"content\": \"line one\\nline two\"\n}"}})
			p := startAdminProxy(t, st)
			cases := []struct {
				query string
				want  []string
			}{
				{"", nil},
				{"tenant=acme", []string{"acme/a1", "acme/a2", "acme/a3", "acme/pretty"}},
				{"q=elephant", []string{"acme/a1", "beta/b3"}},
				{"status=completed&connection=gemini", []string{"acme/a3", "beta/b3", "beta/b4"}},
			}
			for _, c := range cases {
				resp, body := do(t, "GET", p.URL+"/admin/export?"+c.query, "", adminAuth...)
				if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
					t.Fatalf("export %q: %d %s", c.query, resp.StatusCode, body)
				}
				var got []string
				for _, line := range strings.Split(strings.TrimSuffix(string(body), "\n"), "\n") {
					if !gjson.Valid(line) || !gjson.Get(line, "messages").IsArray() || !gjson.Get(line, "runs").IsArray() {
						t.Fatalf("export %q: bad line %q", c.query, line)
					}
					got = append(got, gjson.Get(line, "tenant").String()+"/"+gjson.Get(line, "id").String())
					if gjson.Get(line, "id").String() == "pretty" && gjson.Get(line, "messages.0.content").String() != "line one\nline two" {
						t.Fatalf("compacted message lost its text: %s", line)
					}
				}
				sort.Strings(got)
				if c.want == nil {
					if len(got) != len(auditCorpus())+1 {
						t.Fatalf("full export: %d lines", len(got))
					}
					continue
				}
				if diff := cmp.Diff(c.want, got); diff != "" {
					t.Fatalf("export %q: -want +got\n%s", c.query, diff)
				}
			}
		})
	}
}

// TestAdminExportBoundedMemory exports 10,000 threads (~20 MB of JSONL) and
// checks that the live heap never grows by more than a small fraction of
// that while the export streams: the proxy writes page by page and holds
// no whole export.
func TestAdminExportBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 10,000 threads")
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := b.open(t)
			const n = 10000
			filler := strings.Repeat("lorem ipsum dolor sit amet ", 60) // ~1.6 KB per thread
			var wg sync.WaitGroup
			work := make(chan int)
			for w := 0; w < 8; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range work {
						seed(t, st, seedThread{key: store.Key{Tenant: fmt.Sprintf("tenant-%d", i%7), Thread: fmt.Sprintf("bulk-%05d", i)},
							conn: "openai", format: "openai-chat", model: "gpt-4o",
							msgs: []string{`{"role":"user","content":"` + filler + `"}`, `{"role":"assistant","content":"ok"}`},
							runs: []seedRun{{status: store.Completed, usage: &store.Usage{InputTokens: 10, OutputTokens: 2}}}})
					}
				}()
			}
			for i := 0; i < n; i++ {
				work <- i
			}
			close(work)
			wg.Wait()
			p := startAdminProxy(t, st)

			heap := func() uint64 {
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				return ms.HeapAlloc
			}
			before := heap()
			resp := send(t, "GET", p.URL+"/admin/export", "", adminAuth...)
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("export: %d", resp.StatusCode)
			}
			r := bufio.NewReaderSize(resp.Body, 64<<10)
			var lines, total int
			var peak uint64
			seen := make(map[string]bool, n)
			for {
				line, err := r.ReadSlice('\n')
				if err == bufio.ErrBufferFull {
					t.Fatalf("a line longer than 64 KiB at line %d", lines)
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				total += len(line)
				id := gjson.GetBytes(line, "id").String()
				if seen[id] || !strings.HasPrefix(id, "bulk-") {
					t.Fatalf("line %d: id %q", lines, id)
				}
				seen[id] = true
				lines++
				if lines%500 == 0 {
					if h := heap(); h > before && h-before > peak {
						peak = h - before
					}
				}
			}
			if lines != n {
				t.Fatalf("exported %d threads, want %d", lines, n)
			}
			const bound = 6 << 20
			t.Logf("%s: exported %d threads, %.1f MB; peak live-heap growth while streaming %.2f MB (bound %d MB)",
				b.name, lines, float64(total)/1e6, float64(peak)/1e6, bound>>20)
			if total < 3*bound {
				t.Fatalf("export of %d bytes is too small to show the bound", total)
			}
			if peak > bound {
				t.Fatalf("live heap grew by %d bytes while streaming (bound %d): the export is held in memory", peak, bound)
			}
		})
	}
}

// TestAdminDelete removes a thread with runs, events and interrupts, and
// leaves nothing behind in the store.
func TestAdminDelete(t *testing.T) {
	for _, name := range []string{"embedded", "redis"} {
		t.Run(name, func(t *testing.T) {
			var st store.Store
			var rdb *redis.Client
			if name == "embedded" {
				st = openEmbedded(t, t.TempDir())
			} else {
				srv := redistest.Start(t)
				rs, err := redisstore.Open(context.Background(), redisstore.Options{URL: srv.URL()})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { rs.Close() })
				st, rdb = rs, srv.Client(t)
			}
			ctx := context.Background()
			k := store.Key{Tenant: "gone-tenant", Thread: "gone-1"}
			keep := store.Key{Tenant: "kept-tenant", Thread: "kept-1"}
			seed(t, st, seedThread{key: keep, conn: "openai", format: "openai-chat", model: "gpt-4o", msgs: []string{`{"role":"user","content":"x"}`}})
			seed(t, st, seedThread{key: k, conn: "openai", format: "openai-chat", model: "gpt-4o", msgs: []string{`{"role":"user","content":"x"}`},
				runs: []seedRun{{status: store.Interrupted}, {status: store.Completed}}})
			started, err := st.StartRun(ctx, store.StartRun{Key: k, RunID: "gone-ev", Owner: "seed", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.AppendEvents(ctx, started.Lease, 1, [][]byte{[]byte("data: {}\n\n"), []byte("data: [DONE]\n\n")}); err != nil {
				t.Fatal(err)
			}
			p := startAdminProxy(t, st)
			// A running run refuses the delete.
			resp, body := do(t, "DELETE", p.URL+"/admin/threads/gone-tenant/gone-1", "", adminAuth...)
			if resp.StatusCode != 409 {
				t.Fatalf("delete while running: %d %s", resp.StatusCode, body)
			}
			if err := st.Finish(ctx, started.Lease, &store.Finish{Status: store.Completed}); err != nil {
				t.Fatal(err)
			}
			resp, body = do(t, "DELETE", p.URL+"/admin/threads/gone-tenant/gone-1", "", adminAuth...)
			if resp.StatusCode != 200 || gjson.GetBytes(body, "runs").Int() != 3 {
				t.Fatalf("delete: %d %s", resp.StatusCode, body)
			}
			if resp, _ := do(t, "DELETE", p.URL+"/admin/threads/gone-tenant/gone-1", "", adminAuth...); resp.StatusCode != 404 {
				t.Fatalf("second delete: %d", resp.StatusCode)
			}
			if _, err := st.LoadThread(ctx, k); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("LoadThread after delete: %v", err)
			}
			if runs, err := st.ListRuns(ctx, k); err == nil && len(runs) > 0 {
				t.Fatalf("runs after delete: %d", len(runs))
			}
			for _, id := range []string{"gone-1-r0", "gone-1-r1", "gone-ev"} {
				if _, err := st.GetRun(ctx, k, id); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("GetRun %s after delete: %v", id, err)
				}
				if _, err := st.FindRun(ctx, k.Tenant, id); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("FindRun %s after delete: %v", id, err)
				}
			}
			if err := st.FollowEvents(ctx, k, "gone-ev", 0, func(store.Event) error { return nil }); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("events after delete: %v", err)
			}
			if got := listAll(t, p, url.Values{}); !cmp.Equal(got, []string{"kept-tenant/kept-1"}) {
				t.Fatalf("listing after delete: %v", got)
			}
			tenants, err := st.ListTenants(ctx)
			if err != nil || !cmp.Equal(tenants, []string{"kept-tenant"}) {
				t.Fatalf("tenants after delete: %v %v", tenants, err)
			}
			if rdb != nil {
				assertNoRedisKeys(t, rdb, k)
			}
			// The run id is free again on the tenant: nothing remembers it.
			if _, err := st.StartRun(ctx, store.StartRun{Key: store.Key{Tenant: k.Tenant, Thread: "other"}, RunID: "gone-ev", Owner: "seed", TTL: time.Minute}); err != nil {
				t.Fatalf("run id still claimed after delete: %v", err)
			}
		})
	}
}

// assertNoRedisKeys scans the Redis server behind st for any key or index
// member that still names the deleted thread.
func assertNoRedisKeys(t *testing.T, c *redis.Client, k store.Key) {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		if strings.Contains(key, k.Thread) {
			t.Errorf("key %q survived the delete", key)
		}
		switch typ := c.Type(ctx, key).Val(); typ {
		case "zset":
			for _, m := range c.ZRange(ctx, key, 0, -1).Val() {
				if strings.Contains(m, k.Thread) {
					t.Errorf("%s still holds %q", key, m)
				}
			}
		case "set":
			for _, m := range c.SMembers(ctx, key).Val() {
				if m == k.Tenant {
					t.Errorf("%s still holds the tenant", key)
				}
			}
		case "hash":
			for f, v := range c.HGetAll(ctx, key).Val() {
				if strings.Contains(f, "gone-") || strings.Contains(v, k.Thread) {
					t.Errorf("%s still holds %q=%q", key, f, v)
				}
			}
		}
	}
}

// TestAdminUsage: the totals equal the sum of the runs' usage, for every
// grouping and with a time window.
func TestAdminUsage(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := b.open(t)
			for _, s := range auditCorpus() {
				seed(t, st, s)
			}
			p := startAdminProxy(t, st)
			ctx := context.Background()
			type run struct {
				tenant, conn, model, day string
				started                  time.Time
				u                        store.Usage
			}
			var runs []run
			for _, s := range auditCorpus() {
				th, err := st.LoadThread(ctx, s.key)
				if err != nil {
					t.Fatal(err)
				}
				rs, _ := st.ListRuns(ctx, s.key)
				for _, r := range rs {
					var u store.Usage
					if r.Usage != nil {
						u = *r.Usage
					}
					runs = append(runs, run{s.key.Tenant, th.Connection, r.Model, r.StartedAt.UTC().Format("2006-01-02"), r.StartedAt, u})
				}
			}
			sort.Slice(runs, func(i, j int) bool { return runs[i].started.Before(runs[j].started) })
			since := runs[len(runs)/2].started
			for _, group := range []string{"tenant", "connection", "model", "day"} {
				for _, window := range []bool{false, true} {
					want := map[string][2]int64{} // key → runs, input+output+cached+reasoning
					var total [2]int64
					for _, r := range runs {
						if window && r.started.Before(since) {
							continue
						}
						key := map[string]string{"tenant": r.tenant, "connection": r.conn, "model": r.model, "day": r.day}[group]
						sum := r.u.InputTokens + r.u.OutputTokens + r.u.CachedTokens + r.u.ReasoningTokens
						w := want[key]
						want[key] = [2]int64{w[0] + 1, w[1] + sum}
						total = [2]int64{total[0] + 1, total[1] + sum}
					}
					path := "/admin/usage?group_by=" + group
					if window {
						path += "&since=" + url.QueryEscape(since.Format(time.RFC3339Nano))
					}
					rep := adminGet(t, p, path)
					got := map[string][2]int64{}
					for _, g := range rep.Get("groups").Array() {
						u := g.Get("usage")
						got[g.Get("key").String()] = [2]int64{g.Get("runs").Int(), u.Get("input_tokens").Int() + u.Get("output_tokens").Int() + u.Get("cached_tokens").Int() + u.Get("reasoning_tokens").Int()}
					}
					if diff := cmp.Diff(want, got); diff != "" {
						t.Errorf("%s: -want +got\n%s", path, diff)
					}
					tu := rep.Get("total.usage")
					if rep.Get("total.runs").Int() != total[0] || tu.Get("input_tokens").Int()+tu.Get("output_tokens").Int()+tu.Get("cached_tokens").Int()+tu.Get("reasoning_tokens").Int() != total[1] {
						t.Errorf("%s: total %s, want %v", path, rep.Get("total").Raw, total)
					}
				}
			}
			// The per-field sums match the listing's per-thread sums.
			rep := adminGet(t, p, "/admin/usage?group_by=tenant&tenant=acme")
			var in int64
			for _, e := range adminGet(t, p, "/admin/threads?tenant=acme").Get("threads").Array() {
				in += e.Get("usage.input_tokens").Int()
			}
			if rep.Get("total.usage.input_tokens").Int() != in || in == 0 {
				t.Fatalf("usage %s vs listing sum %d", rep.Raw, in)
			}
		})
	}
}

// TestAdminAuth: every admin route answers 401 without the right token,
// and when no token is configured at all.
func TestAdminAuth(t *testing.T) {
	st := backends[0].open(t)
	seed(t, st, seedThread{key: store.Key{Tenant: "acme", Thread: "a1"}, conn: "openai", format: "openai-chat", model: "gpt-4o", msgs: []string{`{"role":"user","content":"x"}`}})
	m := startMock(t)
	withToken := startProxyWith(t, m, adminConfig, st)
	noToken := startProxyWith(t, m, `
connections:
  - {name: openai, provider: openai, base_url: "${MOCK}"}
`, st)
	routes := []struct{ method, path string }{
		{"GET", "/admin/threads"}, {"GET", "/admin/threads/acme/a1"}, {"GET", "/admin/threads/acme/a1/export"},
		{"DELETE", "/admin/threads/acme/a1"}, {"GET", "/admin/export"}, {"GET", "/admin/usage"}, {"GET", "/admin/nothing"},
	}
	creds := []struct {
		name    string
		headers []string
	}{
		{"none", nil},
		{"wrong", []string{"Authorization", "Bearer not-the-token"}},
		{"prefix", []string{"Authorization", "Bearer " + adminToken[:10]}},
		{"longer", []string{"Authorization", "Bearer " + adminToken + "x"}},
		{"basic", []string{"Authorization", "Basic " + adminToken}},
		{"x-api-key", []string{"X-Api-Key", adminToken}},
		{"query", nil},
	}
	for _, r := range routes {
		for _, c := range creds {
			path := r.path
			if c.name == "query" {
				path += "?key=" + adminToken
			}
			resp, body := do(t, r.method, withToken.URL+path, "", c.headers...)
			if resp.StatusCode != 401 || gjson.GetBytes(body, "error.code").String() != "invalid_admin_token" {
				t.Errorf("%s %s with %s: %d %s", r.method, r.path, c.name, resp.StatusCode, body)
			}
		}
		for _, h := range [][]string{nil, adminAuth, {"Authorization", "Bearer "}} {
			if resp, body := do(t, r.method, noToken.URL+r.path, "", h...); resp.StatusCode != 401 {
				t.Errorf("no admin.token configured: %s %s: %d %s", r.method, r.path, resp.StatusCode, body)
			}
		}
	}
	// The thread survived every refused DELETE.
	if _, err := st.LoadThread(context.Background(), store.Key{Tenant: "acme", Thread: "a1"}); err != nil {
		t.Fatalf("a refused delete deleted: %v", err)
	}
	// The right token works, case-insensitive scheme.
	if resp, _ := do(t, "GET", withToken.URL+"/admin/threads", "", "Authorization", "bearer "+adminToken); resp.StatusCode != 200 {
		t.Fatalf("right token: %d", resp.StatusCode)
	}
}

// TestTenantIsolation: tenant B cannot read, follow the events of, or
// cancel tenant A's thread through /api: every attempt is a 404, and A's
// run is untouched.
func TestTenantIsolation(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			p := startProxyWith(t, m, adminConfig, b.open(t))
			resp := send(t, "POST", p.URL+"/openai/v1/chat/completions", `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
				"Authorization", "Bearer key-of-a", "X-Thread-Id", "secret-thread", "X-Mock-Gate", "iso")
			r := bufio.NewReader(resp.Body)
			readEvent(t, r)
			runID := resp.Header.Get("X-Run-Id")
			base := p.URL + "/api/threads/secret-thread"
			attempts := []struct{ method, path string }{
				{"GET", ""}, {"GET", "/runs/active"}, {"GET", "/runs/" + runID + "/events"}, {"POST", "/runs/" + runID + "/cancel"},
			}
			for _, a := range attempts {
				for _, cred := range [][]string{{"Authorization", "Bearer key-of-b"}, {"X-Goog-Api-Key", "key-of-b"}, {"X-Api-Key", "key-of-b"}} {
					rb, body := do(t, a.method, base+a.path, "", cred...)
					if rb.StatusCode != 404 {
						t.Errorf("tenant B %s %s (%s): %d %s", a.method, a.path, cred[0], rb.StatusCode, body)
					}
				}
			}
			// A itself sees its running run; B's cancel did nothing.
			ra, body := do(t, "GET", base+"/runs/active", "", "Authorization", "Bearer key-of-a")
			if ra.StatusCode != 200 || gjson.GetBytes(body, "id").String() != runID {
				t.Fatalf("tenant A active run: %d %s", ra.StatusCode, body)
			}
			m.Release("iso")
			io.Copy(io.Discard, r)
			resp.Body.Close()
			th := apiThread(t, p, "key-of-a", "secret-thread")
			if th.Get("runs.0.status").String() != "completed" {
				t.Fatalf("A's run after B's cancel attempt: %s", th.Get("runs").Raw)
			}
		})
	}
}

// TestNoSecretsLeak drives a proxy with client keys, upstream pool keys and
// an admin token through turns, refusals, the admin API and an export, then
// greps the log and every admin answer for each secret.
func TestNoSecretsLeak(t *testing.T) {
	const (
		clientKey   = "client-secret-key-8c1d"
		clientKey2  = "client-secret-key-77aa"
		upstreamKey = "upstream-secret-key-5e0b"
		badKey      = "wrong-secret-key-0f0f"
	)
	cfg := `
leases: {ttl: 3s}
admin: {token: "` + adminToken + `"}
clients:
  - {key: "` + clientKey + `", tenant: app-one}
  - {key: "` + clientKey2 + `", tenant: app-two}
connections:
  - {name: openai, provider: openai, base_url: "${MOCK}", keys: ["` + upstreamKey + `"]}
  - {name: gemini, provider: gemini, base_url: "${MOCK}", keys: ["` + upstreamKey + `"]}
`
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			p := startProxyWith(t, m, cfg, b.open(t))
			var answers []byte
			collect := func(resp []byte) { answers = append(answers, resp...) }
			url := p.URL + "/openai/v1/chat/completions"
			for i, body := range []string{
				`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
				`{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
				`{"model":"gpt-4o","messages":[{"role":"user","content":"w?"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"user","content":"?"}]}`,
			} {
				_, out := do(t, "POST", url, body, "Authorization", "Bearer "+clientKey, "X-Thread-Id", fmt.Sprintf("leak-%d", i))
				collect(out)
			}
			_, out := do(t, "POST", p.URL+"/gemini/v1beta/models/gemini-2.5-flash:generateContent?key="+clientKey2,
				`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`, "X-Thread-Id", "leak-g")
			collect(out)
			_, out = do(t, "POST", url, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, "Authorization", "Bearer "+badKey)
			collect(out)
			_, out = do(t, "GET", p.URL+"/admin/threads", "", "Authorization", "Bearer "+badKey)
			collect(out)
			for _, path := range []string{"/admin/threads", "/admin/export", "/admin/usage", "/admin/threads/app-one/leak-0", "/admin/threads/app-two/leak-g/export"} {
				resp, out := do(t, "GET", p.URL+path, "", adminAuth...)
				if resp.StatusCode != 200 {
					t.Fatalf("%s: %d %s", path, resp.StatusCode, out)
				}
				collect(out)
			}
			export := adminGet(t, p, "/admin/export?tenant=app-one")
			_ = export
			if n := strings.Count(string(answers), `"id":"leak-`); n < 4 {
				t.Fatalf("the answers hold %d thread documents; the test checks nothing", n)
			}
			logText := p.log.String()
			for _, secret := range []string{clientKey, clientKey2, upstreamKey, badKey, adminToken} {
				if strings.Contains(logText, secret) {
					t.Errorf("the log holds a secret (%s…)", secret[:8])
				}
				if strings.Contains(string(answers), secret) {
					t.Errorf("an answer or export holds a secret (%s…)", secret[:8])
				}
			}
			// The upstream did get the pool key (so the test saw it in play).
			if got := m.Requests()[0].Header.Get("Authorization"); got != "Bearer "+upstreamKey {
				t.Fatalf("upstream auth %q", got)
			}
		})
	}
}

// slowLoadStore takes delay over every thread it loads: an export of many
// threads that lasts longer than limits.write_timeout in all while every
// thread comes well within it.
type slowLoadStore struct {
	store.Store
	delay time.Duration
}

func (s slowLoadStore) LoadThread(ctx context.Context, k store.Key) (store.Thread, error) {
	time.Sleep(s.delay) // the store's slowness, not synchronisation
	return s.Store.LoadThread(ctx, k)
}

// TestAdminExportOutlastsWriteTimeout: fasthttp sets a response's write
// deadline once; an export moves it on after every thread, so it is cut
// only by a client that stops reading, not by write_timeout in all.
func TestAdminExportOutlastsWriteTimeout(t *testing.T) {
	st := openEmbedded(t, t.TempDir())
	const n = 60
	for i := range n {
		seed(t, st, seedThread{key: store.Key{Tenant: "acme", Thread: fmt.Sprintf("slow-%02d", i)},
			conn: "openai", format: "openai-chat", model: "gpt-4o",
			msgs: []string{`{"role":"user","content":"hi"}`, `{"role":"assistant","content":"ok"}`},
			runs: []seedRun{{status: store.Completed}}})
	}
	// 60 threads at 25 ms each take 1.5 s against a 500 ms write_timeout.
	p := startProxyWith(t, startMock(t), adminConfig+"limits: {write_timeout: 500ms}\n", slowLoadStore{st, 25 * time.Millisecond})
	resp, body := do(t, "GET", p.URL+"/admin/export", "", adminAuth...)
	if resp.StatusCode != 200 {
		t.Fatalf("export: %d %s", resp.StatusCode, body)
	}
	lines := bytes.Count(body, []byte("\n"))
	if lines != n || bytes.Contains(body, []byte("\n{\"error\"")) {
		t.Fatalf("export gave %d lines of %d (%d bytes)", lines, n, len(body))
	}
}
