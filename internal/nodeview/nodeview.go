// Package nodeview is what a lock service node shows an operator of
// itself: its Raft status and its cluster's members, the credential a
// request carries, pages of its lock table and one key's queue. The web
// console (package console) reads these, through the console.Node
// interface; backend/raftlock's Node provides them. Neither of the two
// imports the other: both import this package.
package nodeview

import (
	"encoding/json"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// PathStatus is where a member serves its own Status (a client
// credential); the console asks it of every member.
const PathStatus = "/v1/cluster/status"

// Raft is a member's Raft view of itself: what Status and a backend's
// own status type share.
type Raft struct {
	ID           string `json:"id"`
	APIAddr      string `json:"apiAddr"`
	RaftAddr     string `json:"raftAddr"`
	State        string `json:"state"` // leader, follower, candidate, shutdown
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commitIndex"`
	AppliedIndex uint64 `json:"appliedIndex"`
	LastLogIndex uint64 `json:"lastLogIndex"`
	// LastContactMs: since this follower last heard from the leader (0 on
	// the leader, -1 if never).
	LastContactMs int64  `json:"lastContactMs"`
	LeaderID      string `json:"leaderId"`
}

// Status is one member's Raft view of itself, as PathStatus serves it.
type Status struct {
	Raft
	// Formats (what the member reads) and Gate (the cluster's format gate
	// as the member applied it) are the backend's JSON, shown as they are;
	// absent from members that predate them. Halted says why the member
	// stopped, if it did.
	Formats json.RawMessage `json:"formats,omitempty"`
	Gate    json.RawMessage `json:"gate,omitempty"`
	Halted  string          `json:"halted,omitempty"`
}

// Members is the cluster's membership as one member knows it.
type Members struct {
	Term       uint64
	LeaderID   string
	LeaderAddr string            // the leader's API address
	RaftAddr   map[string]string // id → Raft address, every member
	APIAddr    map[string]string // id → API address, where known
	Voters     []string
}

// Credential is what a request presented, as the node judges it.
type Credential struct {
	// Kind is "token" (a client token), "admin-token", "certificate" (a
	// client certificate verified against the cluster CA) or "open" (no
	// credential needed: the node checks no client tokens).
	Kind string
	// Admin: the credential authorizes admin actions (force-release), by
	// the rules of membership changes.
	Admin bool
	// Who names the credential in an audit log line without revealing it:
	// a token by the first 8 bytes of its SHA-256, a certificate by its
	// subject.
	Who string
	// Identity is the credential's named identity (docs/security.md,
	// "Tenants"): a token's name in its tokens file, a certificate's
	// subject common name, "anonymous" for an open node.
	Identity string
}

// Holder is one holder of a key.
type Holder struct {
	Owner     string
	Token     lock.Token
	ExpiresIn time.Duration // on the node's clock; <= 0: expired, not yet freed
	Value     []byte
}

// Lock is one key of the lock table.
type Lock struct {
	Key     string
	Mode    lock.Mode
	Permits int
	Holders []Holder      // oldest grant first
	Waiters int           // queued acquires still waiting (known on the leader only)
	Delay   time.Duration // lock-delay left, 0 for none
}

// Waiter is one queued acquire, in queue order.
type Waiter struct {
	Owner   string
	Mode    lock.Mode
	Permits int
	Keys    []string // every key a multi-key waiter waits for; the one key otherwise
	Waiting time.Duration
}

// LockPage is a page of the lock table.
type LockPage struct {
	Locks   []Lock
	Total   int    // keys held
	Matched int    // keys containing the search string
	Next    string // the cursor of the next page, "" on the last
	// WaitersKnown: this node leads, so Waiters are counted; a follower
	// does not see the queues.
	WaitersKnown bool
	// Scan is how long the table scan took: the console paces its
	// refreshes by it (a million keys take a tenth of a second).
	Scan time.Duration
}
