// Package telemetry exports the server's own spans (HTTP requests; the
// submit, claim and report transitions of tasks, as children of each task's
// trace) with the OpenTelemetry Go SDK over OTLP, configured by the standard
// OpenTelemetry environment variables. It is off unless that environment
// asks for it: then no provider exists, and the HTTP adapter does no work
// for tracing beyond keeping each task's traceparent.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// ServiceName is the service.name of the spans unless OTEL_SERVICE_NAME
// (or OTEL_RESOURCE_ATTRIBUTES) says otherwise.
const ServiceName = "taskmaster"

// The transport protocols of OTLP (OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// Config is what the environment asks of tracing.
type Config struct {
	// Enabled: OTEL_EXPORTER_OTLP_ENDPOINT or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, or OTEL_TRACES_EXPORTER
	// is otlp; not when OTEL_TRACES_EXPORTER is none or OTEL_SDK_DISABLED
	// is true.
	Enabled bool
	// Protocol is ProtocolHTTP (the default) or ProtocolGRPC
	// (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
	// OTEL_EXPORTER_OTLP_PROTOCOL).
	Protocol string
	// Endpoint, when set, is the OTLP endpoint URL (for OTLP/HTTP the
	// traces URL, http://host:4318/v1/traces), overriding the
	// environment's; ConfigFromEnv leaves it empty and the exporter reads
	// OTEL_EXPORTER_OTLP_ENDPOINT itself. Tests and embedders set it.
	Endpoint string
}

// ConfigFromEnv reads the standard OpenTelemetry variables through getenv.
// The exporter reads the rest of them itself (endpoint, headers, TLS,
// timeout), and the SDK the sampler (OTEL_TRACES_SAMPLER) and the batch
// processor's (OTEL_BSP_*).
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	cfg := Config{Protocol: ProtocolHTTP}
	exporters := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	switch exporters {
	case "", "otlp", "none":
	default:
		return cfg, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: only otlp and none are supported", exporters)
	}
	endpoint := getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	cfg.Enabled = (exporters == "otlp" || (exporters == "" && endpoint)) &&
		!strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true")
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch strings.TrimSpace(protocol) {
	case "", ProtocolHTTP:
	case ProtocolGRPC:
		cfg.Protocol = ProtocolGRPC
	default:
		return cfg, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: must be %s or %s", protocol, ProtocolHTTP, ProtocolGRPC)
	}
	return cfg, nil
}

// Provider is the tracer provider of the server's spans, exporting them in
// batches over OTLP.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// New returns the provider cfg asks for, or nil when tracing is off.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	if cfg.Protocol == ProtocolGRPC {
		var opts []otlptracegrpc.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	} else {
		var opts []otlptracehttp.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(cfg.Endpoint))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(semconv.ServiceName(ServiceName)),
		resource.Default(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return &Provider{tp: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))}, nil
}

// Tracer returns the tracer of the server's spans.
func (p *Provider) Tracer() trace.Tracer {
	return p.tp.Tracer("github.com/taskmaster/taskmaster")
}

// Shutdown exports the spans still held and stops the exporter.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if err := p.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("trace provider shutdown: %w", err)
	}
	return nil
}

// ForceFlush exports the spans held now.
func (p *Provider) ForceFlush(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.ForceFlush(ctx)
}
