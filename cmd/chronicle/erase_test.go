package main

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestEraseCommands: `chronicle tenants rm`, `subjects rm` and
// `tombstones`, through a proxy (--url) and on the store (--config).
func TestEraseCommands(t *testing.T) {
	sources(t, 2, func(t *testing.T, source []string) {
		args := func(a ...string) []string { return append(a, source...) }
		code, out, errOut := runCLI(t, args("tenants", "rm", "bulk", "--reason", "ticket-9", "--json")...)
		if code != 0 || gjson.Get(out, "threads").Int() != 2 || gjson.Get(out, "runs").Int() != 2 || !gjson.Get(out, "complete").Bool() {
			t.Fatalf("tenants rm: %d %s %s", code, out, errOut)
		}
		code, out, errOut = runCLI(t, args("threads", "ls", "--tenant", "bulk", "--json")...)
		if code != 0 || len(gjson.Get(out, "threads").Array()) != 0 {
			t.Fatalf("bulk threads after the erasure: %d %s %s", code, out, errOut)
		}
		code, out, errOut = runCLI(t, args("subjects", "rm", "acme", "nobody")...)
		if code != 0 || !strings.Contains(out, "erased 0 threads") {
			t.Fatalf("subjects rm: %d %s %s", code, out, errOut)
		}
		code, out, errOut = runCLI(t, args("tombstones", "--json")...)
		ts := gjson.Get(out, "tombstones").Array()
		if code != 0 || len(ts) != 2 || ts[1].Get("scope").String() != "tenant" || ts[1].Get("reason").String() != "ticket-9" || ts[0].Get("scope").String() != "subject" {
			t.Fatalf("tombstones: %d %s %s", code, out, errOut)
		}
		if strings.Contains(out, "bulk") || strings.Contains(out, "nobody") {
			t.Fatalf("a tombstone names what it erased: %s", out)
		}
		code, out, _ = runCLI(t, args("tombstones")...)
		if code != 0 || !strings.Contains(out, "SCOPE") || !strings.Contains(out, "ticket-9") {
			t.Fatalf("tombstones table: %d %s", code, out)
		}
		if code, _, errOut := runCLI(t, args("subjects", "rm", "acme")...); code != 2 || !strings.Contains(errOut, "TENANT SUBJECT") {
			t.Fatalf("subjects rm without a subject: %d %s", code, errOut)
		}
	})
}
