package raftlock

// Tracing (OpenTelemetry): when the caller's context carries a recording
// span (the gateway's span of the request), an acquire adds children to
// it, so that waiting and committing can be told apart:
//
//   - "raftlock wait", only when the acquire queued behind another holder
//     or waiter: from the moment it was queued to the moment its grant was
//     proposed to Raft;
//   - "raftlock commit": from that proposal to the grant's delivery: the
//     Raft round trip (append, replicate to a majority, apply).
//
// They are recorded after the fact with the scheduler's timestamps
// (waiter.since, the grant's Sent), so the scheduler pays nothing for them;
// with no recording span in the context an acquire pays one context lookup.
// An acquire of a free key has no wait span (its wait is the gap between
// its parent's start and the commit's), and a release none of its own (its
// gateway span is its commit and a hop): each span costs the leader
// several microseconds when traced, so only those that say something are
// made. Nothing here touches the log or the state machine.

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgate/lockgate/lock/kit"
)

// TracerName is the instrumentation scope of raftlock's spans.
const TracerName = "github.com/lockgate/lockgate/backend/raftlock"

// attrFencingToken is the commit span's attribute: the grant's token.
const attrFencingToken = attribute.Key("lockgate.fencing_token")

// Span names, for tests and dashboards.
const (
	SpanWait   = "raftlock wait"
	SpanCommit = "raftlock commit"
)

// recording returns ctx's span if it records, else nil.
func recording(ctx context.Context) trace.Span {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		return span
	}
	return nil
}

// traceAcquire records an acquire's wait and commit spans under parent.
// grants is nil when it failed with err.
func traceAcquire(ctx context.Context, parent trace.Span, w *waiter, grants []*kit.Grant, err error) {
	t := parent.TracerProvider().Tracer(TracerName)
	now := time.Now()
	if err != nil || len(grants) == 0 {
		if !w.queued {
			return // refused at once: the parent's error says it all
		}
		_, span := t.Start(ctx, SpanWait, trace.WithTimestamp(w.since))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "not granted")
		}
		span.End(trace.WithTimestamp(now))
		return
	}
	sent := grants[0].Sent
	if sent.Before(w.since) { // a re-sent acquire's grant was proposed before this copy queued
		sent = w.since
	}
	if w.queued {
		_, wait := t.Start(ctx, SpanWait, trace.WithTimestamp(w.since))
		wait.End(trace.WithTimestamp(sent))
	}
	_, commit := t.Start(ctx, SpanCommit, trace.WithTimestamp(sent),
		trace.WithAttributes(attrFencingToken.Int64(int64(grants[0].Token))))
	commit.End(trace.WithTimestamp(now))
}
