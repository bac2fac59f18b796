// Command chronicle is the chronicle proxy: `chronicle serve` runs it,
// `chronicle version` prints its version. Run `chronicle help` for the rest.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy"
	"github.com/chronicle-proxy/chronicle/proxy/config"
)

const usage = `chronicle — a reverse proxy that adds persistence in front of LLM APIs

usage:
  chronicle serve [--config FILE]   run the proxy (FILE also from CHRONICLE_CONFIG)
  chronicle threads ls|show|export|rm|prune   read, export, delete and prune stored threads
  chronicle subjects rm | tenants rm | tombstones
                                    erase a subject's or a tenant's threads; the erasures' record
  chronicle keys rewrap --config FILE   re-wrap the data keys of encryption at rest
                                    under the current key-encryption key
  chronicle repair [--format openai|gemini|responses] < history.json
                                    print a repaired history and its interrupted calls
  chronicle healthcheck [--url URL] exit 0 if a running proxy answers /healthz (for
                                    container health checks; the image has no curl)
  chronicle version                 print the version

Each command takes -h or --help.
`

const serveUsage = `usage: chronicle serve [--config FILE]

Runs the proxy with the config in FILE (default $CHRONICLE_CONFIG; every key
is described in config.example.yaml).
`

// parseFlags parses a command's flags with parse. -h or --help prints the
// command's usage and flags to stdout and ends it with exit code 0; a bad
// flag prints flag's message, the usage and flags to stderr, exit code 2.
// done reports that the command must end with code.
func parseFlags(fs *flag.FlagSet, usage string, stdout, stderr io.Writer, parse func() error) (code int, done bool) {
	fs.SetOutput(stderr)
	fs.Usage = func() {}
	err := parse()
	if err == nil {
		return 0, false
	}
	w, code := stderr, 2
	if errors.Is(err, flag.ErrHelp) {
		w, code = stdout, 0
	}
	fmt.Fprint(w, usage)
	fmt.Fprintln(w, "\nflags:")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(stderr)
	return code, true
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "--help" || arg == "-help" || arg == "help"
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the exit, so tests can call it.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "threads":
		return threadsCmd(args[1:], stdout, stderr)
	case "subjects", "tenants", "tombstones":
		return eraseCmd(args[0], args[1:], stdout, stderr)
	case "keys":
		return keysCmd(args[1:], stdout, stderr)
	case "repair":
		return repairCmd(args[1:], os.Stdin, stdout, stderr)
	case "healthcheck":
		return healthcheckCmd(args[1:], stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintf(stdout, "chronicle %s\n", proxy.Version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "chronicle: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

func serve(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	path := fs.String("config", os.Getenv("CHRONICLE_CONFIG"), "config file (default $CHRONICLE_CONFIG)")
	if code, done := parseFlags(fs, serveUsage, stdout, stderr, func() error { return fs.Parse(args) }); done {
		return code
	}
	if *path == "" {
		fmt.Fprintln(stderr, "chronicle serve: no config file: pass --config FILE or set CHRONICLE_CONFIG (see config.example.yaml)")
		return 2
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintf(stderr, "chronicle: %v\n", err)
		return 1
	}
	log := newLogger(cfg.Log, stderr)
	procs := setProcs(cfg.Procs, log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := runServer(ctx, cfg, log, procs); err != nil {
		log.Error("chronicle stopped", "err", err)
		return 1
	}
	return 0
}

// runServer runs the proxy until ctx ends, then drains: it stops accepting
// and lets streams in flight finish for up to limits.shutdown_timeout.
func runServer(ctx context.Context, cfg *config.Config, log *slog.Logger, procs procsChoice) error {
	// The store's background work (embedded: pebble's flushes and
	// compactions) takes the server's extra Ps, as a large request does;
	// the store opens first, so it finds the server once there is one.
	var server atomic.Pointer[proxy.Server]
	background := func() func() {
		if srv := server.Load(); srv != nil {
			return srv.HoldProcs()
		}
		return func() {}
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	st, err := openStore(octx, cfg, background)
	cancel()
	if err != nil {
		return err
	}
	backend := st
	if spooled, err := openSpool(st, cfg, log); err != nil {
		st.Close()
		return err
	} else {
		st = spooled
	}
	octx, cancel = context.WithTimeout(ctx, 30*time.Second)
	sealedStore, err := sealStore(octx, st, backend, cfg)
	cancel()
	if err != nil {
		st.Close()
		return err
	}
	st = sealedStore
	defer st.Close()
	gates, rates, closeLimits, err := openLimits(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeLimits()
	tp, closeTracer, err := openTracer(ctx, cfg.Telemetry.Traces, log)
	if err != nil {
		return fmt.Errorf("telemetry.traces: %w", err)
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		closeTracer(fctx)
	}()
	opts := proxy.Options{Logger: log, Store: st, Gates: gates, Rates: rates}
	if tp != nil {
		opts.TracerProvider = tp
	}
	if procs.boost > procs.base {
		opts.LargeRequestProcs = procs.boost
	}
	srv, err := proxy.New(cfg, opts)
	if err != nil {
		return err
	}
	server.Store(srv)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	log.Info("chronicle listening", "addr", ln.Addr().String(), "version", proxy.Version, "store", cfg.Store.Driver, "connections", len(cfg.Connections))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("draining", "timeout", cfg.Limits.ShutdownTimeout.D().String())
	dctx, cancel := context.WithTimeout(context.Background(), cfg.Limits.ShutdownTimeout.D())
	defer cancel()
	if err := srv.Shutdown(dctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	} else if err != nil {
		log.Warn("drain deadline passed with requests still open; exiting")
	}
	log.Info("stopped")
	return nil
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
