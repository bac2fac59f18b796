package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/chronicle-proxy/chronicle/proxy/admin"
	"github.com/chronicle-proxy/chronicle/store"
)

const eraseUsage = `usage:
  chronicle subjects rm  [source] TENANT SUBJECT [--reason R] [--actor A] [--json]
  chronicle tenants rm   [source] TENANT [--reason R] [--actor A] [--json]
  chronicle tombstones   [source] [--limit N] [--json]

Erases every thread of a subject (X-Chronicle-Subject) or of a tenant, with
all it owns, and leaves a tombstone (who, when, what scope as hashes, how
much; never content). Threads with a run in flight are left and named: run
the command again once they end (exit code 3 until then).

source (one of):
  --url http://host:port   a running proxy; the admin token comes from CHRONICLE_ADMIN_TOKEN
  --config FILE            the store named in FILE, directly (the proxy must not hold an
                           embedded store open at the same time)
`

// eraseSource is what the erasure commands need of a source.
type eraseSource interface {
	EraseSubject(ctx context.Context, tenant, subject string, by admin.Eraser) (admin.Erased, error)
	EraseTenant(ctx context.Context, tenant string, by admin.Eraser) (admin.Erased, error)
	Tombstones(ctx context.Context, limit int) ([]store.Tombstone, error)
}

// eraseCmd is `chronicle subjects rm`, `chronicle tenants rm` and
// `chronicle tombstones` (cmd is "subjects", "tenants" or "tombstones").
func eraseCmd(cmd string, args []string, stdout, stderr io.Writer) int {
	if cmd != "tombstones" {
		if len(args) == 0 {
			fmt.Fprint(stderr, eraseUsage)
			return 2
		}
		if isHelp(args[0]) {
			fmt.Fprint(stdout, eraseUsage)
			return 0
		}
		if args[0] != "rm" {
			fmt.Fprintf(stderr, "chronicle %s: unknown subcommand %q\n\n%s", cmd, args[0], eraseUsage)
			return 2
		}
		args = args[1:]
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	urlFlag := fs.String("url", "", "a running proxy's base URL")
	cfgFlag := fs.String("config", "", "config file naming the store to use directly")
	asJSON := fs.Bool("json", false, "print JSON")
	reason := fs.String("reason", "", "why (a ticket number), kept in the tombstone")
	actor := fs.String("actor", "", "who asks, kept in the tombstone (default: the admin token's fingerprint with --url, cli:$USER with --config)")
	limit := fs.Int("limit", 100, "tombstones: how many, newest first")
	var pos []string
	code, done := parseFlags(fs, eraseUsage, stdout, stderr, func() (err error) {
		pos, err = parseInterspersed(fs, args)
		return err
	})
	if done {
		return code
	}
	want := map[string]int{"subjects": 2, "tenants": 1, "tombstones": 0}[cmd]
	if len(pos) != want {
		fmt.Fprintf(stderr, "chronicle %s: want %s\n", cmd, map[string]string{"subjects": "TENANT SUBJECT", "tenants": "TENANT", "tombstones": "no arguments"}[cmd])
		return 2
	}
	ctx := context.Background()
	src, closeSrc, err := openSource(ctx, *urlFlag, *cfgFlag)
	if err != nil {
		fmt.Fprintf(stderr, "chronicle %s: %v\n", cmd, err)
		return 2
	}
	defer closeSrc()
	es := src.(eraseSource)
	by := admin.Eraser{Actor: *actor, Reason: *reason}
	if by.Actor == "" && *cfgFlag != "" {
		by.Actor = "cli:" + os.Getenv("USER")
	}
	if err := admin.CheckEraser(by); err != nil {
		fmt.Fprintf(stderr, "chronicle %s: %v\n", cmd, err)
		return 2
	}
	var out admin.Erased
	switch cmd {
	case "tombstones":
		ts, err := es.Tombstones(ctx, *limit)
		if err != nil {
			fmt.Fprintf(stderr, "chronicle tombstones: %v\n", err)
			return 1
		}
		if *asJSON {
			return printJSON(stdout, map[string]any{"tombstones": ts})
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "AT\tSCOPE\tACTOR\tTHREADS\tRUNS\tEVENTS\tMESSAGES\tBUSY\tREASON")
		for _, t := range ts {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", t.At.UTC().Format("2006-01-02T15:04:05Z"), t.Scope, t.Actor, t.Threads, t.Runs, t.Events, t.Messages, t.Busy, t.Reason)
		}
		tw.Flush()
		return 0
	case "subjects":
		out, err = es.EraseSubject(ctx, pos[0], pos[1], by)
	case "tenants":
		out, err = es.EraseTenant(ctx, pos[0], by)
	}
	if err != nil {
		fmt.Fprintf(stderr, "chronicle %s rm: %v\n", cmd, err)
		return 1
	}
	if *asJSON {
		printJSON(stdout, out)
	} else {
		fmt.Fprintf(stdout, "erased %d threads (%d runs, %d events, %d messages); tombstone %s\n", out.Threads, out.Runs, out.Events, out.Messages, out.Tombstone)
		if len(out.Busy) > 0 {
			fmt.Fprintf(stdout, "left %d threads with a run in flight: %s (run the command again once they end)\n", len(out.Busy), strings.Join(out.Busy, " "))
		}
	}
	if !out.Complete {
		return 3
	}
	return 0
}

func printJSON(w io.Writer, v any) int {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return 1
	}
	fmt.Fprintf(w, "%s\n", b)
	return 0
}

func (s storeSource) EraseSubject(ctx context.Context, tenant, subject string, by admin.Eraser) (admin.Erased, error) {
	return s.a.EraseSubject(ctx, tenant, subject, by)
}
func (s storeSource) EraseTenant(ctx context.Context, tenant string, by admin.Eraser) (admin.Erased, error) {
	return s.a.EraseTenant(ctx, tenant, by)
}
func (s storeSource) Tombstones(ctx context.Context, limit int) ([]store.Tombstone, error) {
	return s.a.Tombstones(ctx, limit)
}

func eraserQuery(by admin.Eraser) string {
	v := url.Values{}
	if by.Actor != "" {
		v.Set("actor", by.Actor)
	}
	if by.Reason != "" {
		v.Set("reason", by.Reason)
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

func (h *httpSource) erase(ctx context.Context, path string) (admin.Erased, error) {
	var out admin.Erased
	resp, err := h.do(ctx, "DELETE", path)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&out)
	return out, err
}

func (h *httpSource) EraseSubject(ctx context.Context, tenant, subject string, by admin.Eraser) (admin.Erased, error) {
	return h.erase(ctx, "/admin/subjects/"+url.PathEscape(tenant)+"/"+url.PathEscape(subject)+eraserQuery(by))
}
func (h *httpSource) EraseTenant(ctx context.Context, tenant string, by admin.Eraser) (admin.Erased, error) {
	return h.erase(ctx, "/admin/tenants/"+url.PathEscape(tenant)+eraserQuery(by))
}
func (h *httpSource) Tombstones(ctx context.Context, limit int) ([]store.Tombstone, error) {
	var out struct {
		Tombstones []store.Tombstone `json:"tombstones"`
	}
	b, err := h.get(ctx, fmt.Sprintf("/admin/tombstones?limit=%d", limit))
	if err == nil {
		err = json.Unmarshal(b, &out)
	}
	return out.Tombstones, err
}
