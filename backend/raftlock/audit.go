package raftlock

import (
	"net/http"
	"strconv"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/internal/audit"
)

// The audit trail (docs/security.md, "Audit trail"): the gateway records
// what a request asked for (grants, releases, session opens and closes,
// refusals) with the caller's address; the node records what its leader
// decided on its own (expiries: of a lease, of a session and the leases it
// took with it), and the operator's actions it carries out (force-release,
// membership changes, backups). Only the leader records expiries: the
// decision is its.

// audit records e (a nil log records nothing).
func (n *Node) audit(e audit.Event) {
	if n.cfg.Audit == nil {
		return
	}
	if e.Node == "" {
		e.Node = n.cfg.ID
	}
	if e.Result == "" {
		e.Result = audit.ResultOK
	}
	n.cfg.Audit.Record(e)
}

// auditObserved records the leader's expiries as the state machine
// applies them.
func (n *Node) auditObserved(ev fsm.Event) {
	if n.cfg.Audit == nil || ev.Kind != fsm.EventExpired || !n.IsLeader() {
		return
	}
	id, _ := fsm.SplitOwner(ev.Lock.Owner)
	e := audit.Event{Op: audit.OpExpire, Identity: id, Keys: []string{ev.Key}, FencingToken: ev.Lock.Token}
	if ev.Lock.Session != "" {
		e.Detail = "a lease of a session that expired"
	}
	n.audit(e)
}

// auditSessionsExpired records the sessions an expiry entry ended (those
// its results say it did: a session renewed meanwhile is not).
func (n *Node) auditSessionsExpired(ended []fsm.SessionInfo, res *fsm.ApplyResult) {
	if n.cfg.Audit == nil || len(ended) == 0 || res == nil {
		return
	}
	for _, si := range ended {
		if _, still := n.fsm.Session(si.ID); still {
			continue // renewed before the expiry applied
		}
		id, _ := fsm.SplitOwner(si.Owner)
		n.audit(audit.Event{Op: audit.OpSessionExpire, Identity: id, Detail: plural(si.Leases, "lease")})
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// auditMembership records a membership change the leader carried out (or
// refused) at r's request.
func (n *Node) auditMembership(r *http.Request, op audit.Op, server string, err error) {
	if n.cfg.Audit == nil {
		return
	}
	cred, _ := n.Credential(r)
	result := audit.ResultOK
	if err != nil {
		result = "refused"
	}
	n.audit(audit.Event{Op: op, Identity: cred.Identity, Remote: r.RemoteAddr, Result: result, Detail: "server " + server})
}
