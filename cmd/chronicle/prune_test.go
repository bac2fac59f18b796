package main

import (
	"context"
	"crypto/sha256"
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

const pruneConfig = "retention: {default: 24h}\nconnections:\n  - {name: openai, provider: openai, base_url: \"http://127.0.0.1:9\"}\n"

// seedAged writes threads updated 100 hours ago ("aged-…") and now
// ("fresh") into a new embedded store in dir, and closes it.
func seedAged(t *testing.T, dir string) {
	t.Helper()
	at := time.Now().Add(-100 * time.Hour)
	st, err := embedded.Open(dir, embedded.Options{NoSync: true, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	write := func(thread string) {
		k := store.Key{Tenant: "acme", Thread: thread}
		started, err := st.StartRun(ctx, store.StartRun{Key: k, RunID: thread + "-r0", Owner: "seed", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		m := []byte(`{"role":"user","content":"hi"}`)
		s := sha256.Sum256(m)
		var hh store.Hash
		copy(hh[:], s[:])
		tr := &store.Transcript{Connection: "openai", Format: "openai-chat", Messages: [][]byte{m}, Hashes: []store.Hash{hh}}
		if err := st.Finish(ctx, started.Lease, &store.Finish{Status: store.Completed, Transcript: tr}); err != nil {
			t.Fatal(err)
		}
	}
	write("aged-1")
	write("aged-2")
	at = time.Now()
	write("fresh")
}

// TestThreadsPrune: `chronicle threads prune --dry-run` lists the threads
// past their retention and deletes nothing; without --dry-run they go.
// Through a proxy (its config's retention) and on the store (--config).
func TestThreadsPrune(t *testing.T) {
	check := func(t *testing.T, source []string) {
		args := func(a ...string) []string { return append(a, source...) }
		code, out, errOut := runCLI(t, args("threads", "prune", "--dry-run")...)
		if code != 0 || !strings.Contains(out, "aged-1") || !strings.Contains(out, "aged-2") || strings.Contains(out, "fresh") || !strings.Contains(out, "would delete 2 threads") {
			t.Fatalf("dry run: %d %s %s", code, out, errOut)
		}
		code, out, errOut = runCLI(t, args("threads", "ls", "--json")...)
		if code != 0 || len(gjson.Get(out, "threads").Array()) != 3 {
			t.Fatalf("the dry run deleted: %d %s %s", code, out, errOut)
		}
		code, out, errOut = runCLI(t, args("threads", "prune", "--json")...)
		if code != 0 || len(gjson.Get(out, "threads").Array()) != 2 || gjson.Get(out, "runs").Int() != 2 {
			t.Fatalf("prune: %d %s %s", code, out, errOut)
		}
		code, out, errOut = runCLI(t, args("threads", "ls", "--json")...)
		if th := gjson.Get(out, "threads").Array(); code != 0 || len(th) != 1 || th[0].Get("id").String() != "fresh" {
			t.Fatalf("after the prune: %d %s %s", code, out, errOut)
		}
	}
	t.Run("config", func(t *testing.T) {
		dir := t.TempDir()
		seedAged(t, dir)
		path := filepath.Join(t.TempDir(), "chronicle.yaml")
		if err := os.WriteFile(path, []byte("store: {driver: embedded, path: "+dir+"}\n"+pruneConfig), 0o600); err != nil {
			t.Fatal(err)
		}
		check(t, []string{"--config", path})
	})
	t.Run("url", func(t *testing.T) {
		dir := t.TempDir()
		seedAged(t, dir)
		st, err := embedded.Open(dir, embedded.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		cfg, err := config.Parse([]byte("admin: {token: \""+cliToken+"\"}\n"+pruneConfig), func(string) (string, bool) { return "", false })
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
		go srv.Serve(ln)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			srv.Shutdown(ctx)
		})
		t.Setenv("CHRONICLE_ADMIN_TOKEN", cliToken)
		check(t, []string{"--url", "http://" + ln.Addr().String()})
	})
}
