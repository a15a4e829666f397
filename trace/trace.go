// Package trace turns on OpenTelemetry tracing for Cove: with
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) set,
// Setup installs a tracer provider that exports the harness's spans (run,
// turn, model call, tool call, sandbox operations) over OTLP/HTTP; without
// it tracing stays off and costs nothing. The rest of Cove uses only the
// OpenTelemetry API.
package trace

import (
	"context"
	"fmt"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Enabled reports whether the environment asks for OTLP export.
func Enabled() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs the global tracer provider when Enabled, configured by
// the standard OTEL_* variables (endpoint, headers, protocol). It returns
// a shutdown that flushes pending spans; call it before exiting. When
// tracing is off it does nothing and shutdown is a no-op.
func Setup(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	if !Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("starting the OTLP trace exporter (OTEL_EXPORTER_OTLP_ENDPOINT=%s): %w", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), err)
	}
	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(service))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}
