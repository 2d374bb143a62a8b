package raftlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/internal/audit"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// The operator's view of the tenants (docs/security.md, "Tenants"): what
// each identity holds, cluster-wide, and a way to end all of it at once —
// a flood of sessions or leases is cleared without a restart.

// Paths of the identity endpoints (admin credential).
const (
	PathIdentities     = "/v1/cluster/identities"
	PathIdentityCloser = "/v1/cluster/identities/close"
)

// IdentityUsage is what one identity holds.
type IdentityUsage struct {
	Identity string `json:"identity"`
	Leases   int    `json:"leases"`
	Sessions int    `json:"sessions"`
}

// IdentityList answers GET /v1/cluster/identities.
type IdentityList struct {
	Identities []IdentityUsage `json:"identities"`
	AnsweredBy string          `json:"answeredBy"`
}

// CloseIdentityArgs is the body of POST /v1/cluster/identities/close.
type CloseIdentityArgs struct {
	Identity string `json:"identity"`
}

// CloseIdentityReply says what a close ended.
type CloseIdentityReply struct {
	Sessions int    `json:"sessions"`
	Leases   int    `json:"leases"`
	LeaderID string `json:"leaderId,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Identities lists what every identity holds, most leases first.
func (n *Node) Identities() []IdentityUsage {
	var out []IdentityUsage
	n.fsm.EachIdentityUsage(func(id string, u fsm.Usage) {
		out = append(out, IdentityUsage{Identity: id, Leases: u.Leases, Sessions: u.Sessions})
	})
	slices.SortFunc(out, func(a, b IdentityUsage) int {
		if a.Leases != b.Leases {
			return b.Leases - a.Leases
		}
		if a.Sessions != b.Sessions {
			return b.Sessions - a.Sessions
		}
		return strings.Compare(a.Identity, b.Identity)
	})
	return out
}

// EachIdentityUsage calls fn with what every identity holds (the
// gateway's per-identity metrics).
func (n *Node) EachIdentityUsage(fn func(identity string, leases, sessions int)) {
	n.fsm.EachIdentityUsage(func(id string, u fsm.Usage) { fn(id, u.Leases, u.Sessions) })
}

// CloseIdentity ends every session of identity (releasing its leases) and
// releases every other lease it holds, on the leader. who is the
// operator, for the audit trail.
func (n *Node) CloseIdentity(ctx context.Context, identity string, who audit.Caller) (sessions, leases int, err error) {
	if identity == "" {
		return 0, 0, errors.New("raftlock: name the identity to close")
	}
	var ids []string
	n.fsm.ForEachSession(func(s fsm.SessionInfo) bool {
		if id, _ := fsm.SplitOwner(s.Owner); id == identity {
			ids = append(ids, s.ID)
		}
		return true
	})
	var errs []error
	for _, sid := range ids {
		s := kit.NewSession(kit.SessionGrant{ID: sid, TTL: lock.DefaultSessionTTL, Sent: time.Now()})
		switch err := n.CloseSession(ctx, s); {
		case err == nil:
			sessions++
		case errors.Is(err, lock.ErrSessionExpired), errors.Is(err, lock.ErrNotHeld):
		default:
			errs = append(errs, err)
		}
	}
	var held []fsm.Lock
	n.fsm.ForEachLock(func(l fsm.Lock) bool {
		if id, _ := fsm.SplitOwner(l.Owner); id == identity && l.Session == "" {
			held = append(held, l)
		}
		return true
	})
	for _, l := range held {
		lease := kit.NewLease(kit.Grant{Key: l.Key, Token: lock.Token(l.Token), Handle: l.Handle, TTL: l.TTL, Sent: time.Now()})
		switch err := n.Release(ctx, lease); {
		case err == nil:
			leases++
		case errors.Is(err, lock.ErrNotHeld):
		default:
			errs = append(errs, err)
		}
	}
	n.audit(audit.Event{Op: audit.OpForceRelease, Identity: who.Identity, Remote: who.Remote,
		Detail: fmt.Sprintf("closed identity %s: %d sessions, %d other leases", identity, sessions, leases)})
	return sessions, leases, errors.Join(errs...)
}

func (n *Node) handleIdentities(w http.ResponseWriter, r *http.Request) {
	if !n.authorized(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, IdentityList{Identities: n.Identities(), AnsweredBy: n.cfg.ID})
}

func (n *Node) handleCloseIdentity(w http.ResponseWriter, r *http.Request) {
	if !n.authorized(w, r) {
		return
	}
	var a CloseIdentityArgs
	if !readJSON(w, r, &a) {
		return
	}
	if a.Identity == "" {
		writeJSON(w, http.StatusBadRequest, CloseIdentityReply{Error: "identity is required"})
		return
	}
	if n.forwardToLeader(w, r, PathIdentityCloser, a, func(lid, msg string) any { return CloseIdentityReply{LeaderID: lid, Error: msg} }) {
		return
	}
	cred, _ := n.Credential(r)
	sessions, leases, err := n.CloseIdentity(r.Context(), a.Identity, audit.Caller{Identity: cred.Identity, Remote: r.RemoteAddr})
	rep := CloseIdentityReply{Sessions: sessions, Leases: leases, LeaderID: n.cfg.ID}
	code := http.StatusOK
	if err != nil {
		rep.Error, code = err.Error(), http.StatusServiceUnavailable
	}
	n.log.Warn("identity closed by an operator", "identity", a.Identity, "sessions", sessions, "leases", leases, "by", cred.Who, "err", err)
	writeJSON(w, code, rep)
}

// ListIdentities asks the member at apiAddr what every identity holds.
func (mc *MembershipClient) ListIdentities(ctx context.Context, apiAddr string) (*IdentityList, error) {
	var l IdentityList
	if err := mc.getJSON(ctx, apiAddr, PathIdentities, "identity list", &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// CloseIdentity asks the member at apiAddr (it forwards to the leader) to
// end every session and lease of identity.
func (mc *MembershipClient) CloseIdentity(ctx context.Context, apiAddr, identity string) (*CloseIdentityReply, error) {
	var rep CloseIdentityReply
	code, err := mc.postJSON(ctx, apiAddr, PathIdentityCloser, 0, CloseIdentityArgs{Identity: identity}, &rep)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return &rep, fmt.Errorf("raftlock: %s: %d: %s", apiAddr, code, rep.Error)
	}
	return &rep, nil
}

// forwardToLeader answers, on a follower, a JSON POST that only the leader
// carries out: it forwards body to the leader (at most DefaultMaxJoinHops
// hops) and writes the leader's answer, or an error that fail builds
// (given the leader's id and what went wrong). It reports false on the
// leader, which then answers r itself.
func (n *Node) forwardToLeader(w http.ResponseWriter, r *http.Request, path string, body any, fail func(leaderID, msg string) any) bool {
	if n.raft.State() == raft.Leader {
		return false
	}
	lid, laddr := n.Leader()
	hops, _ := strconv.Atoi(r.Header.Get(hopsHeader))
	if laddr == "" || hops+1 >= DefaultMaxJoinHops {
		writeJSON(w, http.StatusServiceUnavailable, fail(lid, "no leader reachable from node "+n.cfg.ID))
		return true
	}
	var rep json.RawMessage
	code, err := n.members.postJSON(r.Context(), laddr, path, hops+1, body, &rep)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, fail(lid, "forwarding to the leader: "+err.Error()))
		return true
	}
	writeJSON(w, code, rep)
	return true
}
