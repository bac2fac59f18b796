package proxy

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

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
	e1 := nextCachedThread(ad, k, e, false, 2, e.msgs, grown, hashesOf(grown), make([]msgInfo, 3))
	other := append(slices.Clone(base), msg("d"))
	e2 := nextCachedThread(ad, k, e, false, 2, e.msgs, other, hashesOf(other), make([]msgInfo, 3))
	if &e1.buf[0] != &e.buf[0] || &e1.msgs[0] != &e.msgs[0] {
		t.Error("the first successor copied the buffer or the message slices")
	}
	// The second keeps e's messages without the one e1 appended: it
	// shares their bytes, not the buffer e1 extended.
	if e2.buf != nil || &e2.msgs[0][0] != &e.msgs[0][0] || &e2.msgs[1][0] != &e.msgs[1][0] {
		t.Error("the second successor copied the kept messages, or shares the extended buffer")
	}
	// Regenerating again from e2 shares the same bytes; growing it copies
	// into a buffer of its own.
	again := append(slices.Clone(base), msg("f"))
	e4 := nextCachedThread(ad, k, e2, false, 2, e2.msgs, again, hashesOf(again), make([]msgInfo, 3))
	if e4.buf != nil || &e4.msgs[0][0] != &e.msgs[0][0] {
		t.Error("a regenerate from a sharing entry copied")
	}
	longer := append(slices.Clone(other), msg("g"))
	e5 := nextCachedThread(ad, k, e2, false, 3, e2.msgs, longer, hashesOf(longer), make([]msgInfo, 4))
	if e5.buf == nil || &e5.msgs[0][0] == &e.msgs[0][0] {
		t.Error("growing a sharing entry did not copy it into a buffer of its own")
	}
	// A turn that claimed e1 itself (compose) extends it, and its parts
	// may live in e1's message slices past their length.
	if !e1.extended.CompareAndSwap(false, true) {
		t.Fatal("e1 was claimed already")
	}
	parts := append(e1.msgs, msg("e"))
	third := append(slices.Clone(grown), msg("e"))
	e3 := nextCachedThread(ad, k, e1, true, 3, e1.msgs, parts, hashesOf(third), make([]msgInfo, 4))
	if &e3.buf[0] != &e.buf[0] || &e3.msgs[0] != &e.msgs[0] {
		t.Error("the claimed successor copied the buffer or the message slices")
	}
	for _, c := range []struct {
		ct   *cachedThread
		want string
	}{
		{e, `[{"role":"user","content":"a"},{"role":"user","content":"b"}]`},
		{e1, `[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"c"}]`},
		{e2, `[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"d"}]`},
		{e3, `[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"c"},{"role":"user","content":"e"}]`},
		{e4, `[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"f"}]`},
		{e5, `[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"d"},{"role":"user","content":"g"}]`},
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
	er := newCachedThread(ad, k, r, hashesOf(r), make([]msgInfo, 2), e, 1)
	if !er.restorable {
		t.Error("a reasoning_content message is not restorable")
	}
	// A sharing entry knows whether its kept prefix has one.
	dropped := [][]byte{msg("a"), msg("z")}
	if ed := nextCachedThread(ad, k, er, false, 1, er.msgs, dropped, hashesOf(dropped), make([]msgInfo, 2)); ed.buf != nil || ed.restorable {
		t.Errorf("dropping the reasoning message: shared %v, restorable %v", ed.buf == nil, ed.restorable)
	}
	kept := append(slices.Clone(r), msg("z"))
	if ek := nextCachedThread(ad, k, er, false, 2, er.msgs, kept, hashesOf(kept), make([]msgInfo, 3)); !ek.restorable {
		t.Error("keeping the reasoning message lost restorable")
	}
}

// Two replicas on one Redis take turns on a thread, and an operator
// deletes it in between: each replica's kept transcript is stale after
// the other wrote, is read again in full (a miss), and no turn sends or
// stores anything a single replica without a cache would not.
func TestThreadCacheAcrossReplicas(t *testing.T) {
	m := startMock(t)
	open := sharedRedis(t)
	a := startProxyWith(t, m, persistConfig, open())
	b := startProxyWith(t, m, persistConfig, open())
	url := "/openai/v1/chat/completions"
	hdr := []string{"Authorization", "Bearer k8", "X-Thread-Id", "t-two", "X-Mock-Scenario", "text"}
	history := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	var wantMsgs int
	for i, p := range []*testProxy{a, a, b, b, a, b} {
		resp, out := do(t, "POST", p.URL+url, history, hdr...)
		if resp.StatusCode != 200 {
			t.Fatalf("turn %d: %d %s", i, resp.StatusCode, out)
		}
		reply := gjson.GetBytes(out, "choices.0.message").Raw
		history, _ = sjson.SetRaw(history, "messages.-1", reply)
		history, _ = sjson.SetRaw(history, "messages.-1", fmt.Sprintf(`{"role":"user","content":"turn %d"}`, i))
		wantMsgs = int(gjson.Get(history, "messages.#").Int()) - 1
		if got := string(m.Requests()[len(m.Requests())-1].Body); !strings.Contains(got, fmt.Sprintf("turn %d", i-1)) && i > 0 {
			t.Fatalf("turn %d: upstream did not get the previous turn: %s", i, got)
		}
	}
	th := apiThread(t, a, "k8", "t-two")
	if n := len(th.Get("messages").Array()); n != wantMsgs {
		t.Fatalf("stored %d messages, want %d: %s", n, wantMsgs, th.Get("messages").Raw)
	}
	// a: turn 0 new, turn 1 hit, turn 4 miss (b wrote); b: turn 2 miss, turn 3 hit, turn 5 miss.
	if h, ms := a.threads.hits.Load(), a.threads.misses.Load(); h != 1 || ms != 1 {
		t.Errorf("replica a: %d hits, %d misses; want 1, 1", h, ms)
	}
	if h, ms := b.threads.hits.Load(), b.threads.misses.Load(); h != 1 || ms != 2 {
		t.Errorf("replica b: %d hits, %d misses; want 1, 2", h, ms)
	}

	// Deleted and started again with the same first message: a's kept
	// transcript must not stand in for the new thread.
	admin := open()
	page, err := admin.ListThreads(context.Background(), store.ThreadQuery{})
	if err != nil || len(page.Threads) != 1 {
		t.Fatalf("threads: %+v %v", page, err)
	}
	if err := admin.DeleteThread(context.Background(), page.Threads[0].Key); err != nil {
		t.Fatal(err)
	}
	fresh := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	if resp, out := do(t, "POST", b.URL+url, fresh, hdr...); resp.StatusCode != 200 {
		t.Fatalf("after delete: %d %s", resp.StatusCode, out)
	}
	next := `{"model":"gpt-4o","messages":[],"stream":false}`
	if resp, out := do(t, "POST", a.URL+url, next, hdr...); resp.StatusCode != 200 {
		t.Fatalf("continue on a: %d %s", resp.StatusCode, out)
	}
	got := gjson.GetBytes(m.Requests()[len(m.Requests())-1].Body, "messages")
	if n := len(got.Array()); n != 2 || strings.Contains(got.Raw, "turn ") {
		t.Fatalf("continue on a sent %s; want the new thread's two messages", got.Raw)
	}
}

// A thread that grows past its buffer's room moves to a buffer of its
// own, whole: every message of every entry lies in that entry's buffer,
// so no entry keeps an outgrown buffer alive beside its new one (which
// its size would not count), and the entries it grew from still read as
// they did.
func TestCachedThreadOutgrowsItsBuffer(t *testing.T) {
	ad := openAIAdapter
	k := store.Key{Tenant: "t", Thread: "grows"}
	msg := func(i int) []byte {
		return []byte(`{"role":"user","content":"` + strings.Repeat("x", 100+i%7) + strconv.Itoa(i) + `"}`)
	}
	msgs := [][]byte{msg(0)}
	hashes := []store.Hash{store.Hash(adapters.HashMessage(msgs[0]))}
	e := newCachedThread(ad, k, msgs, hashes, make([]msgInfo, 1), nil, 0)
	entries := []*cachedThread{e}
	moves := 0
	for i := 1; i < 200; i++ {
		msgs = append(slices.Clone(msgs), msg(i))
		hashes = append(slices.Clone(hashes), store.Hash(adapters.HashMessage(msgs[i])))
		next := nextCachedThread(ad, k, e, false, i, e.msgs, msgs, hashes, make([]msgInfo, i+1))
		if next.buf == nil {
			t.Fatalf("turn %d: no buffer", i)
		}
		if &next.buf[0] != &e.buf[0] {
			moves++
		}
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(next.buf)))
		hi := lo + uintptr(len(next.buf))
		for j, m := range next.msgs {
			p := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
			if p < lo || p+uintptr(len(m)) > hi {
				t.Fatalf("turn %d: message %d lies outside the entry's buffer", i, j)
			}
		}
		if int64(cap(next.buf)) > next.size {
			t.Fatalf("turn %d: size %d does not count the buffer (%d)", i, next.size, cap(next.buf))
		}
		e = next
		entries = append(entries, e)
	}
	if moves < 3 {
		t.Fatalf("the buffer moved %d times over 200 turns; the test wants it to outgrow its room", moves)
	}
	for i, en := range entries {
		if got, want := string(en.array()), string(joinArray(msgs[:i+1])); got != want {
			t.Fatalf("entry %d reads %.80s…, want %.80s…", i, got, want)
		}
	}
}

// A request that names no thread gets a thread of its own, which the
// cache does not keep: a client that never sends X-Thread-Id would fill
// it with threads nobody continues. Continuing the thread by the id the
// answer returned reads it from the store once, and keeps it from then.
func TestThreadCacheSkipsUnnamedThreads(t *testing.T) {
	m := startMock(t)
	p := startProxyWith(t, m, persistConfig, openEmbedded(t, t.TempDir()))
	url := p.URL + "/openai/v1/chat/completions"
	first := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	kept := func() int {
		p.threads.mu.Lock()
		defer p.threads.mu.Unlock()
		return len(p.threads.byKey)
	}
	var thread string
	for i := 0; i < 3; i++ {
		resp, out := do(t, "POST", url, first, "Authorization", "Bearer k9", "X-Mock-Scenario", "text")
		if resp.StatusCode != 200 {
			t.Fatalf("unnamed turn %d: %d %s", i, resp.StatusCode, out)
		}
		thread = resp.Header.Get("X-Thread-Id")
		if n := kept(); n != 0 {
			t.Fatalf("unnamed turn %d: the cache keeps %d threads", i, n)
		}
		if i == 2 {
			reply := gjson.GetBytes(out, "choices.0.message").Raw
			first, _ = sjson.SetRaw(first, "messages.-1", reply)
			first, _ = sjson.SetRaw(first, "messages.-1", `{"role":"user","content":"and then?"}`)
		}
	}
	for i := 0; i < 2; i++ {
		resp, out := do(t, "POST", url, first, "Authorization", "Bearer k9", "X-Mock-Scenario", "text", "X-Thread-Id", thread)
		if resp.StatusCode != 200 {
			t.Fatalf("named turn %d: %d %s", i, resp.StatusCode, out)
		}
	}
	// The first named turn read the thread from the store (a miss) and
	// kept it; the second found it kept.
	if h, ms, n := p.threads.hits.Load(), p.threads.misses.Load(), kept(); h != 1 || ms != 1 || n != 1 {
		t.Fatalf("%d hits, %d misses, %d kept; want 1, 1, 1", h, ms, n)
	}
	// hi, the reply, and then?, and the (regenerated) reply.
	if n := len(apiThread(t, p, "k9", thread).Get("messages").Array()); n != 4 {
		t.Fatalf("the continued thread holds %d messages, want 4", n)
	}
}

// A plain message is kept without a detail object; a tool result keeps
// the call id it answers.
func TestInfoOfPlainMessages(t *testing.T) {
	ad := openAIAdapter
	var infos []msgInfo
	_ = ad.WalkMessages([]byte(`[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"c1","content":"42"}]`), func(m adapters.Message) bool {
		infos = append(infos, infoOf(ad, m))
		return true
	})
	if len(infos) != 2 || infos[0].detail != nil || !infos[0].skim().Plain() || infos[1].detail == nil || len(infos[1].results()) != 1 || infos[1].results()[0] != "c1" {
		t.Fatalf("infos: %+v", infos)
	}
}
