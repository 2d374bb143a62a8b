package raftgw

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/lock"
)

// tracedCluster starts a three-node cluster whose gateways trace into an
// in-memory exporter, and a client of it.
func tracedCluster(t *testing.T, keyNames bool) (*raftlock.LocalCluster, *tracetest.InMemoryExporter, *client.Client) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	c := startRaftWith(t, gateway.Options{TracerProvider: tp, TraceKeyNames: keyNames})
	leaderAPI(t, c)
	var addrs []string
	for _, s := range c.Servers {
		addrs = append(addrs, s.APIAddr())
	}
	cl, err := client.New(addrs, client.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return c, exp, cl
}

// appSpan starts the span of the client application: its own tracer
// provider, apart from the server's.
func appSpan(t *testing.T, name string) (context.Context, trace.Span) {
	t.Helper()
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp.Tracer("app").Start(context.Background(), name)
}

// serverSpans waits until the exporter holds a span named name in trace
// tid that the leader answered (result ok; the gateway ends its span right
// after sending the answer, which the client may read first), then
// returns every span of that trace.
func serverSpans(t *testing.T, exp *tracetest.InMemoryExporter, tid trace.TraceID, name string) tracetest.SpanStubs {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var in tracetest.SpanStubs
		found := false
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID() == tid {
				in = append(in, s)
				v, _ := attr(s, gateway.AttrResult)
				found = found || s.Name == name && v.AsString() == "ok"
			}
		}
		if found {
			return in
		}
		if time.Now().After(deadline) {
			t.Fatalf("no span %q in trace %s; exported: %v", name, tid, names(exp.GetSpans()))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func names(spans tracetest.SpanStubs) []string {
	var n []string
	for _, s := range spans {
		n = append(n, s.Name+"@"+s.SpanContext.TraceID().String())
	}
	return n
}

func one(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans %q, want 1: %v", len(found), name, names(spans))
	}
	return found[0]
}

// answered returns the one span named name that the leader answered
// (result ok): a client that first reached a follower has its
// redirect's span too (result not_leader).
func answered(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	var ok tracetest.SpanStubs
	for _, s := range spans {
		if v, _ := attr(s, gateway.AttrResult); s.Name != name || v.AsString() == "ok" {
			ok = append(ok, s)
		} else if v.AsString() != "not_leader" {
			t.Errorf("span %q answered %q", name, v.AsString())
		}
	}
	return one(t, ok, name)
}

func attr(s tracetest.SpanStub, k attribute.Key) (attribute.Value, bool) {
	for _, a := range s.Attributes {
		if a.Key == k {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// TestTraceJoinsClientSpan: a Go client's acquire under an application
// span yields, on the leader, a gateway span in the application's trace
// (a child of its span: the traceparent field carried it) and, under it,
// raftlock's commit span (no wait span: the key was free); the gateway
// span has the op, the key's hash (not the key: no attribute of any span
// holds it), the result code and the fencing token. The release is
// traced the same way.
func TestTraceJoinsClientSpan(t *testing.T) {
	_, exp, cl := tracedCluster(t, false)
	const key = "tenant-acme/orders/42"
	ctx, parent := appSpan(t, "app acquire")
	lease, err := cl.Acquire(ctx, key, lock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tid := parent.SpanContext().TraceID()
	spans := serverSpans(t, exp, tid, "lockgate acquire")
	gw := answered(t, spans, "lockgate acquire")
	if gw.Parent.SpanID() != parent.SpanContext().SpanID() || !gw.Parent.IsRemote() {
		t.Errorf("gateway span's parent %s (remote %v), want the client's span %s", gw.Parent.SpanID(), gw.Parent.IsRemote(), parent.SpanContext().SpanID())
	}
	if gw.SpanKind != trace.SpanKindServer {
		t.Errorf("gateway span kind %v, want server", gw.SpanKind)
	}
	for k, want := range map[attribute.Key]attribute.Value{
		gateway.AttrOp:           attribute.StringValue("acquire"),
		gateway.AttrKeyHash:      attribute.StringValue(gateway.KeyHash(key)),
		gateway.AttrResult:       attribute.StringValue("ok"),
		gateway.AttrFencingToken: attribute.Int64Value(int64(lease.Token)),
	} {
		if got, ok := attr(gw, k); !ok || got != want {
			t.Errorf("gateway span %s = %v (set %v), want %v", k, got.Emit(), ok, want.Emit())
		}
	}
	if s := one(t, spans, raftlock.SpanCommit); s.Parent.SpanID() != gw.SpanContext.SpanID() {
		t.Errorf("commit span's parent %s, want the gateway span %s", s.Parent.SpanID(), gw.SpanContext.SpanID())
	}
	for _, s := range spans {
		if s.Name == raftlock.SpanWait {
			t.Errorf("an acquire of a free key has a wait span")
		}
	}
	if err := cl.Release(ctx, lease); err != nil {
		t.Fatal(err)
	}
	spans = serverSpans(t, exp, tid, "lockgate release")
	rel := answered(t, spans, "lockgate release")
	if rel.Parent.SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("release span's parent %s, want the client's span", rel.Parent.SpanID())
	}
	for _, s := range exp.GetSpans() {
		for _, a := range s.Attributes {
			if a.Value.Emit() == key {
				t.Errorf("span %q has the key name in %s, though key names were not asked for", s.Name, a.Key)
			}
		}
	}
}

// TestTraceKeyNames: with TraceKeyNames the gateway span names the key.
func TestTraceKeyNames(t *testing.T) {
	_, exp, cl := tracedCluster(t, true)
	const key = "named/key"
	ctx, parent := appSpan(t, "app")
	lease, err := cl.TryAcquire(ctx, key, lock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Release(context.Background(), lease)
	gw := answered(t, serverSpans(t, exp, parent.SpanContext().TraceID(), "lockgate tryAcquire"), "lockgate tryAcquire")
	if v, ok := attr(gw, gateway.AttrKey); !ok || v.AsString() != key {
		t.Errorf("lockgate.key = %q (set %v), want %q", v.AsString(), ok, key)
	}
	if _, ok := attr(gw, gateway.AttrKeyHash); ok {
		t.Errorf("key hash recorded besides the key name")
	}
}

// TestTraceWaitVersusCommit: an acquire queued behind a holder spends its
// wait in "raftlock wait" (which ends only after the holder's release was
// sent), and its Raft round trip in "raftlock commit", which starts when
// the wait ends; both are children of the gateway span.
func TestTraceWaitVersusCommit(t *testing.T) {
	_, exp, cl := tracedCluster(t, false)
	const key = "contended"
	first, err := cl.Acquire(context.Background(), key, lock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, parent := appSpan(t, "app waits")
	got := make(chan *lock.Lease, 1)
	go func() {
		l, err := cl.Acquire(ctx, key, lock.AcquireOptions{TTL: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := cl.Inspect(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if info.Waiters > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second acquire never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	released := time.Now()
	if err := cl.Release(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second == nil {
		return
	}
	defer cl.Release(context.Background(), second)
	spans := serverSpans(t, exp, parent.SpanContext().TraceID(), "lockgate acquire")
	wait, commit := one(t, spans, raftlock.SpanWait), one(t, spans, raftlock.SpanCommit)
	if wait.EndTime.Before(released) {
		t.Errorf("wait span ended at %v, before the holder's release was sent at %v", wait.EndTime, released)
	}
	gw := answered(t, spans, "lockgate acquire")
	if wait.Parent.SpanID() != gw.SpanContext.SpanID() || commit.Parent.SpanID() != gw.SpanContext.SpanID() {
		t.Errorf("wait and commit spans are not children of the gateway span")
	}
	if commit.StartTime.Before(wait.EndTime) || commit.EndTime.Before(commit.StartTime) {
		t.Errorf("commit span [%v, %v] does not follow the wait that ended at %v", commit.StartTime, commit.EndTime, wait.EndTime)
	}
	if v, _ := attr(commit, "lockgate.fencing_token"); v.AsInt64() != int64(second.Token) {
		t.Errorf("commit span's fencing token %d, want %d", v.AsInt64(), second.Token)
	}
}

// TestTraceREST: POST /locks/{key} with a traceparent header joins its
// trace.
func TestTraceREST(t *testing.T) {
	c, exp, _ := tracedCluster(t, false)
	_, parent := appSpan(t, "curl")
	h := propagation.HeaderCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpan(context.Background(), parent), h)
	req, _ := http.NewRequest("POST", "http://"+leaderAPI(t, c)+"/locks/"+url.PathEscape("rest/key"), nil)
	req.Header.Set("traceparent", h.Get("traceparent"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST = %d", resp.StatusCode)
	}
	spans := serverSpans(t, exp, parent.SpanContext().TraceID(), "lockgate acquire")
	gw := answered(t, spans, "lockgate acquire")
	if gw.Parent.SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("REST span's parent %s, want %s", gw.Parent.SpanID(), parent.SpanContext().SpanID())
	}
	if v, _ := attr(gw, gateway.AttrProtocol); v.AsString() != "rest" {
		t.Errorf("protocol %q", v.AsString())
	}
	one(t, spans, raftlock.SpanCommit)
}
