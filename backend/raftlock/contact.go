package raftlock

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// contactTransport is the node's Raft transport, noting when an append
// (or heartbeat, or snapshot) from a leader last arrived and from which
// server, whether or not this node then accepts it. hashicorp/raft's own
// LastContact moves only on an accepted append, so a follower whose log
// the new leader is still walking back (after a crash, one entry a round
// trip with back-off: seconds) would seem not to hear from a leader that
// talks to it all the while; Leader uses this to name only a leader that
// was heard from lately.
type contactTransport struct {
	*raft.NetworkTransport
	rpcs chan raft.RPC
	done <-chan struct{}
	last atomic.Pointer[contact]
	// hb guards the heartbeat fast path against the node's shutdown:
	// hashicorp/raft runs a heartbeat on the transport's own goroutine,
	// past its shutdown check, and a heartbeat of a newer term writes the
	// stable store; closing waits for those in flight and refuses later
	// ones, so that the stores are never closed under one.
	hb     sync.RWMutex
	closed bool
}

// contact is one append's arrival: when, and the leader's server id.
type contact struct {
	at     time.Time
	leader string
}

// newContactTransport wraps t; its Consumer forwards t's RPCs until done
// closes.
func newContactTransport(t *raft.NetworkTransport, done <-chan struct{}) *contactTransport {
	ct := &contactTransport{NetworkTransport: t, rpcs: make(chan raft.RPC), done: done}
	go ct.forward()
	return ct
}

func (ct *contactTransport) forward() {
	in := ct.NetworkTransport.Consumer()
	for {
		select {
		case rpc := <-in:
			ct.note(rpc)
			select {
			case ct.rpcs <- rpc:
			case <-ct.done:
				return
			}
		case <-ct.done:
			return
		}
	}
}

// Consumer implements raft.Transport.
func (ct *contactTransport) Consumer() <-chan raft.RPC { return ct.rpcs }

// SetHeartbeatHandler implements raft.Transport: heartbeats take a fast
// path past Consumer, and count as contact too.
func (ct *contactTransport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	if cb == nil {
		ct.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	ct.NetworkTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		ct.hb.RLock()
		defer ct.hb.RUnlock()
		if ct.closed {
			rpc.Respond(nil, raft.ErrRaftShutdown)
			return
		}
		ct.note(rpc)
		cb(rpc)
	})
}

// closeHeartbeats waits for the heartbeats being handled and refuses the
// ones that come after: the node calls it after raft has shut down and
// before it closes its stores.
func (ct *contactTransport) closeHeartbeats() {
	ct.hb.Lock()
	ct.closed = true
	ct.hb.Unlock()
}

func (ct *contactTransport) note(rpc raft.RPC) {
	var id []byte
	switch req := rpc.Command.(type) {
	case *raft.AppendEntriesRequest:
		id = req.ID
	case *raft.InstallSnapshotRequest:
		id = req.ID
	default:
		return
	}
	ct.last.Store(&contact{at: time.Now(), leader: string(id)})
}

// heardWithin reports whether the leader with server id lid was heard
// from within d.
func (ct *contactTransport) heardWithin(lid string, d time.Duration) bool {
	c := ct.last.Load()
	return c != nil && c.leader == lid && time.Since(c.at) <= d
}
