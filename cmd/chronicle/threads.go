package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/admin"
	"github.com/chronicle-proxy/chronicle/proxy/config"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/tidwall/gjson"
)

const threadsUsage = `usage:
  chronicle threads ls     [source] [filters] [--limit N] [--cursor C] [--all] [--json]
  chronicle threads show   [source] TENANT THREAD [--json]
  chronicle threads export [source] [filters | TENANT THREAD] [-o FILE]
  chronicle threads rm     [source] TENANT THREAD
  chronicle threads prune  [source] [--dry-run] [--json]   delete threads past their retention

source (one of):
  --url http://host:port   a running proxy; the admin token comes from CHRONICLE_ADMIN_TOKEN
  --config FILE            the store named in FILE, read directly (the proxy must not hold an
                           embedded store open at the same time)
filters (as GET /admin/threads):
  --tenant T --connection C --model M --status S --since RFC3339 --until RFC3339 --q TEXT
`

// threadsCmd is `chronicle threads ...`. It writes results to stdout and
// progress and errors to stderr, and returns the exit code.
func threadsCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, threadsUsage)
		return 2
	}
	sub := args[0]
	if isHelp(sub) {
		fmt.Fprint(stdout, threadsUsage)
		return 0
	}
	fs := flag.NewFlagSet("threads "+sub, flag.ContinueOnError)
	urlFlag := fs.String("url", "", "a running proxy's base URL")
	cfgFlag := fs.String("config", "", "config file naming the store to read directly")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	all := fs.Bool("all", false, "ls: follow the cursor to the end")
	out := fs.String("o", "", "export: write to FILE (a progress bar goes to stderr)")
	dryRun := fs.Bool("dry-run", false, "prune: list what would be deleted, delete nothing")
	var q admin.AuditQuery
	var status, since, until string
	fs.StringVar(&q.Tenant, "tenant", "", "filter: tenant")
	fs.StringVar(&q.Connection, "connection", "", "filter: connection")
	fs.StringVar(&q.Model, "model", "", "filter: model")
	fs.StringVar(&status, "status", "", "filter: last run status")
	fs.StringVar(&since, "since", "", "filter: updated at or after (RFC 3339)")
	fs.StringVar(&until, "until", "", "filter: updated at or before (RFC 3339)")
	fs.StringVar(&q.Text, "q", "", "filter: text in the messages")
	fs.IntVar(&q.Limit, "limit", 0, "ls: page size (default 50, max 500)")
	fs.StringVar(&q.Cursor, "cursor", "", "ls: continue from this cursor")
	var pos []string
	code, done := parseFlags(fs, threadsUsage, stdout, stderr, func() (err error) {
		pos, err = parseInterspersed(fs, args[1:])
		return err
	})
	if done {
		return code
	}
	var err error
	q.Status = store.Status(status)
	for _, t := range []struct {
		name string
		v    string
		dst  *time.Time
	}{{"since", since, &q.Since}, {"until", until, &q.Until}} {
		if t.v == "" {
			continue
		}
		if *t.dst, err = time.Parse(time.RFC3339Nano, t.v); err != nil {
			fmt.Fprintf(stderr, "chronicle threads: --%s: want an RFC 3339 time such as 2026-01-02T15:04:05Z, got %q\n", t.name, t.v)
			return 2
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	src, closeSrc, err := openSource(ctx, *urlFlag, *cfgFlag)
	if err != nil {
		fmt.Fprintf(stderr, "chronicle threads: %v\n", err)
		return 2
	}
	defer closeSrc()
	key := func() (store.Key, bool) {
		if len(pos) != 2 {
			fmt.Fprintf(stderr, "chronicle threads %s: want TENANT THREAD\n", sub)
			return store.Key{}, false
		}
		return store.Key{Tenant: pos[0], Thread: pos[1]}, true
	}
	switch sub {
	case "ls":
		err = threadsLs(ctx, src, q, *all, *asJSON, stdout)
	case "show":
		k, ok := key()
		if !ok {
			return 2
		}
		err = threadsShow(ctx, src, k, *asJSON, stdout)
	case "export":
		var k *store.Key
		if len(pos) > 0 {
			kk, ok := key()
			if !ok {
				return 2
			}
			k = &kk
		}
		err = threadsExport(ctx, src, q, k, *out, stdout, stderr)
	case "rm":
		k, ok := key()
		if !ok {
			return 2
		}
		var runs int
		if runs, err = src.Delete(ctx, k); err == nil {
			fmt.Fprintf(stdout, "deleted %s/%s (%d runs)\n", k.Tenant, k.Thread, runs)
		}
	case "prune":
		err = threadsPrune(ctx, src, *dryRun, *asJSON, stdout) // prune.go
	default:
		fmt.Fprintf(stderr, "chronicle threads: unknown subcommand %q\n\n%s", sub, threadsUsage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "chronicle threads %s: %v\n", sub, err)
		return 1
	}
	return 0
}

// parseInterspersed parses flags that may come after positional
// arguments (`show acme t1 --json`), returning the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// auditSource is where the threads commands read: a proxy's admin API or
// the store itself.
type auditSource interface {
	List(ctx context.Context, q admin.AuditQuery) (admin.AuditPage, error)
	Thread(ctx context.Context, k store.Key) ([]byte, error)
	// Export writes JSONL (one thread, or every thread passing q) and
	// reports each line written.
	Export(ctx context.Context, q admin.AuditQuery, k *store.Key, w io.Writer, progress func(int)) (int, error)
	Delete(ctx context.Context, k store.Key) (int, error)
}

func openSource(ctx context.Context, base, cfgPath string) (auditSource, func(), error) {
	switch {
	case base != "" && cfgPath != "":
		return nil, nil, errors.New("pass --url or --config, not both")
	case base != "":
		tok := os.Getenv("CHRONICLE_ADMIN_TOKEN")
		if tok == "" {
			return nil, nil, errors.New("--url needs the admin token in CHRONICLE_ADMIN_TOKEN")
		}
		u, err := url.Parse(strings.TrimRight(base, "/"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, nil, fmt.Errorf("--url: want http://host:port, got %q", base)
		}
		return &httpSource{base: u.String(), token: tok, client: &http.Client{}}, func() {}, nil
	case cfgPath != "":
		cfg, err := config.Load(cfgPath)
		if err != nil {
			return nil, nil, err
		}
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		st, err := openStore(octx, cfg, nil)
		if err != nil {
			return nil, nil, err
		}
		if sst, err := sealStore(octx, st, st, cfg); err != nil {
			st.Close()
			return nil, nil, err
		} else {
			st = sst
		}
		return storeSource{a: admin.NewAudit(st), cfg: cfg}, func() { st.Close() }, nil
	}
	return nil, nil, errors.New("pass --url http://host:port (a running proxy) or --config FILE (the store directly)")
}

// storeSource reads the store directly.
type storeSource struct {
	a   *admin.Audit
	cfg *config.Config // the retention periods prune applies
}

func (s storeSource) List(ctx context.Context, q admin.AuditQuery) (admin.AuditPage, error) {
	return s.a.List(ctx, q)
}
func (s storeSource) Thread(ctx context.Context, k store.Key) ([]byte, error) {
	return s.a.Thread(ctx, k)
}
func (s storeSource) Delete(ctx context.Context, k store.Key) (int, error) { return s.a.Delete(ctx, k) }
func (s storeSource) Export(ctx context.Context, q admin.AuditQuery, k *store.Key, w io.Writer, progress func(int)) (int, error) {
	if k != nil {
		if err := s.a.ExportThread(ctx, *k, w); err != nil {
			return 0, err
		}
		if progress != nil {
			progress(1)
		}
		return 1, nil
	}
	return s.a.Export(ctx, q, w, progress)
}

// httpSource calls a running proxy's admin API.
type httpSource struct {
	base   string
	token  string
	client *http.Client
}

func (h *httpSource) do(ctx context.Context, method, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, h.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+h.token)
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		msg := gjson.GetBytes(b, "error.message").String()
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		return nil, fmt.Errorf("%s: %d %s", path, resp.StatusCode, msg)
	}
	return resp, nil
}

func (h *httpSource) get(ctx context.Context, path string) ([]byte, error) {
	resp, err := h.do(ctx, "GET", path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

func filterValues(q admin.AuditQuery) url.Values {
	v := url.Values{}
	for name, val := range map[string]string{"tenant": q.Tenant, "connection": q.Connection, "model": q.Model, "status": string(q.Status), "q": q.Text, "cursor": q.Cursor} {
		if val != "" {
			v.Set(name, val)
		}
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.Format(time.RFC3339Nano))
	}
	if q.Limit > 0 {
		v.Set("limit", fmt.Sprint(q.Limit))
	}
	return v
}

func threadPath(k store.Key) string {
	return "/admin/threads/" + url.PathEscape(k.Tenant) + "/" + url.PathEscape(k.Thread)
}

func (h *httpSource) List(ctx context.Context, q admin.AuditQuery) (admin.AuditPage, error) {
	var page admin.AuditPage
	b, err := h.get(ctx, "/admin/threads?"+filterValues(q).Encode())
	if err == nil {
		err = json.Unmarshal(b, &page)
	}
	return page, err
}

func (h *httpSource) Thread(ctx context.Context, k store.Key) ([]byte, error) {
	return h.get(ctx, threadPath(k))
}

func (h *httpSource) Delete(ctx context.Context, k store.Key) (int, error) {
	resp, err := h.do(ctx, "DELETE", threadPath(k))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return int(gjson.GetBytes(b, "runs").Int()), err
}

// Export copies the streamed JSONL line by line, so progress moves as the
// proxy writes and memory holds one line.
func (h *httpSource) Export(ctx context.Context, q admin.AuditQuery, k *store.Key, w io.Writer, progress func(int)) (int, error) {
	path := "/admin/export?" + filterValues(q).Encode()
	if k != nil {
		path = threadPath(*k) + "/export"
	}
	resp, err := h.do(ctx, "GET", path)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	r := bufio.NewReaderSize(resp.Body, 256<<10)
	n := 0
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			if bytes.HasPrefix(line, []byte(`{"error":`)) {
				return n, fmt.Errorf("the proxy ended the export: %s", gjson.GetBytes(line, "error.message").String())
			}
			if _, werr := w.Write(line); werr != nil {
				return n, werr
			}
			n++
			if progress != nil {
				progress(n)
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func threadsLs(ctx context.Context, src auditSource, q admin.AuditQuery, all, asJSON bool, w io.Writer) error {
	var entries []admin.ThreadEntry
	var next *string
	for {
		page, err := src.List(ctx, q)
		if err != nil {
			return err
		}
		entries = append(entries, page.Threads...)
		next = page.NextCursor
		if !all || next == nil {
			break
		}
		q.Cursor = *next
	}
	if asJSON {
		if entries == nil {
			entries = []admin.ThreadEntry{}
		}
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		return enc.Encode(admin.AuditPage{Threads: entries, NextCursor: next})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UPDATED\tTENANT\tTHREAD\tCONNECTION\tMODEL\tRUNS\tLAST\tIN\tOUT\tFORK OF")
	for _, e := range entries {
		fork := "-"
		if e.Parent != nil && e.ForkPoint != nil {
			fork = fmt.Sprintf("%s@%d", *e.Parent, e.ForkPoint.AtMessage)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\n", shortTime(e.UpdatedAt), e.Tenant, e.ID, e.Connection, e.Model, e.Runs, e.LastStatus, e.Usage.InputTokens, e.Usage.OutputTokens, fork)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != nil {
		fmt.Fprintf(w, "more: --cursor %s\n", *next)
	}
	return nil
}

func shortTime(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

func threadsShow(ctx context.Context, src auditSource, k store.Key, asJSON bool, w io.Writer) error {
	doc, err := src.Thread(ctx, k)
	if err != nil {
		return err
	}
	if asJSON {
		_, err = w.Write(append(doc, '\n'))
		return err
	}
	th := gjson.ParseBytes(doc)
	fmt.Fprintf(w, "thread     %s/%s\nconnection %s\nformat     %s\ncreated    %s\nupdated    %s\nversion    %d\n\n",
		th.Get("tenant").String(), th.Get("id").String(), th.Get("connection").String(), th.Get("format").String(),
		shortTime(th.Get("created_at").String()), shortTime(th.Get("updated_at").String()), th.Get("version").Int())
	if p := th.Get("parent"); p.Type == gjson.String {
		at := fmt.Sprintf("message %d", th.Get("fork_point.at_message").Int())
		if r := th.Get("fork_point.at_run"); r.Type == gjson.String {
			at += " (the end of run " + r.Str + ")"
		}
		fmt.Fprintf(w, "forked     from %s/%s at %s\n\n", th.Get("tenant").String(), p.Str, at)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATUS\tMODEL\tSTARTED\tDURATION\tIN\tOUT\tCACHED\tREASONING\tCHANGED")
	for _, r := range th.Get("runs").Array() {
		dur := "running"
		if f := r.Get("finished_at").String(); f != "" {
			a, _ := time.Parse(time.RFC3339Nano, r.Get("started_at").String())
			b, _ := time.Parse(time.RFC3339Nano, f)
			dur = b.Sub(a).String()
		}
		var changed []string
		if n := len(r.Get("repairs").Array()); n > 0 {
			changed = append(changed, fmt.Sprintf("%d repairs", n))
		}
		for _, x := range r.Get("restored").Array() {
			changed = append(changed, "restored "+x.Get("field").String())
		}
		for _, x := range r.Get("redactions").Array() {
			changed = append(changed, fmt.Sprintf("redacted %s ×%d", x.Get("rule").String(), x.Get("count").Int()))
		}
		u := r.Get("usage")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", r.Get("id").String(), r.Get("status").String(), r.Get("model").String(),
			shortTime(r.Get("started_at").String()), dur, u.Get("input_tokens").Int(), u.Get("output_tokens").Int(),
			u.Get("cached_tokens").Int(), u.Get("reasoning_tokens").Int(), strings.Join(changed, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	format := th.Get("format").String()
	if sys := th.Get("system"); sys.Exists() && sys.Type != gjson.Null {
		parts := sys.Get("parts").Array() // Gemini's systemInstruction
		switch {
		case sys.Type == gjson.String: // Anthropic's system, as a string
			fmt.Fprintf(w, "[system] %s\n", oneLine(sys.Str))
		case sys.IsArray(): // or as text blocks
			parts = sys.Array()
		}
		for _, p := range parts {
			fmt.Fprintf(w, "[system] %s\n", oneLine(p.Get("text").String()))
		}
	}
	for i, m := range th.Get("messages").Array() {
		for _, l := range describeMessage(format, m) {
			fmt.Fprintf(w, "%3d %s\n", i, l)
		}
	}
	return nil
}

// describeMessage renders one stored message as labelled lines: text,
// reasoning, tool calls and tool results apart, for each wire format.
func describeMessage(format string, m gjson.Result) []string {
	var out []string
	add := func(label, text string) { out = append(out, "["+label+"] "+oneLine(text)) }
	switch format {
	case "gemini":
		role := m.Get("role").String()
		for _, p := range m.Get("parts").Array() {
			switch {
			case p.Get("thought").Bool():
				add("thought", p.Get("text").String())
			case p.Get("text").Exists():
				add(role, p.Get("text").String())
			case p.Get("functionCall").Exists():
				add("tool call "+p.Get("functionCall.name").String(), p.Get("functionCall.args").Raw)
			case p.Get("functionResponse").Exists():
				add("tool result "+p.Get("functionResponse.name").String(), p.Get("functionResponse.response").Raw)
			}
		}
	case "anthropic-messages":
		role := m.Get("role").String()
		c := m.Get("content")
		if c.Type == gjson.String {
			add(role, c.Str)
			break
		}
		for _, b := range c.Array() {
			switch b.Get("type").String() {
			case "text":
				add(role, b.Get("text").String())
			case "thinking":
				add("thinking", b.Get("thinking").String())
			case "redacted_thinking":
				add("redacted thinking", "[encrypted]")
			case "tool_use":
				add("tool call "+b.Get("name").String()+" "+b.Get("id").String(), b.Get("input").Raw)
			case "tool_result":
				add("tool result "+b.Get("tool_use_id").String(), contentText(b.Get("content")))
			default:
				add(role+" "+b.Get("type").String(), b.Raw)
			}
		}
	case "openai-responses":
		switch m.Get("type").String() {
		case "function_call":
			add("tool call "+m.Get("name").String()+" "+m.Get("call_id").String(), m.Get("arguments").String())
		case "function_call_output":
			add("tool result "+m.Get("call_id").String(), m.Get("output").String())
		case "reasoning":
			var s []string
			for _, x := range m.Get("summary").Array() {
				s = append(s, x.Get("text").String())
			}
			add("reasoning", strings.Join(s, " "))
		default:
			add(m.Get("role").String(), contentText(m.Get("content")))
		}
	default:
		role := m.Get("role").String()
		if role == "tool" {
			add("tool result "+m.Get("tool_call_id").String(), contentText(m.Get("content")))
			break
		}
		if r := m.Get("reasoning_content").String(); r != "" {
			add("reasoning", r)
		}
		if t := contentText(m.Get("content")); t != "" || !m.Get("tool_calls").Exists() {
			add(role, t)
		}
		for _, c := range m.Get("tool_calls").Array() {
			add("tool call "+c.Get("function.name").String()+" "+c.Get("id").String(), c.Get("function.arguments").String())
		}
	}
	return out
}

func contentText(c gjson.Result) string {
	if c.Type == gjson.String {
		return c.Str
	}
	var parts []string
	for _, p := range c.Array() {
		if p.Get("text").Exists() {
			parts = append(parts, p.Get("text").String())
		} else {
			parts = append(parts, "["+p.Get("type").String()+"]")
		}
	}
	return strings.Join(parts, " ")
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 160 {
		return string(r[:157]) + "..."
	}
	return s
}

// threadsExport writes JSONL to stdout, or to file with a progress bar on
// stderr when stderr is a terminal (threads done / total; the total is
// counted first when no text filter makes counting as costly as the export
// itself). When stderr is not a terminal (a log, a pipe) it gets one line
// at the end instead: no carriage returns.
func threadsExport(ctx context.Context, src auditSource, q admin.AuditQuery, k *store.Key, file string, stdout, stderr io.Writer) error {
	w := stdout
	var bar *progressBar
	if file != "" && !stderrIsTerminal(stderr) {
		f, err := os.Create(file)
		if err != nil {
			return err
		}
		defer f.Close()
		bw := bufio.NewWriterSize(f, 256<<10)
		n, err := src.Export(ctx, q, k, bw, nil)
		if err == nil {
			err = bw.Flush()
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "exported %d threads to %s\n", n, file)
		return nil
	}
	if file != "" {
		f, err := os.Create(file)
		if err != nil {
			return err
		}
		defer f.Close()
		bw := bufio.NewWriterSize(f, 256<<10)
		defer bw.Flush()
		w = bw
		total := -1
		if k != nil {
			total = 1
		} else if q.Text == "" {
			if total, err = countThreads(ctx, src, q); err != nil {
				return err
			}
		}
		bar = &progressBar{w: stderr, total: total}
	}
	var progress func(int)
	if bar != nil {
		progress = bar.set
	}
	n, err := src.Export(ctx, q, k, w, progress)
	if bar != nil {
		bar.finish(n)
	}
	if err != nil {
		return err
	}
	if bw, ok := w.(*bufio.Writer); ok {
		return bw.Flush()
	}
	return nil
}

// stderrIsTerminal reports whether w is a terminal, where a progress bar
// redrawn with carriage returns belongs.
func stderrIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}

// countThreads pages through the listing (summaries only) to count what an
// export will write.
func countThreads(ctx context.Context, src auditSource, q admin.AuditQuery) (int, error) {
	q.Limit, q.Cursor = 500, ""
	n := 0
	for {
		page, err := src.List(ctx, q)
		if err != nil {
			return 0, err
		}
		n += len(page.Threads)
		if page.NextCursor == nil {
			return n, nil
		}
		q.Cursor = *page.NextCursor
	}
}

// progressBar draws "export [#####     ] 1200/5000 threads" on one line,
// redrawn at most every 100 ms; total < 0 means unknown.
type progressBar struct {
	w     io.Writer
	total int
	last  time.Time
}

func (p *progressBar) set(n int) {
	if now := time.Now(); now.Sub(p.last) >= 100*time.Millisecond {
		p.last = now
		p.draw(n)
	}
}

func (p *progressBar) draw(n int) {
	if p.total < 0 {
		fmt.Fprintf(p.w, "\rexport %d threads", n)
		return
	}
	const width = 30
	filled := width
	if p.total > 0 {
		filled = min(width, n*width/p.total)
	}
	fmt.Fprintf(p.w, "\rexport [%s%s] %d/%d threads", strings.Repeat("#", filled), strings.Repeat(" ", width-filled), n, p.total)
}

func (p *progressBar) finish(n int) {
	p.draw(n)
	fmt.Fprintln(p.w)
}
