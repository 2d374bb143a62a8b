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
