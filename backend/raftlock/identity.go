package raftlock

import (
	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/lock"
)

// The node records the identity of every lease and session in the
// replicated state (fsm/identity.go), so that quotas count cluster-wide
// and survive leader changes and restarts.
var _ lock.IdentityRecorder = (*Node)(nil)

// IdentityUsage implements lock.IdentityRecorder from this node's state.
func (n *Node) IdentityUsage(identity string) (leases, sessions int) {
	u := n.fsm.IdentityUsage(identity)
	return u.Leases, u.Sessions
}

// LeaseIdentity implements lock.IdentityRecorder.
func (n *Node) LeaseIdentity(key, handle string) (string, bool) {
	return n.fsm.HolderIdentity(key, handle)
}

// SessionIdentity implements lock.IdentityRecorder.
func (n *Node) SessionIdentity(id string) (string, bool) {
	return n.fsm.SessionIdentity(id)
}

// plainOwner is a stored owner without its identity tag: what clients and
// the console see.
func plainOwner(stored string) string {
	_, owner := fsm.SplitOwner(stored)
	return owner
}

// The embedded cluster's Locker (`lockgate serve --backend raft`) answers
// from its first node's state: replicated, as every node's is.
var _ lock.IdentityRecorder = (*clusterLocker)(nil)

func (cl *clusterLocker) node() *Node {
	if ns := cl.c.Nodes(); len(ns) > 0 {
		return ns[0]
	}
	return nil
}

// IdentityUsage implements lock.IdentityRecorder.
func (cl *clusterLocker) IdentityUsage(identity string) (leases, sessions int) {
	if n := cl.node(); n != nil {
		return n.IdentityUsage(identity)
	}
	return 0, 0
}

// LeaseIdentity implements lock.IdentityRecorder.
func (cl *clusterLocker) LeaseIdentity(key, handle string) (string, bool) {
	if n := cl.node(); n != nil {
		return n.LeaseIdentity(key, handle)
	}
	return "", false
}

// SessionIdentity implements lock.IdentityRecorder.
func (cl *clusterLocker) SessionIdentity(id string) (string, bool) {
	if n := cl.node(); n != nil {
		return n.SessionIdentity(id)
	}
	return "", false
}

// EachIdentityUsage calls fn with what every identity holds.
func (cl *clusterLocker) EachIdentityUsage(fn func(identity string, leases, sessions int)) {
	if n := cl.node(); n != nil {
		n.EachIdentityUsage(fn)
	}
}
