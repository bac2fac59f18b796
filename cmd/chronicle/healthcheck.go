package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

const healthcheckUsage = `usage: chronicle healthcheck [--url URL] [--timeout D]

Asks a running proxy for URL (default: /healthz on the port of
$CHRONICLE_LISTEN, else http://127.0.0.1:8080/healthz) and exits 0 if it
answers 200, 1 otherwise. For container health checks: the distroless
image has no shell and no curl (Dockerfile: HEALTHCHECK).
`

// healthcheckCmd is `chronicle healthcheck`.
func healthcheckCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	url := fs.String("url", defaultHealthURL(os.Getenv("CHRONICLE_LISTEN")), "the URL to ask")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if code, done := parseFlags(fs, healthcheckUsage, stdout, stderr, func() error { return fs.Parse(args) }); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "chronicle healthcheck: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		fmt.Fprintf(stderr, "chronicle healthcheck: %v\n", err)
		return 2
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "chronicle healthcheck: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "chronicle healthcheck: %s answered %s: %s\n", *url, resp.Status, body)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", body)
	return 0
}

// defaultHealthURL is /healthz on the loopback at listen's port: a proxy
// listening on 0.0.0.0:8080 (the image's CHRONICLE_LISTEN) is asked at
// 127.0.0.1:8080.
func defaultHealthURL(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if listen == "" || err != nil {
		return "http://127.0.0.1:8080/healthz"
	}
	switch host {
	case "", "0.0.0.0", "::", "[::]":
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthz"
}
