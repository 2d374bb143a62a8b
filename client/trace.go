package client

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceparent is the W3C Trace Context of ctx's span as the propagator
// writes it, or "" when ctx carries no span (the common case, one context
// lookup).
func (c *Client) traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	p := c.opts.Propagator
	if p == nil {
		// W3C Trace Context's traceparent, version 00, written here
		// rather than through propagation.TraceContext and a map.
		return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + (sc.TraceFlags() & trace.FlagsSampled).String()
	}
	carrier := propagation.MapCarrier{}
	p.Inject(ctx, carrier)
	return carrier["traceparent"]
}
