package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy"
	"github.com/chronicle-proxy/chronicle/proxy/config"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/embedded"
	"github.com/tidwall/gjson"
)

const cliToken = "cli-admin-token-51e2"

// seedCLI writes threads straight through the store API.
func seedCLI(t *testing.T, st store.Store, n int) {
	t.Helper()
	ctx := context.Background()
	write := func(k store.Key, conn, format, model string, msgs []string, status store.Status) {
		started, err := st.StartRun(ctx, store.StartRun{Key: k, RunID: k.Thread + "-r0", Owner: "seed", TTL: time.Minute, Model: model})
		if err != nil {
			t.Fatal(err)
		}
		tr := &store.Transcript{Connection: conn, Format: format, Model: model}
		for _, m := range msgs {
			s := sha256.Sum256([]byte(m))
			var h store.Hash
			copy(h[:], s[:])
			tr.Messages, tr.Hashes = append(tr.Messages, []byte(m)), append(tr.Hashes, h)
		}
		if err := st.Finish(ctx, started.Lease, &store.Finish{Status: status, Transcript: tr, Model: model,
			Usage: &store.Usage{InputTokens: 100, OutputTokens: 7}}); err != nil {
			t.Fatal(err)
		}
	}
	write(store.Key{Tenant: "acme", Thread: "tool-thread"}, "deepseek", "openai-chat", "deepseek-chat", []string{
		`{"role":"user","content":"weather in Paris?"}`,
		`{"role":"assistant","content":null,"reasoning_content":"I should call the tool.","tool_calls":[{"id":"call_9","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}`,
		`{"role":"tool","tool_call_id":"call_9","content":"18C"}`,
		`{"role":"assistant","content":"It is 18C."}`,
	}, store.Completed)
	write(store.Key{Tenant: "beta", Thread: "gem"}, "gemini", "gemini", "gemini-2.5-flash", []string{
		`{"role":"user","parts":[{"text":"hi"}]}`,
		`{"role":"model","parts":[{"text":"pondering","thought":true},{"text":"hello"}]}`,
	}, store.Interrupted)
	for i := 0; i < n; i++ {
		write(store.Key{Tenant: "bulk", Thread: fmt.Sprintf("b-%03d", i)}, "openai", "openai-chat", "gpt-4o",
			[]string{fmt.Sprintf(`{"role":"user","content":"bulk message %d"}`, i)}, store.Completed)
	}
}

// startCLIProxy serves a proxy with an admin token over st.
func startCLIProxy(t *testing.T, st store.Store) string {
	t.Helper()
	cfg, err := config.Parse([]byte(`
admin: {token: "`+cliToken+`"}
connections:
  - {name: openai, provider: openai, base_url: "http://127.0.0.1:9"}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	srv, err := proxy.New(cfg, proxy.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	return "http://" + ln.Addr().String()
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// sources runs fn against a proxy (--url) and against the store directly
// (--config), each over its own seeded embedded store.
func sources(t *testing.T, bulk int, fn func(t *testing.T, source []string)) {
	t.Run("url", func(t *testing.T) {
		st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		seedCLI(t, st, bulk)
		t.Setenv("CHRONICLE_ADMIN_TOKEN", cliToken)
		fn(t, []string{"--url", startCLIProxy(t, st)})
	})
	t.Run("config", func(t *testing.T) {
		dir := t.TempDir()
		st, err := embedded.Open(dir, embedded.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		seedCLI(t, st, bulk)
		st.Close()
		path := filepath.Join(t.TempDir(), "chronicle.yaml")
		cfg := "store: {driver: embedded, path: " + dir + "}\nconnections:\n  - {name: openai, provider: openai, base_url: \"http://127.0.0.1:9\"}\n"
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		fn(t, []string{"--config", path})
	})
}

func TestThreadsLs(t *testing.T) {
	sources(t, 5, func(t *testing.T, src []string) {
		code, out, errOut := runCLI(t, append([]string{"threads", "ls"}, src...)...)
		if code != 0 {
			t.Fatalf("ls: %d %s", code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 8 || !strings.HasPrefix(lines[0], "UPDATED") || !strings.Contains(out, "tool-thread") || !strings.Contains(out, "interrupted") {
			t.Fatalf("ls table:\n%s", out)
		}
		code, out, _ = runCLI(t, append([]string{"threads", "ls", "--json", "--tenant", "bulk", "--limit", "2", "--all"}, src...)...)
		page := gjson.Parse(out)
		if code != 0 || len(page.Get("threads").Array()) != 5 || page.Get("next_cursor").Type != gjson.Null {
			t.Fatalf("ls --json --all: %d %s", code, out)
		}
		code, out, _ = runCLI(t, append([]string{"threads", "ls", "--tenant", "bulk", "--limit", "2"}, src...)...)
		if code != 0 || !strings.Contains(out, "more: --cursor ") {
			t.Fatalf("ls one page: %d %s", code, out)
		}
		code, out, _ = runCLI(t, append([]string{"threads", "ls", "--json", "--q", "PARIS", "--status", "completed"}, src...)...)
		if code != 0 || gjson.Get(out, "threads.#").Int() != 1 || gjson.Get(out, "threads.0.id").String() != "tool-thread" {
			t.Fatalf("ls --q: %d %s", code, out)
		}
		if code, _, errOut := runCLI(t, append([]string{"threads", "ls", "--since", "yesterday"}, src...)...); code != 2 || !strings.Contains(errOut, "--since") {
			t.Fatalf("bad --since: %d %s", code, errOut)
		}
	})
}

func TestThreadsShow(t *testing.T) {
	sources(t, 0, func(t *testing.T, src []string) {
		code, out, errOut := runCLI(t, append([]string{"threads", "show", "acme", "tool-thread"}, src...)...)
		if code != 0 {
			t.Fatalf("show: %d %s", code, errOut)
		}
		for _, want := range []string{"thread     acme/tool-thread", "format     openai-chat", "RUN", "tool-thread-r0", "completed",
			"[user] weather in Paris?", "[reasoning] I should call the tool.", `[tool call get_weather call_9] {"city":"Paris"}`,
			"[tool result call_9] 18C", "[assistant] It is 18C."} {
			if !strings.Contains(out, want) {
				t.Fatalf("show lacks %q:\n%s", want, out)
			}
		}
		code, out, _ = runCLI(t, append([]string{"threads", "show", "beta", "gem", "--json"}, src...)...)
		if code != 0 || gjson.Get(out, "format").String() != "gemini" || gjson.Get(out, "messages.1.parts.0.thought").Bool() != true ||
			gjson.Get(out, "runs.0.status").String() != "interrupted" {
			t.Fatalf("show --json: %d %s", code, out)
		}
		_, out, _ = runCLI(t, append([]string{"threads", "show", "beta", "gem"}, src...)...)
		if !strings.Contains(out, "[thought] pondering") || !strings.Contains(out, "[model] hello") {
			t.Fatalf("gemini show:\n%s", out)
		}
		if code, _, errOut := runCLI(t, append([]string{"threads", "show", "acme", "missing"}, src...)...); code != 1 || !strings.Contains(errOut, "not found") && !strings.Contains(errOut, "404") {
			t.Fatalf("show missing: %d %s", code, errOut)
		}
	})
}

func TestThreadsExportAndRm(t *testing.T) {
	sources(t, 40, func(t *testing.T, src []string) {
		file := filepath.Join(t.TempDir(), "out.jsonl")
		code, out, errOut := runCLI(t, append([]string{"threads", "export", "-o", file, "--tenant", "bulk"}, src...)...)
		if code != 0 || out != "" {
			t.Fatalf("export: %d %q %s", code, out, errOut)
		}
		// stderr is not a terminal: one line at the end, no progress bar.
		if errOut != "exported 40 threads to "+file+"\n" {
			t.Fatalf("stderr not a terminal: %q", errOut)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if len(lines) != 40 {
			t.Fatalf("exported %d lines", len(lines))
		}
		for _, l := range lines {
			if !json.Valid([]byte(l)) || gjson.Get(l, "tenant").String() != "bulk" {
				t.Fatalf("bad line %q", l)
			}
		}
		// One thread, to stdout.
		code, out, _ = runCLI(t, append([]string{"threads", "export", "acme", "tool-thread"}, src...)...)
		if code != 0 || strings.Count(out, "\n") != 1 || gjson.Get(out, "id").String() != "tool-thread" {
			t.Fatalf("export one: %d %q", code, out)
		}
		code, out, errOut = runCLI(t, append([]string{"threads", "rm", "acme", "tool-thread"}, src...)...)
		if code != 0 || !strings.Contains(out, "deleted acme/tool-thread (1 runs)") {
			t.Fatalf("rm: %d %s %s", code, out, errOut)
		}
		if code, _, _ := runCLI(t, append([]string{"threads", "show", "acme", "tool-thread"}, src...)...); code != 1 {
			t.Fatalf("show after rm: %d", code)
		}
		if code, _, _ := runCLI(t, append([]string{"threads", "rm", "acme"}, src...)...); code != 2 {
			t.Fatalf("rm without thread: %d", code)
		}
	})
}

func TestThreadsSourceErrors(t *testing.T) {
	t.Setenv("CHRONICLE_ADMIN_TOKEN", "")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"threads", "ls"}, "--url"},
		{[]string{"threads", "ls", "--url", "http://127.0.0.1:1"}, "CHRONICLE_ADMIN_TOKEN"},
		{[]string{"threads", "ls", "--url", "x", "--config", "y"}, "not both"},
		{[]string{"threads", "nope", "--url", "http://127.0.0.1:1"}, "CHRONICLE_ADMIN_TOKEN"},
		{[]string{"threads"}, "usage:"},
	}
	for _, c := range cases {
		code, _, errOut := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: %d %q", c.args, code, errOut)
		}
	}
	// A wrong token: the proxy's 401, and no token in the output.
	st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	url := startCLIProxy(t, st)
	t.Setenv("CHRONICLE_ADMIN_TOKEN", "wrong-token-value")
	code, out, errOut := runCLI(t, "threads", "ls", "--url", url)
	if code != 1 || !strings.Contains(errOut, "401") || strings.Contains(out+errOut, "wrong-token-value") {
		t.Fatalf("wrong token: %d %q %q", code, out, errOut)
	}
}

// TestThreadsFork: a fork shows its parent and fork point in `threads
// show` and in the FORK OF column of `threads ls`.
func TestThreadsFork(t *testing.T) {
	dir := t.TempDir()
	st, err := embedded.Open(dir, embedded.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	seedCLI(t, st, 0)
	from := store.Key{Tenant: "acme", Thread: "tool-thread"}
	if _, err := st.ForkThread(context.Background(), store.Fork{From: from, To: store.Key{Tenant: "acme", Thread: "tool-fork"}, At: 2, Run: "tool-thread-r0"}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	path := filepath.Join(t.TempDir(), "chronicle.yaml")
	cfg := "store: {driver: embedded, path: " + dir + "}\nconnections:\n  - {name: openai, provider: openai, base_url: \"http://127.0.0.1:9\"}\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "threads", "show", "acme", "tool-fork", "--config", path)
	if code != 0 || !strings.Contains(out, "forked     from acme/tool-thread at message 2 (the end of run tool-thread-r0)") {
		t.Fatalf("show: %d %s %s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "threads", "ls", "--tenant", "acme", "--config", path)
	if code != 0 || !strings.Contains(out, "FORK OF") || !strings.Contains(out, "tool-thread@2") {
		t.Fatalf("ls: %d %s %s", code, out, errOut)
	}
}
