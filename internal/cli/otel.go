package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgate/lockgate/gateway"
)

// tracingFlags export OpenTelemetry traces of lock requests over OTLP/HTTP
// (docs/operations.md, "Traces"): off unless --otlp-endpoint or the
// standard OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// names a collector. Without one no tracer provider exists and the
// gateway's hot path checks a nil pointer. The other OTEL_* variables
// (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and
// its _ARG, OTEL_EXPORTER_OTLP_HEADERS, …) work as the SDK defines them.
type tracingFlags struct {
	endpoint string
	keyNames bool
	tp       *sdktrace.TracerProvider // nil: tracing is off
}

func (f *tracingFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.endpoint, "otlp-endpoint", "", "export OpenTelemetry traces of lock requests to this OTLP/HTTP collector: its base URL (http://127.0.0.1:4318; /v1/traces is added when no path is given) or host:port (HTTPS); default OTEL_EXPORTER_OTLP_ENDPOINT, else off")
	cmd.Flags().BoolVar(&f.keyNames, "otlp-key-names", false, "put key names in the trace spans (default: only the first 8 bytes of each key's SHA-256, in hex)")
}

// start installs the tracer provider when an endpoint is configured; the
// returned stop flushes and ends it.
func (f *tracingFlags) start(ctx context.Context) (stop func(), err error) {
	endpoint := f.endpoint
	if endpoint == "" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return func() {}, nil
	}
	var opts []otlptracehttp.Option
	switch {
	case strings.Contains(endpoint, "://"):
		// A collector's base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is: the
		// traces path goes after it (the SDK's WithEndpointURL would post
		// to the URL as it is, "/" for none).
		if u, err := url.Parse(endpoint); err == nil && (u.Path == "" || u.Path == "/") {
			u.Path = "/v1/traces"
			endpoint = u.String()
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
	case endpoint != "":
		opts = append(opts, otlptracehttp.WithEndpoint(endpoint))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint: %w", err)
	}
	// service.name "lockgate" unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES say otherwise (later detectors win).
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "lockgate")),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil {
		slog.Warn("traces: resource", "err", err)
	}
	// The sampler is the SDK's default: OTEL_TRACES_SAMPLER (and _ARG),
	// else parent-based always-on.
	f.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	what := endpoint
	if what == "" {
		what = "from OTEL_EXPORTER_OTLP_*"
	}
	slog.Info("traces", "otlp", what, "key_names", f.keyNames)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := f.tp.Shutdown(ctx); err != nil {
			slog.Warn("traces: flushing at exit", "err", err)
		}
	}, nil
}

// provider is the tracer provider, nil when tracing is off.
func (f *tracingFlags) provider() trace.TracerProvider {
	if f == nil || f.tp == nil {
		return nil
	}
	return f.tp
}

// apply sets a gateway's tracing options.
func (f *tracingFlags) apply(o gateway.Options) gateway.Options {
	if tp := f.provider(); tp != nil {
		o.TracerProvider = tp
		o.TraceKeyNames = f.keyNames
	}
	return o
}
