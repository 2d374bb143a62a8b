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
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	p := c.opts.Propagator
	if p == nil {
		p = propagation.TraceContext{}
	}
	carrier := propagation.MapCarrier{}
	p.Inject(ctx, carrier)
	return carrier["traceparent"]
}
