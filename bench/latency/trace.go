package latency

// The traced variant of raft (LatencyConfig.Trace): the same cluster and
// workloads, with every request carrying a sampled W3C traceparent, so that
// the nodes (started with --otlp-endpoint naming TraceSink, and the SDK's
// parent-based sampler told to record nothing else) record and export the
// spans of these requests only. Its runs sit beside the untraced ones of
// the same rounds, and the report sets them side by side ("raft:traced"
// over "raft:cluster"): the cost of tracing, measured in one run.

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync/atomic"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgate/lockgate/bench/provision"
)

// TraceVariant is the variant name of the traced runs.
const TraceVariant = "traced"

// TraceSampler is the OTEL_TRACES_SAMPLER the nodes of a traced run get:
// a request is recorded only when its caller's span is sampled.
const TraceSampler = "parentbased_always_off"

// tracedParent is the remote parent every traced request names: one
// sampled span context (the ids are arbitrary, valid ones).
var tracedParent = trace.NewSpanContext(trace.SpanContextConfig{
	TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
	SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
	TraceFlags: trace.FlagsSampled,
	Remote:     true,
})

// fractionPropagator writes the W3C traceparent of a request's context
// into a fraction of requests, nothing into the others: the traced
// variant's clients with --trace-fraction below 1, a deployment that
// samples that fraction of its callers' traces.
type fractionPropagator struct{ fraction float64 }

func (p fractionPropagator) Inject(ctx context.Context, c propagation.TextMapCarrier) {
	if rand.Float64() < p.fraction {
		propagation.TraceContext{}.Inject(ctx, c)
	}
}

func (fractionPropagator) Extract(ctx context.Context, _ propagation.TextMapCarrier) context.Context {
	return ctx
}

func (fractionPropagator) Fields() []string { return propagation.TraceContext{}.Fields() }

// tracePropagator is the traced variant's propagator: nil (the SDK's,
// every request) for a fraction of 1 or more.
func (cfg *LatencyConfig) tracePropagator() propagation.TextMapPropagator {
	if cfg.TraceFraction <= 0 || cfg.TraceFraction >= 1 {
		return nil
	}
	return fractionPropagator{cfg.TraceFraction}
}

// tracedCtx is ctx under the sampled remote parent: the SDK sends its
// traceparent with every request made under it.
func tracedCtx(ctx context.Context) context.Context {
	return trace.ContextWithRemoteSpanContext(ctx, tracedParent)
}

// TraceSink is an OTLP/HTTP receiver on a loopback port that answers every
// export 200 and discards it, counting requests and bytes.
type TraceSink struct {
	URL      string // http://127.0.0.1:port, for --otlp-endpoint
	Requests atomic.Int64
	Bytes    atomic.Int64
	srv      *http.Server
}

// StartTraceSink starts a TraceSink.
func StartTraceSink() (*TraceSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &TraceSink{URL: "http://" + ln.Addr().String()}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		s.Requests.Add(1)
		s.Bytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK) // an empty ExportTraceServiceResponse: all accepted
	})}
	go s.srv.Serve(ln)
	return s, nil
}

// Close stops the sink.
func (s *TraceSink) Close() error { return s.srv.Close() }

// compareTrace sets each traced run beside the untraced run of the same
// backend, path, cache and workload: the ratios are tracing's cost.
func (rep *Report) compareTrace() {
	for _, on := range rep.Runs {
		if on.Variant != TraceVariant || on.Skipped {
			continue
		}
		for _, off := range rep.Runs {
			if off.Variant == TraceVariant || off.Skipped || off.Backend != on.Backend || off.Workload != on.Workload ||
				off.Via != on.Via || off.Cache != on.Cache {
				continue
			}
			c := Comparison{Workload: on.Workload, Via: on.Via, Cache: on.Cache, Ours: on.ref(), Peer: off.ref()}
			if off.LatencyUS.P50 > 0 {
				c.P50Ratio = on.LatencyUS.P50 / off.LatencyUS.P50
			}
			if off.OpsPerSec > 0 {
				c.OpsRatio = on.OpsPerSec / off.OpsPerSec
			}
			rep.Comparisons = append(rep.Comparisons, c)
		}
	}
}

// traces reports whether backend b gets a traced variant under cfg.
func (cfg *LatencyConfig) traces(b string) bool {
	return cfg.Trace && provision.KindOf(b) == provision.KindOf(provision.Raft)
}
