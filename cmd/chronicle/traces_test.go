package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/proxy/config"
)

// TestOpenTracer: exporter none builds nothing; each OTLP exporter builds
// a provider (neither dials before its first export) that shuts down
// cleanly, and the export headers (a token) are never logged.
func TestOpenTracer(t *testing.T) {
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	tp, closeTracer, err := openTracer(t.Context(), config.Traces{Exporter: "none"}, log)
	if err != nil || tp != nil {
		t.Fatalf("none: %v, %v", tp, err)
	}
	closeTracer(t.Context())
	one := 1.0
	for _, c := range []config.Traces{
		{Exporter: "otlp-grpc", Endpoint: "127.0.0.1:1", Insecure: true, SampleRatio: &one, Headers: map[string]config.Secret{"authorization": "Bearer otlp-token-xyz"}},
		{Exporter: "otlp-http", Endpoint: "http://127.0.0.1:1/v1/traces", SampleRatio: &one, Headers: map[string]config.Secret{"x-api-key": "otlp-token-xyz"}},
		{Exporter: "otlp-http", Endpoint: "127.0.0.1:1", Insecure: true},
	} {
		tp, closeTracer, err := openTracer(t.Context(), c, log)
		if err != nil || tp == nil {
			t.Fatalf("%s: %v, %v", c.Exporter, tp, err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel() // nothing to flush; do not wait on the unreachable collector
		closeTracer(ctx)
	}
	if strings.Contains(logBuf.String(), "otlp-token-xyz") {
		t.Fatalf("an export header was logged:\n%s", logBuf.String())
	}
}
