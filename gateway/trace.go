package gateway

// Tracing (OpenTelemetry): one server span per lock request, from the
// gateway's receipt of the request to its answer. The backend's spans (for
// raftlock: the wait in the key's queue and the Raft commit) are its
// children through the request's context. A caller's W3C Trace Context
// (the traceparent field of a WebSocket request, the traceparent header of
// a REST request) makes the span a child of the caller's.
//
// Off unless Options.TracerProvider is set: the hot path then checks one
// nil pointer.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
)

// TracerName is the instrumentation scope of the gateway's spans.
const TracerName = "github.com/lockgate/lockgate/gateway"

// Span attribute keys.
const (
	AttrOp           = attribute.Key("lockgate.op")
	AttrKeyHash      = attribute.Key("lockgate.key_hash")
	AttrKey          = attribute.Key("lockgate.key")
	AttrResult       = attribute.Key("lockgate.result")
	AttrFencingToken = attribute.Key("lockgate.fencing_token")
	AttrProtocol     = attribute.Key("lockgate.protocol")
)

// KeyHash is how a span names a key by default: the first 8 bytes of its
// SHA-256, in hex. It tells requests for one key apart without putting
// the key, which may carry user or tenant names, in the trace store.
func KeyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// w3c reads and writes the W3C Trace Context traceparent.
var w3c = propagation.TraceContext{}

// traceparentCarrier is a TextMapCarrier holding one traceparent.
type traceparentCarrier string

func (c *traceparentCarrier) Get(k string) string {
	if k == "traceparent" {
		return string(*c)
	}
	return ""
}
func (c *traceparentCarrier) Set(k, v string) {
	if k == "traceparent" {
		*c = traceparentCarrier(v)
	}
}
func (c *traceparentCarrier) Keys() []string { return []string{"traceparent"} }

// tracer is the gateway's tracer, nil when tracing is off.
type tracer struct {
	t        trace.Tracer
	keyNames bool
}

func newTracer(opts Options) *tracer {
	if opts.TracerProvider == nil {
		return nil
	}
	return &tracer{t: opts.TracerProvider.Tracer(TracerName), keyNames: opts.TraceKeyNames}
}

// start begins the span of one request received at recv, a child of the
// caller's trace context in traceparent (if any, and well formed) or of
// ctx's span.
func (t *tracer) start(ctx context.Context, recv time.Time, op, protocol, traceparent, key string) (context.Context, trace.Span) {
	if traceparent != "" {
		c := traceparentCarrier(traceparent)
		ctx = w3c.Extract(ctx, &c)
	}
	keyAttr := AttrKeyHash.String(KeyHash(key))
	if t.keyNames {
		keyAttr = AttrKey.String(key)
	}
	return t.t.Start(ctx, "lockgate "+op, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(recv),
		trace.WithAttributes(AttrOp.String(op), AttrProtocol.String(protocol), keyAttr))
}

// endSpan ends a request's span with its outcome: the result code ("ok"
// or the error's code) and, for a grant, the fencing token. A nil span is
// tracing off.
func endSpan(span trace.Span, lease *lock.Lease, err error) {
	if span == nil {
		return
	}
	noteOutcome(span, lease, err)
	span.End()
}

// noteOutcome records a request's outcome on span.
func noteOutcome(span trace.Span, lease *lock.Lease, err error) {
	if err != nil {
		code := toAPIError(err).Code
		span.SetAttributes(AttrResult.String(code))
		span.SetStatus(codes.Error, code)
		return
	}
	if lease != nil {
		span.SetAttributes(AttrResult.String("ok"), AttrFencingToken.Int64(int64(lease.Token)))
		return
	}
	span.SetAttributes(AttrResult.String("ok"))
}

// restSpan begins the span of a REST request to /locks/{key} when tracing
// is on, with the caller's traceparent header. The returned request
// carries it in its context; done ends it.
func (g *Gateway) restSpan(w http.ResponseWriter, r *http.Request, op, key string) (http.ResponseWriter, *http.Request, func()) {
	if g.tracer == nil {
		return w, r, func() {}
	}
	ctx, span := g.tracer.start(r.Context(), time.Now(), op, "rest", r.Header.Get("traceparent"), key)
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	return sw, r.WithContext(ctx), func() {
		span.SetAttributes(attribute.Int("http.response.status_code", sw.status))
		if sw.status >= 400 {
			span.SetStatus(codes.Error, http.StatusText(sw.status))
		}
		span.End()
	}
}

// noteREST records a REST request's outcome on its span, if it has one.
func noteREST(r *http.Request, lease *lock.Lease, err error) {
	if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
		noteOutcome(span, lease, err)
	}
}

// noteRESTCode records a REST error's code on the request's span, if any.
func noteRESTCode(r *http.Request, code string) {
	if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
		span.SetAttributes(AttrResult.String(code))
	}
}

// statusWriter remembers the status of a traced REST answer.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// wsSpan begins the span of a WebSocket request when tracing is on; it
// returns nil otherwise.
func (c *conn) wsSpan(ctx context.Context, recv time.Time, op string, req wire.Request) (context.Context, trace.Span) {
	t := c.g.tracer
	if t == nil {
		return ctx, nil
	}
	return t.start(ctx, recv, op, "ws", req.Traceparent, req.Key)
}
