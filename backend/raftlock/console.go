package raftlock

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/internal/nodeview"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// What the web console (package console, docs/console.md) reads of a node,
// in the types of internal/nodeview: its own Raft status and the cluster's
// members, the credential a request carries, pages of the lock table and
// one key's queue. The HTTP endpoints live in package console, which reads
// a Node through its console.Node interface; GET /v1/cluster/status, which
// the console asks of every member, is served here beside the membership
// API.

// PathStatus is one node's own Raft status (a client credential).
const PathStatus = nodeview.PathStatus

// NodeStatus is one node's Raft view of itself.
type NodeStatus struct {
	nodeview.Raft
	// Formats is what the node reads (absent from binaries that predate
	// the format gate: they read format 1); Gate is the cluster's gate as
	// this node applied it; Halted says why the node stopped, if it did.
	Formats *NodeFormats `json:"formats,omitempty"`
	Gate    *fsm.Gate    `json:"gate,omitempty"`
	Halted  string       `json:"halted,omitempty"`
}

// Status returns this node's Raft view of itself.
func (n *Node) Status() NodeStatus {
	st := n.raft.State()
	lid, _ := n.Leader()
	s := NodeStatus{Raft: nodeview.Raft{ID: n.cfg.ID, APIAddr: n.cfg.APIAddr, RaftAddr: n.RaftAddr(), State: stateName(st), Term: n.term(),
		CommitIndex: n.raft.CommitIndex(), AppliedIndex: n.raft.AppliedIndex(), LastLogIndex: n.raft.LastIndex(),
		LastContactMs: -1, LeaderID: lid}, Formats: n.formats()}
	g := n.fsm.Gate()
	s.Gate = &g
	if err := n.HaltErr(); err != nil {
		s.Halted = err.Error()
	}
	switch {
	case st == raft.Leader:
		s.LastContactMs = 0
	case !n.raft.LastContact().IsZero():
		s.LastContactMs = time.Since(n.raft.LastContact()).Milliseconds()
	}
	return s
}

// StatusView is Status as the console shows it: the formats and the gate
// as their JSON.
func (n *Node) StatusView() nodeview.Status {
	st := n.Status()
	v := nodeview.Status{Raft: st.Raft, Halted: st.Halted}
	if st.Formats != nil {
		v.Formats, _ = json.Marshal(st.Formats) // plain fields: never fails
	}
	if st.Gate != nil {
		v.Gate, _ = json.Marshal(st.Gate)
	}
	return v
}

// MembersView is Peers as the console reads it.
func (n *Node) MembersView() (nodeview.Members, error) {
	pl, err := n.Peers()
	if err != nil {
		return nodeview.Members{}, err
	}
	return nodeview.Members{Term: pl.Term, LeaderID: pl.LeaderID, LeaderAddr: pl.LeaderAddr,
		RaftAddr: pl.PeerAddress, APIAddr: pl.APIAddress, Voters: pl.Voters}, nil
}

func stateName(st raft.RaftState) string {
	switch st {
	case raft.Leader:
		return "leader"
	case raft.Follower:
		return "follower"
	case raft.Candidate:
		return "candidate"
	}
	return "shutdown"
}

func (n *Node) handleStatus(w http.ResponseWriter, r *http.Request) {
	if _, ok := n.Credential(r); !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="lockgate"`)
		writeJSON(w, http.StatusUnauthorized, Reply{Error: "a client credential is required: a bearer token, an admin token or a client certificate from the cluster CA"})
		return
	}
	writeJSON(w, http.StatusOK, n.Status())
}

// identityOf is the identity set names tok by: its name when the set
// names its tokens (gateway.Tokens does), else the unnamed form.
func identityOf(set TokenSet, tok string) string {
	if ids, ok := set.(interface {
		Identify(string) (string, bool)
	}); ok {
		if id, ok := ids.Identify(tok); ok {
			return id
		}
	}
	d := sha256.Sum256([]byte(tok))
	return "token-" + hex.EncodeToString(d[:8])
}

// Credential reports the credential r carries and whether it may read the
// lock table: any credential that the lock API accepts (a client token;
// or none when the node checks no client tokens), an admin token, or a
// client certificate verified against the cluster CA. The token is r's
// Authorization header's.
func (n *Node) Credential(r *http.Request) (nodeview.Credential, bool) {
	tok, ok := bearerToken(r)
	return n.CredentialWith(r, tok, ok)
}

// CredentialWith is Credential with the bearer token found elsewhere than
// the header (the gateway reads a browser's from its WebSocket
// subprotocol); hasToken false: none.
func (n *Node) CredentialWith(r *http.Request, tok string, hasToken bool) (nodeview.Credential, bool) {
	p := n.membershipPolicy()
	if p.peerAuth && peerVerified(r) {
		subj := r.TLS.VerifiedChains[0][0].Subject
		id := subj.CommonName
		if id == "" {
			id = subj.String()
		}
		return nodeview.Credential{Kind: "certificate", Admin: true, Who: "certificate " + subj.String(), Identity: id}, true
	}
	if hasToken {
		who := func(kind string) string {
			d := sha256.Sum256([]byte(tok))
			return kind + " sha256:" + hex.EncodeToString(d[:8])
		}
		if p.admin != nil && p.admin.Valid(tok) {
			return nodeview.Credential{Kind: "admin-token", Admin: true, Who: who("admin-token"), Identity: identityOf(p.admin, tok)}, true
		}
		if p.client != nil && p.client.Valid(tok) {
			return nodeview.Credential{Kind: "token", Who: who("token"), Identity: identityOf(p.client, tok)}, true
		}
	}
	if p.client == nil {
		code, _ := p.decide(r) // no admin credential: admin only in loopback development
		return nodeview.Credential{Kind: "open", Admin: code == 0, Who: "open", Identity: "anonymous"}, true
	}
	return nodeview.Credential{}, false
}

// ScanLocks returns the held keys containing q after the key after, in key
// order, at most limit (1..fsm.MaxScanLimit) of them. One scan runs at a
// time on a node; it visits the whole table (fsm.ScanLocks has its cost).
func (n *Node) ScanLocks(q, after string, limit int) nodeview.LockPage {
	n.scanMu.Lock()
	start := time.Now()
	res := n.fsm.ScanLocks(after, q, limit)
	took := time.Since(start)
	n.scanMu.Unlock()
	page := nodeview.LockPage{Total: res.Total, Matched: res.Matched, WaitersKnown: n.IsLeader(), Scan: took}
	for _, k := range res.Keys {
		page.Locks = append(page.Locks, n.consoleLock(k))
	}
	if res.More && len(res.Keys) > 0 {
		page.Next = res.Keys[len(res.Keys)-1]
	}
	return page
}

// consoleLock reads key's holders and its waiter count.
func (n *Node) consoleLock(key string) nodeview.Lock {
	now := n.cfg.Clock.Now()
	ls, _ := n.fsm.Holders(key)
	c := nodeview.Lock{Key: key}
	for i, l := range ls {
		if i == 0 {
			c.Mode, c.Permits = lock.Mode(l.Mode), int(l.Permits)
		}
		c.Holders = append(c.Holders, nodeview.Holder{Owner: plainOwner(l.Owner), Token: lock.Token(l.Token),
			ExpiresIn: time.Duration(l.Expires - now), Value: l.Value})
	}
	if until := n.fsm.Delay(key); until > now {
		c.Delay = time.Duration(until - now)
	}
	sc := n.sched
	sc.mu.Lock()
	if q := sc.queues[key]; q != nil {
		c.Waiters = liveWaiters(q)
	}
	sc.mu.Unlock()
	return c
}

// LockDetail returns key as ScanLocks shows it, with its queue: at most
// maxQueue waiters, in queue order (the leader's; a follower has none).
func (n *Node) LockDetail(key string, maxQueue int) (nodeview.Lock, []nodeview.Waiter, error) {
	if err := kit.ValidateKey(key); err != nil {
		return nodeview.Lock{}, nil, err
	}
	c := n.consoleLock(key)
	now := time.Now()
	var queue []nodeview.Waiter
	sc := n.sched
	sc.mu.Lock()
	if q := sc.queues[key]; q != nil {
		for _, w := range q.waiters {
			if w.gone || w.try || w.inflight {
				continue
			}
			if len(queue) == maxQueue {
				break
			}
			queue = append(queue, nodeview.Waiter{Owner: w.opts.Owner, Mode: w.opts.Mode, Permits: w.opts.Permits,
				Keys: slices.Clone(w.allKeys()), Waiting: now.Sub(w.since)})
		}
	}
	sc.mu.Unlock()
	return c, queue, nil
}

// APIScheme and APIClient are how this node talks to its peers' API
// addresses (the console's fan-out and forwarding): HTTPS with the node's
// client certificate when it runs TLS.
func (n *Node) APIScheme() string {
	if n.cfg.TLS != nil {
		return "https"
	}
	return "http"
}

// APITransport is an http.RoundTripper to the peers' API addresses, with
// the node's TLS client configuration.
func (n *Node) APITransport() http.RoundTripper {
	n.apiTransportOnce.Do(func() {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if n.cfg.TLS != nil {
			tr.TLSClientConfig = n.cfg.TLS.ClientConfig()
		}
		tr.MaxIdleConnsPerHost = 4
		n.apiTransport = tr
	})
	return n.apiTransport
}
