package proxy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// cacheDialect is one wire format's side of TestThreadCacheChangesNothing.
type cacheDialect struct {
	name, path string
	hdr        []string
	array      string // messages, contents or input
	first      string // fixture: a request that gets tool calls
	results    string // fixture: the same thread with the results
	drop       string // path of a restorable field the client drops from results
	reply      func(resp gjson.Result) []string
	user       func(text string) string
	model      string // body fields other than the array, for append and continue
}

var cacheDialects = []cacheDialect{
	{name: "deepseek", path: "/deepseek/chat/completions", hdr: []string{"Authorization", "Bearer k9"}, array: "messages",
		first: "deepseek/request.parallel-tools.json", results: "deepseek/request.tool-results.json", drop: "messages.2.reasoning_content",
		reply: func(r gjson.Result) []string { return []string{r.Get("choices.0.message").Raw} },
		user:  func(s string) string { return `{"role":"user","content":"` + s + `"}` }, model: `"model":"deepseek-chat"`},
	{name: "gemini", path: "/gemini/v1beta/models/gemini-3-flash-preview:generateContent", hdr: []string{"X-Goog-Api-Key", "k9"}, array: "contents",
		first: "gemini/request.parallel-tools.json", results: "gemini/request.tool-results.json", drop: "contents.1.parts.1.thoughtSignature",
		reply: func(r gjson.Result) []string { return []string{r.Get("candidates.0.content").Raw} },
		user:  func(s string) string { return `{"role":"user","parts":[{"text":"` + s + `"}]}` }},
	{name: "responses", path: "/openai/v1/responses", hdr: []string{"Authorization", "Bearer k9"}, array: "input",
		first: "openai-responses/request.parallel-tools.json", results: "openai-responses/request.tool-results.json", drop: "input.1",
		reply: func(r gjson.Result) []string {
			var items []string
			r.Get("output").ForEach(func(_, it gjson.Result) bool { items = append(items, it.Raw); return true })
			return items
		},
		user:  func(s string) string { return `{"type":"message","role":"user","content":"` + s + `"}` },
		model: `"model":"gpt-5.1-codex-max"`},
}

// TestThreadCacheChangesNothing runs one conversation per wire format
// through a proxy that keeps transcripts and one that does not, and
// expects the same upstream bodies, the same response headers and the
// same stored thread: restore of a dropped field, a regenerated answer,
// repair of dangling calls, append and continue turns, an edited history,
// on both stores.
func TestThreadCacheChangesNothing(t *testing.T) {
	for _, d := range cacheDialects {
		for _, b := range backends {
			t.Run(d.name+"/"+b.name, func(t *testing.T) {
				var runs [2][]string
				for i, cacheBytes := range []int{1 << 20, 0} {
					m := startMock(t)
					cfg := persistConfig + fmt.Sprintf("store: {thread_cache_bytes: %d}\n", cacheBytes)
					p := startProxyWith(t, m, cfg, b.open(t))
					runs[i] = conversation(t, d, p, &testMock{m})
					if cacheBytes > 0 {
						// Every turn after the first found its transcript kept.
						if hits, misses := p.threads.hits.Load(), p.threads.misses.Load(); hits != 9 || misses != 0 {
							t.Fatalf("thread cache: %d hits, %d misses; want 9, 0", hits, misses)
						}
					}
				}
				if len(runs[0]) != len(runs[1]) {
					t.Fatalf("%d steps with the cache, %d without", len(runs[0]), len(runs[1]))
				}
				for i := range runs[0] {
					if runs[0][i] != runs[1][i] {
						t.Errorf("step %d differs\nwith the cache:    %s\nwithout the cache: %s", i, runs[0][i], runs[1][i])
					}
				}
			})
		}
	}
}

// conversation plays the turns and returns, per step, what the client and
// the upstream saw.
func conversation(t *testing.T, d cacheDialect, p *testProxy, m *testMock) []string {
	var steps []string
	hdr := append(slices.Clone(d.hdr), "X-Thread-Id", "t-cache")
	turn := func(name, body, scenario string, extra ...string) gjson.Result {
		t.Helper()
		before := len(m.Requests())
		resp, out := do(t, "POST", p.URL+d.path, body, append(append(hdr, "X-Mock-Scenario", scenario), extra...)...)
		upstream := "(not sent)"
		if reqs := m.Requests(); len(reqs) > before {
			upstream = string(reqs[len(reqs)-1].Body)
		}
		steps = append(steps, fmt.Sprintf("%s: %d repaired=%q restored=%q interrupted=%q upstream=%s",
			name, resp.StatusCode, resp.Header.Get("X-Repaired"), resp.Header.Get("X-Restored"), resp.Header.Get("X-Interrupted-Calls"), upstream))
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", name, resp.StatusCode, out)
		}
		return gjson.ParseBytes(out)
	}
	with := func(body string, msgs ...string) string {
		for _, msg := range msgs {
			body, _ = sjson.SetRaw(body, d.array+".-1", msg)
		}
		return body
	}
	nonStream := func(body string) string {
		body, _ = sjson.Delete(body, "stream")
		body, _ = sjson.Delete(body, "stream_options")
		return body
	}
	first := nonStream(string(fixture(t, d.first)))
	calls := d.reply(turn("tool calls", first, "parallel-tools"))
	// The client sends the results but drops a field the provider needs.
	results := nonStream(string(fixture(t, d.results)))
	results, _ = sjson.Delete(results, d.drop)
	answer := d.reply(turn("results, a field dropped", results, "text"))
	// The next question after the whole history; then the same request
	// twice more (regenerate).
	next := with(with(results, answer...), d.user("and tomorrow?"))
	for i := range 3 {
		turn(fmt.Sprintf("next question, take %d", i+1), next, "text")
	}
	// A history whose calls never got results: repair answers them.
	dangling := with(with(first, calls...), d.user("never mind"))
	turn("dangling calls", dangling, "text")
	turn("dangling calls again", dangling, "text")
	// Append mode, then continue.
	turn("append", "{"+d.model+sep(d.model)+`"`+d.array+`":[`+d.user("one more")+"]}", "text", "X-Thread-Mode", "append")
	turn("continue", "{"+d.model+sep(d.model)+`"`+d.array+`":[]}`, "text")
	// Back to replace with an edited history.
	edited := strings.Replace(next, `"text":"`, `"text":"(edited) `, 1)
	if edited == next {
		edited = strings.Replace(next, `"content":"`, `"content":"(edited) `, 1)
	}
	turn("edited", edited, "text")

	th := apiThread(t, p, "k9", "t-cache")
	steps = append(steps, "stored: "+th.Get("messages").Raw)
	return steps
}

func sep(s string) string {
	if s == "" {
		return ""
	}
	return ","
}

// A transcript that only adds messages shares its predecessor's buffer;
// a second successor of the same entry gets its own, and no entry's
// messages change.
func TestCachedThreadSharesItsBuffer(t *testing.T) {
	ad := openAIAdapter
	k := store.Key{Tenant: "t", Thread: "x"}
	msg := func(s string) []byte { return []byte(`{"role":"user","content":"` + s + `"}`) }
	hashesOf := func(ms [][]byte) []store.Hash {
		hs := make([]store.Hash, len(ms))
		for i, m := range ms {
			hs[i] = store.Hash(adapters.HashMessage(m))
		}
		return hs
	}
	base := [][]byte{msg("a"), msg("b")}
	e := newCachedThread(ad, k, base, hashesOf(base), make([]msgInfo, 2), nil, 0)
	grown := append(slices.Clone(base), msg("c"))
	e1 := newCachedThread(ad, k, grown, hashesOf(grown), make([]msgInfo, 3), e, 2)
	other := append(slices.Clone(base), msg("d"))
	e2 := newCachedThread(ad, k, other, hashesOf(other), make([]msgInfo, 3), e, 2)
	if &e1.buf[0] != &e.buf[0] {
		t.Error("the first successor copied the buffer")
	}
	if &e2.buf[0] == &e.buf[0] {
		t.Error("the second successor shares the buffer the first one extended")
	}
	for _, c := range []struct {
		ct   *cachedThread
		want string
	}{
		{e, `[{"role":"user","content":"a"},{"role":"user","content":"b"}]`},
		{e1, `[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"c"}]`},
		{e2, `[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"d"}]`},
	} {
		if got := string(c.ct.array()); got != c.want {
			t.Errorf("array = %s, want %s", got, c.want)
		}
		if got := string(joinArray(c.ct.msgs)); got != c.want {
			t.Errorf("msgs = %s, want %s", got, c.want)
		}
		if c.ct.digest != store.Digest(c.ct.hashes) || c.ct.restorable {
			t.Errorf("digest or restorable wrong: %+v", c.ct)
		}
	}
	r := [][]byte{msg("a"), []byte(`{"role":"assistant","content":"x","reasoning_content":"r"}`)}
	if e3 := newCachedThread(ad, k, r, hashesOf(r), make([]msgInfo, 2), e, 1); !e3.restorable {
		t.Error("a reasoning_content message is not restorable")
	}
}
