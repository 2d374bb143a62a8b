package raftlock

import (
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Faults injects faults into one node: the hooks through which lockgate's
// own tests and its chaos bench cut Raft links and move the leader's
// clock. They are inert until called; a node in production never calls
// them. A process-level campaign reaches the clock hook over HTTP instead
// (PathDebugClock, mounted only with Config.FaultInjection).
type Faults struct{ n *Node }

// Faults returns the node's fault hooks.
func (n *Node) Faults() Faults { return Faults{n} }

// Partition cuts this node's Raft traffic to and from the peers at the
// given Raft addresses: dials to them fail and the connections open to
// them close. Call it on both sides to sever two nodes; Heal undoes it.
func (f Faults) Partition(raftAddrs ...string) { f.n.stream.block(true, toServerAddrs(raftAddrs)...) }

// Heal restores Raft traffic to the given peers.
func (f Faults) Heal(raftAddrs ...string) { f.n.stream.block(false, toServerAddrs(raftAddrs)...) }

// SkewClock sets the offset added to this node's clock from now on (0
// heals): "jump the leader's clock". It needs Config.FaultInjection, which
// gives the node an adjustable clock.
func (f Faults) SkewClock(d time.Duration) error {
	sc, ok := f.n.cfg.Clock.(*skewClock)
	if !ok {
		return errNoSkew
	}
	sc.offset.Store(int64(d))
	f.n.log.Warn("fault injection: clock skewed", "offset", d)
	return nil
}

var errNoSkew = errors.New("raftlock: this node's clock cannot be skewed (Config.FaultInjection is off)")

// errPartitioned is returned by a dial to a peer that Faults.Partition cut off.
var errPartitioned = errors.New("raftlock: peer cut off by an injected network fault")

func toServerAddrs(a []string) []raft.ServerAddress {
	out := make([]raft.ServerAddress, len(a))
	for i, s := range a {
		out[i] = raft.ServerAddress(s)
	}
	return out
}

// skewClock is a Clock shifted by an adjustable offset (Faults.SkewClock).
type skewClock struct {
	base   Clock
	offset atomic.Int64
}

func (c *skewClock) Now() int64 { return c.base.Now() + c.offset.Load() }

// PathDebugClock is Faults.SkewClock over HTTP, for a node in another
// process: POST a ClockSkew. Mounted only with Config.FaultInjection.
const PathDebugClock = "/v1/debug/clock"

// ClockSkew is the body of POST PathDebugClock: the offset, in
// milliseconds, added to the node's clock from now on (0 heals).
type ClockSkew struct {
	OffsetMs int64 `json:"offsetMs"`
}

// maxDebugSkew bounds an injected clock offset.
const maxDebugSkew = 24 * time.Hour

func (n *Node) handleDebugClock(w http.ResponseWriter, r *http.Request) {
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
	if err := n.Faults().SkewClock(d); err != nil {
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, req)
}
