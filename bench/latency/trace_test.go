package latency

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TestCompareTrace: a traced run is set beside the untraced run of the
// same workload (its ratios are tracing's cost), and never beside a peer.
func TestCompareTrace(t *testing.T) {
	off := &Run{Backend: "raft", Variant: "cluster", Via: "direct", Cache: CacheOff, Workload: Parallel, OpsPerSec: 1000}
	off.LatencyUS.P50 = 100
	on := &Run{Backend: "raft", Variant: TraceVariant, Via: "direct", Cache: CacheOff, Workload: Parallel, OpsPerSec: 960}
	on.LatencyUS.P50 = 104
	peer := &Run{Backend: "etcd-mutex", PeerOf: "etcd", Via: "direct", Cache: CacheOff, Workload: Parallel, OpsPerSec: 500}
	peer.LatencyUS.P50 = 200
	rep := &Report{Runs: []*Run{off, on, peer}}
	rep.compare()
	rep.compareTrace()
	var traced int
	for _, c := range rep.Comparisons {
		if c.Ours == "raft:traced" {
			traced++
			if c.Peer != "raft:cluster" || c.OpsRatio != 0.96 || c.P50Ratio != 1.04 {
				t.Errorf("traced comparison %+v, want raft:traced over raft:cluster, ops 0.96, p50 1.04", c)
			}
		}
	}
	if traced != 1 || len(rep.Comparisons) != 2 {
		t.Errorf("comparisons %+v: want one raft over etcd-mutex and one traced over untraced", rep.Comparisons)
	}
}

// TestTraceSinkAndContext: the sink answers an export 200 and counts it;
// a traced context carries a sampled remote parent.
func TestTraceSinkAndContext(t *testing.T) {
	s, err := StartTraceSink()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp, err := http.Post(s.URL+"/v1/traces", "application/x-protobuf", strings.NewReader("abc"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || s.Requests.Load() != 1 || s.Bytes.Load() != 3 {
		t.Errorf("sink: %d, %d requests, %d bytes", resp.StatusCode, s.Requests.Load(), s.Bytes.Load())
	}
	sc := trace.SpanContextFromContext(tracedCtx(context.Background()))
	if !sc.IsValid() || !sc.IsSampled() || !sc.IsRemote() {
		t.Errorf("traced context %+v: want a valid, sampled, remote parent", sc)
	}
}

// TestTraceFraction: with --trace-fraction f the traced clients write the
// sampled traceparent into about f of their requests and nothing into the
// others; a fraction of 1 leaves the SDK's own (every request).
func TestTraceFraction(t *testing.T) {
	if p := (&LatencyConfig{TraceFraction: 1}).tracePropagator(); p != nil {
		t.Errorf("fraction 1: propagator %v, want the SDK's", p)
	}
	p := (&LatencyConfig{TraceFraction: 0.25}).tracePropagator()
	ctx := tracedCtx(context.Background())
	n := 0
	for range 4000 {
		c := propagation.MapCarrier{}
		p.Inject(ctx, c)
		if v := c.Get("traceparent"); v != "" {
			n++
			if !strings.HasSuffix(v, "-01") {
				t.Fatalf("traceparent %q is not sampled", v)
			}
		}
	}
	if n < 800 || n > 1200 {
		t.Errorf("%d of 4000 requests traced at fraction 0.25", n)
	}
}
