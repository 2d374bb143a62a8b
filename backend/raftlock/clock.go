package raftlock

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"time"
)

// Clock is the leader's clock: the "now" stamped into every log entry, from
// which lock expiry times are computed. Replicas never read their own clock
// when applying entries. Tests and the chaos bench skew a node through it.
type Clock interface {
	// Now returns the current time in Unix nanoseconds.
	Now() int64
}

// MonotonicClock reads the wall clock once, at creation, and advances it by
// the monotonic clock afterwards: a wall-clock step (NTP, an operator) during
// a node's life does not move the expiry times it stamps. (The seed trusts
// the leader's wall clock; this is the production form of that trust.)
type MonotonicClock struct {
	base     time.Time // carries the monotonic reading
	baseWall int64
}

// NewMonotonicClock returns a clock anchored at the current wall time.
func NewMonotonicClock() *MonotonicClock {
	now := time.Now()
	return &MonotonicClock{base: now, baseWall: now.UnixNano()}
}

// Now implements Clock.
func (c *MonotonicClock) Now() int64 { return c.baseWall + int64(time.Since(c.base)) }

// SkewClock is a Clock shifted by an adjustable offset: the fault campaign's
// "jump the leader's clock forward".
type SkewClock struct {
	Base   Clock
	offset atomic.Int64
}

// NewSkewClock wraps base (nil: a MonotonicClock) with a zero offset.
func NewSkewClock(base Clock) *SkewClock {
	if base == nil {
		base = NewMonotonicClock()
	}
	return &SkewClock{Base: base}
}

// Now implements Clock.
func (c *SkewClock) Now() int64 { return c.Base.Now() + c.offset.Load() }

// Skew sets the offset added to the base clock.
func (c *SkewClock) Skew(d time.Duration) { c.offset.Store(int64(d)) }

// PathDebugClock is the fault-injection endpoint that skews a node's clock
// (mounted only with Config.FaultInjection).
const PathDebugClock = "/v1/debug/clock"

// ClockSkew is the body of POST /v1/debug/clock: the offset, in
// milliseconds, added to the node's clock from now on (0 heals).
type ClockSkew struct {
	OffsetMs int64 `json:"offsetMs"`
}

// maxDebugSkew bounds an injected clock offset.
const maxDebugSkew = 24 * time.Hour

func (n *Node) handleDebugClock(w http.ResponseWriter, r *http.Request) {
	sc, ok := n.cfg.Clock.(*SkewClock)
	if !ok {
		writeJSON(w, http.StatusConflict, map[string]string{"error": "this node's clock cannot be skewed"})
		return
	}
	var req ClockSkew
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1024))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body: " + err.Error()})
		return
	}
	d := time.Duration(req.OffsetMs) * time.Millisecond
	if d > maxDebugSkew || d < -maxDebugSkew {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "offsetMs beyond ±24h"})
		return
	}
	sc.Skew(d)
	n.log.Warn("fault injection: clock skewed", "offset", d)
	writeJSON(w, http.StatusOK, req)
}
