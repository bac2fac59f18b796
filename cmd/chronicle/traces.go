package main

import (
	"context"
	"log/slog"
	"strings"

	"github.com/chronicle-proxy/chronicle/proxy"
	"github.com/chronicle-proxy/chronicle/proxy/config"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// openTracer builds the tracer provider telemetry.traces asks for: an
// OTLP exporter (gRPC or HTTP) behind a batching processor, sampling
// sample_ratio of the traces chronicle starts and following the caller's
// decision for the rest. Off (exporter: none), it returns nil and a
// shutdown that does nothing. The export headers (a token) are handed to
// the exporter and never logged.
func openTracer(ctx context.Context, c config.Traces, log *slog.Logger) (*sdktrace.TracerProvider, func(context.Context), error) {
	if !c.On() {
		return nil, func(context.Context) {}, nil
	}
	headers := make(map[string]string, len(c.Headers))
	for k, v := range c.Headers {
		headers[k] = v.Reveal()
	}
	var exp sdktrace.SpanExporter
	var err error
	switch c.Exporter {
	case "otlp-grpc":
		opts := []otlptracegrpc.Option{otlptracegrpc.WithHeaders(headers)}
		if c.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpoint(c.Endpoint))
		}
		if c.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	default: // otlp-http
		opts := []otlptracehttp.Option{otlptracehttp.WithHeaders(headers)}
		switch {
		case strings.Contains(c.Endpoint, "://"):
			opts = append(opts, otlptracehttp.WithEndpointURL(c.Endpoint))
		case c.Endpoint != "":
			opts = append(opts, otlptracehttp.WithEndpoint(c.Endpoint))
		}
		if c.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, nil, err
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", "chronicle"), attribute.String("service.version", proxy.Version)))
	if err != nil {
		res = resource.Default()
	}
	ratio := 1.0
	if c.SampleRatio != nil {
		ratio = *c.SampleRatio
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
	)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("trace export failed", "err", err)
	}))
	log.Info("exporting traces", "exporter", c.Exporter, "endpoint", c.Endpoint, "sample_ratio", ratio, "headers", len(headers))
	return tp, func(ctx context.Context) {
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("flushing traces at exit failed", "err", err)
		}
	}, nil
}
