package proxy

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chronicle-proxy/chronicle/store"
)

// TestUIAssets: the page and its files are served from the binary, with
// their content types; unknown files are 404; the data stays behind the
// token.
func TestUIAssets(t *testing.T) {
	p := startAdminProxy(t, backends[0].open(t))
	for path, ct := range map[string]string{"/ui": "text/html", "/ui/": "text/html", "/ui/app.js": "text/javascript", "/ui/style.css": "text/css"} {
		resp, body := do(t, "GET", p.URL+path, "")
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ct) || len(body) < 100 ||
			!strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("%s: %d %q %d bytes", path, resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
		}
	}
	for _, path := range []string{"/ui/nope.js", "/ui/../admin.go", "/ui/ui/app.js"} {
		if resp, _ := do(t, "GET", p.URL+path, ""); resp.StatusCode != 404 {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
	}
	if resp, _ := do(t, "POST", p.URL+"/ui", ""); resp.StatusCode != 405 {
		t.Errorf("POST /ui: %d", resp.StatusCode)
	}
}

// uiCorpus: one thread of each wire format, the chat one with reasoning, a
// tool call and its result, plus threads to filter away.
func uiCorpus() []seedThread {
	u := &store.Usage{InputTokens: 812, OutputTokens: 64, CachedTokens: 512, ReasoningTokens: 20}
	return []seedThread{
		{key: store.Key{Tenant: "acme", Thread: "weather-paris"}, conn: "deepseek", format: "openai-chat", model: "deepseek-chat",
			msgs: []string{
				`{"role":"system","content":"You are a weather assistant."}`,
				`{"role":"user","content":"What is the weather in Paris?"}`,
				`{"role":"assistant","content":null,"reasoning_content":"The user wants current weather; I should call the tool.","tool_calls":[{"id":"call_w1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}`,
				`{"role":"tool","tool_call_id":"call_w1","content":"{\"temp_c\":18,\"sky\":\"cloudy\"}"}`,
				`{"role":"assistant","content":"It is 18 °C and cloudy in Paris."}`,
			},
			// A run parked on a call that the next run answered, and one
			// still waiting for its result.
			runs: []seedRun{{status: store.Interrupted, usage: u}, {status: store.Completed, usage: u, resumes: true}, {status: store.Interrupted, usage: u}}},
		{key: store.Key{Tenant: "acme", Thread: "gem-haiku"}, conn: "gemini", format: "gemini", model: "gemini-2.5-flash",
			system: `{"parts":[{"text":"Answer in haiku."}]}`,
			msgs: []string{
				`{"role":"user","parts":[{"text":"Describe autumn."}]}`,
				`{"role":"model","parts":[{"text":"Five, seven, five syllables.","thought":true},{"functionCall":{"name":"lookup_season","args":{"season":"autumn"}},"thoughtSignature":"c2ln"}]}`,
				`{"role":"user","parts":[{"functionResponse":{"name":"lookup_season","response":{"colors":["red","gold"]}}}]}`,
				`{"role":"model","parts":[{"text":"Red and gold leaves fall"}]}`,
			}},
		{key: store.Key{Tenant: "beta", Thread: "resp-1"}, conn: "openai", format: "openai-responses", model: "gpt-5",
			msgs: []string{
				`{"role":"user","content":"Add 2 and 3."}`,
				`{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"Use the add tool."}],"encrypted_content":"xyz"}`,
				`{"type":"function_call","call_id":"fc_1","name":"add","arguments":"{\"a\":2,\"b\":3}"}`,
				`{"type":"function_call_output","call_id":"fc_1","output":"5"}`,
				`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"2 + 3 = 5"}]}`,
			}},
		{key: store.Key{Tenant: "beta", Thread: "claude-loop"}, conn: "claude", format: "anthropic-messages", model: "claude-sonnet-4-5",
			system: `[{"type":"text","text":"You are terse."}]`,
			msgs: []string{
				`{"role":"user","content":"Weather in Tokyo?"}`,
				`{"role":"assistant","content":[{"type":"thinking","thinking":"Call the tool.","signature":"c2lnbmF0dXJl"},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Tokyo"}}]}`,
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"rain"}]}`,
				`{"role":"assistant","content":[{"type":"text","text":"Rain in Tokyo."}]}`,
			}},
		{key: store.Key{Tenant: "beta", Thread: "small-talk"}, conn: "openai", format: "openai-chat", model: "gpt-4o",
			msgs: []string{`{"role":"user","content":"hello"}`, `{"role":"assistant","content":"Hi there!"}`}},
	}
}

type uiBlock struct {
	Kind  string `json:"kind"`
	Label string `json:"label"`
	Text  string `json:"text"`
}

const blocksJS = `Array.from(document.querySelectorAll('#transcript li')).map(li => ({kind: li.dataset.kind, label: li.querySelector('.label').textContent, text: li.querySelector('.body').textContent}))`

// TestUIBrowser drives the page in headless Chromium: a wrong token is
// refused, the right one opens the list, a filter narrows it, and a
// transcript with a tool call shows each kind of content apart, with the
// runs' status, usage and duration. A screenshot is saved as an artifact.
func TestUIBrowser(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed (scripts/setup installs it)")
		}
		t.Skip("chromium is not installed; scripts/setup installs it")
	}
	st := backends[0].open(t)
	for _, s := range uiCorpus() {
		seed(t, st, s)
	}
	p := startAdminProxy(t, st)

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1100),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()

	shots := artifactDir(t)
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(what, js string, out any) {
		t.Helper()
		raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](js))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if out != nil {
			if err := json.Unmarshal(raw, out); err != nil {
				t.Fatalf("%s: %v (%s)", what, err, raw)
			}
		}
	}
	poll := func(what, js string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](js)); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	screenshot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	do("wrong token",
		chromedp.Navigate(p.URL+"/ui"),
		chromedp.WaitVisible(css("#token")),
		chromedp.SendKeys(css("#token"), "not-the-token"),
		chromedp.Click(css("#login-form button")),
	)
	poll("login error", `document.querySelector('#login-error').textContent.length > 0`)
	var loginErr string
	eval("login error", `document.querySelector('#login-error').textContent`, &loginErr)
	if !strings.Contains(loginErr, "not accepted") {
		t.Fatalf("wrong token: login error %q", loginErr)
	}
	do("right token",
		chromedp.SendKeys(css("#token"), adminToken),
		chromedp.Click(css("#login-form button")),
		chromedp.WaitVisible(css("#threads tbody tr")),
	)
	var rows int
	eval("rows", `document.querySelectorAll('#threads tbody tr').length`, &rows)
	if rows != len(uiCorpus()) {
		t.Fatalf("list shows %d threads, want %d", rows, len(uiCorpus()))
	}
	screenshot("ui-list.png")
	do("filter",
		chromedp.SendKeys(css(`#filters input[name=q]`), "paris"),
		chromedp.SendKeys(css(`#filters input[name=tenant]`), "acme"),
		chromedp.Click(css("#apply")),
	)
	poll("filtered", `document.querySelectorAll('#threads tbody tr').length === 1`)
	var listed []string
	eval("listed", `Array.from(document.querySelectorAll('#threads tbody tr')).map(r => r.dataset.tenant + '/' + r.dataset.id)`, &listed)
	if len(listed) != 1 || listed[0] != "acme/weather-paris" {
		t.Fatalf("filtered list: %v", listed)
	}
	screenshot("ui-filtered.png")
	do("open transcript", chromedp.Click(css("#threads tbody tr")), chromedp.WaitVisible(css("#detail-pane")))
	var blocks []uiBlock
	var runsText, title string
	eval("blocks", blocksJS, &blocks)
	eval("runs", `document.querySelector('#runs').innerText`, &runsText)
	eval("title", `document.querySelector('#detail-title').textContent`, &title)
	if title != "acme / weather-paris" {
		t.Fatalf("title %q", title)
	}
	var metaText string
	eval("meta", `document.querySelector('#detail-meta').innerText`, &metaText)
	if !strings.Contains(metaText, "kept forever") { // no retention configured
		t.Fatalf("thread meta lacks its retention:\n%s", metaText)
	}
	if got := kindsOf(blocks); got != "system,user,reasoning,tool-call,tool-result,assistant" {
		t.Fatalf("transcript kinds %s: %+v", got, blocks)
	}
	call, result := blocks[3], blocks[4]
	if !strings.Contains(call.Label, "get_weather") || !strings.Contains(call.Label, "call_w1") || !strings.Contains(call.Text, `"city": "Paris"`) {
		t.Fatalf("tool call block %+v", call)
	}
	if !strings.Contains(result.Label, "call_w1") || !strings.Contains(result.Text, `"temp_c": 18`) {
		t.Fatalf("tool result block %+v", result)
	}
	if !strings.Contains(blocks[2].Text, "call the tool") || !strings.Contains(blocks[5].Text, "18 °C") {
		t.Fatalf("reasoning/assistant blocks %+v", blocks)
	}
	for _, want := range []string{"interrupted", "completed", "in 812", "out 64", "cached 512", "reasoning 20", "weather-paris-r0", "weather-paris-r1", " ms"} {
		if !strings.Contains(runsText, want) {
			t.Fatalf("runs table lacks %q:\n%s", want, runsText)
		}
	}
	// Issue 33, item 12: a parked run whose call was answered is not shown
	// as a (yellow) interrupted run still waiting; the run still waiting is.
	type runBadge struct{ ID, Badge, Color, Note string }
	var badges []runBadge
	eval("run badges", `Array.from(document.querySelectorAll('#runs tbody tr')).map(tr => {
		const b = tr.querySelector('.badge');
		return {ID: tr.cells[0].textContent, Badge: b.textContent, Color: getComputedStyle(b).backgroundColor, Note: tr.cells[1].innerText};
	})`, &badges)
	if len(badges) != 3 || badges[0].Badge != "resumed" || badges[1].Badge != "completed" || badges[2].Badge != "interrupted" {
		t.Fatalf("run badges %+v, want resumed, completed, interrupted", badges)
	}
	if badges[0].Color == badges[2].Color || !strings.Contains(badges[0].Note, "parked as interrupted") {
		t.Fatalf("the resumed run looks like the waiting one: %+v", badges)
	}
	// Call ids are case-sensitive: shown as stored, not in capitals.
	var labels []string
	eval("labels", `Array.from(document.querySelectorAll('#transcript li .label')).map(l => l.innerText)`, &labels)
	if !strings.Contains(labels[3], "get_weather · call_w1") || !strings.Contains(labels[4], "call_w1") {
		t.Fatalf("tool labels %q: the call id is not as stored", labels)
	}
	// Each thread has a URL, which opens it.
	var hash string
	eval("hash", `location.hash`, &hash)
	if hash != "#/t/acme/weather-paris" {
		t.Fatalf("an open thread's URL hash is %q, want #/t/acme/weather-paris", hash)
	}
	// Distinct styling: each kind has its own background.
	var colors map[string]string
	eval("styles", `Object.fromEntries(Array.from(document.querySelectorAll('#transcript li')).map(li => [li.dataset.kind, getComputedStyle(li).backgroundColor]))`, &colors)
	seen := map[string]string{}
	for k, c := range colors {
		if other, dup := seen[c]; dup {
			t.Fatalf("%s and %s look the same (%s)", k, other, c)
		}
		seen[c] = k
	}
	screenshot("ui-transcript.png")

	// Gemini: thought parts are reasoning, functionCall/Response are tool
	// blocks, the system instruction comes first.
	eval("gemini", `openThread('acme', 'gem-haiku')`, nil)
	poll("gemini title", `document.querySelector('#detail-title').textContent === 'acme / gem-haiku'`)
	eval("gemini blocks", blocksJS, &blocks)
	if got := kindsOf(blocks); got != "system,user,reasoning,tool-call,tool-result,assistant" {
		t.Fatalf("gemini kinds %s: %+v", got, blocks)
	}
	if !strings.Contains(blocks[3].Label, "lookup_season") || strings.Contains(blocks[3].Text, "c2ln") {
		t.Fatalf("gemini call %+v", blocks[3])
	}
	screenshot("ui-gemini.png")
	// Responses items.
	eval("responses", `openThread('beta', 'resp-1')`, nil)
	poll("responses title", `document.querySelector('#detail-title').textContent === 'beta / resp-1'`)
	eval("responses blocks", blocksJS, &blocks)
	if got := kindsOf(blocks); got != "user,reasoning,tool-call,tool-result,assistant" {
		t.Fatalf("responses kinds %s: %+v", got, blocks)
	}
	if blocks[1].Text != "Use the add tool." || blocks[4].Text != "2 + 3 = 5" {
		t.Fatalf("responses blocks %+v", blocks)
	}
	// Anthropic blocks: thinking (its signature not shown), tool_use and
	// tool_result apart, the system first.
	eval("anthropic", `openThread('beta', 'claude-loop')`, nil)
	poll("anthropic title", `document.querySelector('#detail-title').textContent === 'beta / claude-loop'`)
	eval("anthropic blocks", blocksJS, &blocks)
	if got := kindsOf(blocks); got != "system,user,reasoning,tool-call,tool-result,assistant" {
		t.Fatalf("anthropic kinds %s: %+v", got, blocks)
	}
	if !strings.Contains(blocks[3].Label, "get_weather") || strings.Contains(blocks[2].Text, "c2lnbmF0dXJl") || blocks[5].Text != "Rain in Tokyo." {
		t.Fatalf("anthropic blocks %+v", blocks)
	}
	// Back to the list: the filter is still applied, and the URL is the
	// list's.
	do("back", chromedp.Click(css("#back")), chromedp.WaitVisible(css("#list-pane")))
	eval("rows", `document.querySelectorAll('#threads tbody tr').length`, &rows)
	if rows != 1 {
		t.Fatalf("after back: %d rows", rows)
	}
	eval("hash", `location.hash`, &hash)
	if hash != "" {
		t.Fatalf("the list's URL hash is %q", hash)
	}
	// A thread's URL opens that thread on load (the token is still in the
	// tab), and the browser's back button returns to the list.
	// (about:blank first, so the page loads afresh rather than moving to a
	// fragment of the page already open.)
	do("thread URL", chromedp.Navigate("about:blank"), chromedp.Navigate(p.URL+"/ui#/t/beta/resp-1"), chromedp.WaitVisible(css("#detail-pane")))
	poll("thread from URL", `document.querySelector('#detail-title').textContent === 'beta / resp-1' && !document.querySelector('#detail-pane').hidden`)
	eval("another thread URL", `location.hash = '#/t/acme/gem-haiku'`, nil)
	poll("hash change", `document.querySelector('#detail-title').textContent === 'acme / gem-haiku' && !document.querySelector('#detail-pane').hidden`)
	eval("history back", `history.back()`, nil)
	poll("back to resp-1", `document.querySelector('#detail-title').textContent === 'beta / resp-1' && !document.querySelector('#detail-pane').hidden`)
	// An unknown thread's URL says so, over the list.
	eval("unknown thread URL", `location.hash = '#/t/acme/no-such-thread'`, nil)
	poll("unknown thread", `document.querySelector('#list-status').textContent.includes('no-such-thread') && document.querySelector('#detail-pane').hidden`)
	// A fork names its parent and fork point, and the parent is a link
	// that opens it.
	if _, err := st.ForkThread(context.Background(), store.Fork{From: store.Key{Tenant: "acme", Thread: "gem-haiku"},
		To: store.Key{Tenant: "acme", Thread: "gem-fork"}, At: 2}); err != nil {
		t.Fatal(err)
	}
	eval("fork URL", `location.hash = '#/t/acme/gem-fork'`, nil)
	poll("fork", `document.querySelector('#detail-title').textContent === 'acme / gem-fork' && document.querySelector('#parent-link') !== null && document.querySelector('#detail-meta').textContent.includes('at message 2')`)
	eval("parent link", `document.querySelector('#parent-link').click()`, nil)
	poll("parent from the fork", `document.querySelector('#detail-title').textContent === 'acme / gem-haiku' && document.querySelector('#parent-link') === null`)
	t.Logf("screenshots in %s", shots)

	// The page's token never reached the log.
	if strings.Contains(p.log.String(), adminToken) {
		t.Fatal("the admin token is in the log")
	}
}

func kindsOf(bs []uiBlock) string {
	var k []string
	for _, b := range bs {
		k = append(k, b.Kind)
	}
	return strings.Join(k, ",")
}

// artifactDir is $CHRONICLE_ARTIFACTS when set, else a test temp dir.
func artifactDir(t *testing.T) string {
	if d := os.Getenv("CHRONICLE_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}
