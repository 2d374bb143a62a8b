package raftlock

import "time"

// Clock is the leader's clock: the "now" stamped into every log entry, from
// which lock expiry times are computed. Replicas never read their own clock
// when applying entries. Tests and the chaos bench skew a node through it.
type Clock interface {
	// Now returns the current time in Unix nanoseconds.
	Now() int64
}

// MonotonicClock reads the wall clock once, at creation, and advances it by
// the monotonic clock afterwards: a wall-clock step (NTP, an operator) during
// a node's life does not move the expiry times it stamps. (The design trusts
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
