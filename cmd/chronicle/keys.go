package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/config"
	"github.com/chronicle-proxy/chronicle/store/sealed"
)

const keysUsage = `usage:
  chronicle keys rewrap --config FILE

rewrap wraps every tenant's data key again under the current
key-encryption key (store.encryption.key / key_id), reading those wrapped
under an older one with store.encryption.previous_keys. Once it reports
nothing left under an older key, drop that key from previous_keys.
Running it again resumes. The store named in FILE is opened directly;
a running proxy may keep serving (an embedded store must not be held
open by it).
`

// keysCmd is `chronicle keys ...`: the data keys of encryption at rest.
func keysCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, keysUsage)
		return 2
	}
	sub := args[0]
	if isHelp(sub) {
		fmt.Fprint(stdout, keysUsage)
		return 0
	}
	fs := flag.NewFlagSet("keys "+sub, flag.ContinueOnError)
	cfgFlag := fs.String("config", os.Getenv("CHRONICLE_CONFIG"), "config file naming the store and its keys (default $CHRONICLE_CONFIG)")
	if code, done := parseFlags(fs, keysUsage, stdout, stderr, func() error { return fs.Parse(args[1:]) }); done {
		return code
	}
	if sub != "rewrap" {
		fmt.Fprintf(stderr, "chronicle keys: unknown command %q\n\n%s", sub, keysUsage)
		return 2
	}
	if *cfgFlag == "" {
		fmt.Fprintln(stderr, "chronicle keys rewrap: pass --config FILE (or set CHRONICLE_CONFIG)")
		return 2
	}
	cfg, err := config.Load(*cfgFlag)
	if err != nil {
		fmt.Fprintf(stderr, "chronicle: %v\n", err)
		return 1
	}
	if !cfg.Store.Encryption.Enabled {
		fmt.Fprintln(stderr, "chronicle keys rewrap: store.encryption.enabled is false in the config")
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	st, err := openStore(ctx, cfg, nil)
	if err != nil {
		fmt.Fprintf(stderr, "chronicle: %v\n", err)
		return 1
	}
	defer st.Close()
	ring, err := openKeyring(ctx, st, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "chronicle: %v\n", err)
		return 1
	}
	stats, err := ring.Rewrap(ctx)
	report := func(s sealed.RewrapStats) {
		fmt.Fprintf(stdout, "%d data keys: %d re-wrapped under key %q, %d were already\n", s.Keys, s.Rewrapped, ring.Current(), s.Current)
	}
	report(stats)
	if err != nil {
		fmt.Fprintf(stderr, "chronicle keys rewrap: %v (run it again to resume)\n", err)
		return 1
	}
	return 0
}
