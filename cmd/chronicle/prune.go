package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/admin"
)

// pruneSource runs the retention pass: the proxy's (POST /admin/prune,
// under the proxy's config) or on the store with the config given.
type pruneSource interface {
	Prune(ctx context.Context, dryRun bool) (admin.Pruned, error)
}

func (s storeSource) Prune(ctx context.Context, dryRun bool) (admin.Pruned, error) {
	return s.a.Prune(ctx, s.cfg, time.Now(), dryRun)
}

func (h *httpSource) Prune(ctx context.Context, dryRun bool) (admin.Pruned, error) {
	var out admin.Pruned
	path := "/admin/prune"
	if dryRun {
		path += "?dry_run=true"
	}
	resp, err := h.do(ctx, "POST", path)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&out)
	return out, err
}

// threadsPrune is `chronicle threads prune [--dry-run]`.
func threadsPrune(ctx context.Context, src auditSource, dryRun, asJSON bool, stdout io.Writer) error {
	out, err := src.(pruneSource).Prune(ctx, dryRun)
	if err != nil {
		return err
	}
	if asJSON {
		printJSON(stdout, out)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tTHREAD\tCONNECTION\tUPDATED\tRETENTION\tEXPIRED")
	for _, t := range out.Threads {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Tenant, t.Thread, t.Connection, t.UpdatedAt.UTC().Format(time.RFC3339), t.Retention, t.ExpiredAt.UTC().Format(time.RFC3339))
	}
	tw.Flush()
	verb := "deleted"
	if dryRun {
		verb = "would delete"
	}
	fmt.Fprintf(stdout, "%s %d threads", verb, len(out.Threads))
	if !dryRun {
		fmt.Fprintf(stdout, " (%d runs, %d events, %d messages)", out.Runs, out.Events, out.Messages)
	}
	fmt.Fprintln(stdout)
	if len(out.Busy) > 0 {
		fmt.Fprintf(stdout, "left %d expired threads with a run in flight (the next pass takes them)\n", len(out.Busy))
	}
	return nil
}
