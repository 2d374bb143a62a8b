package raftlock

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/lock"
)

// The format gate (docs/operations.md "Upgrades and downgrades"): the
// formats a node reads, the leader's monitor that raises the replicated
// gate (fsm.Gate) once every voter reads a format, the checks that keep
// the leader from writing above it, a node that halts instead of
// diverging, and the operator's downgrade.

// PathFormat is the format gate: GET its state and every voter's formats
// (a client credential), POST a downgrade or its end (admin).
const PathFormat = "/v1/cluster/format"

// featuresAt is what raftlock offers at a gate's Offer: sessions need
// format 3; shared locks, semaphores, multi-key acquires and lock-delay
// need format 2; watches are the leader's own and need none.
func featuresAt(offer uint8) lock.Features {
	f := features
	if offer < 3 {
		f &^= lock.FeatureSessions
	}
	if offer < 2 {
		f &^= lock.FeatureShared | lock.FeatureSemaphore | lock.FeatureMultiKey | lock.FeatureLockDelay
	}
	return f
}

// opFeature names the feature an op needs, for unsupported errors.
func opFeature(op *fsm.Op) lock.Features {
	switch {
	case op.Type >= fsm.OpSessionOpen || op.Session != "":
		return lock.FeatureSessions
	case op.Type == fsm.OpAcquireAll:
		return lock.FeatureMultiKey
	case op.Permits != 0:
		return lock.FeatureSemaphore
	case op.Mode != 0:
		return lock.FeatureShared
	case op.LockDelay != 0:
		return lock.FeatureLockDelay
	}
	return 0
}

// windingDown reports whether op only keeps up or ends what exists (a
// session's keep-alive, close or expiry): allowed up to the gate's Format
// while a downgrade drains, when new work is held to its Offer.
func windingDown(op *fsm.Op) bool {
	// (gateRefuses also lets them through while the state holds
	// sessions at all: a cluster upgraded from a binary that wrote them
	// without a gate keeps its sessions alive until the gate opens.)
	return op.Type == fsm.OpSessionRenew || op.Type == fsm.OpSessionClose || op.Type == fsm.OpSessionExpire
}

// gateRefuses returns an *lock.UnsupportedError when op needs a format
// above the gate: its Offer for new work, its Format for winding down
// (admitted false: the last check before an entry is written, where only
// Format counts).
func gateRefuses(op *fsm.Op, g fsm.Gate, admitted, hasSessions bool) error {
	v := op.Version()
	limit := g.Format
	switch {
	case windingDown(op) && hasSessions:
		limit = max(limit, fsm.MaxFormat)
	case !admitted && !windingDown(op):
		limit = g.Offer
	}
	if v <= limit {
		return nil
	}
	why := fmt.Sprintf("the cluster's format gate is at %d (%s): a voter does not read format %d yet, or a downgrade is under way; "+
		"it opens when every voter runs a binary that reads it (GET %s)", limit, g, v, PathFormat)
	return &lock.UnsupportedError{Backend: "raftlock", Feature: opFeature(op), Reason: why}
}

// NodeFormats is what a node reads, as it tells the leader (in
// NodeStatus): entry and snapshot formats share their numbers.
type NodeFormats struct {
	Entry    uint8    `json:"entry"`
	Snapshot uint8    `json:"snapshot"`
	Features []string `json:"features"` // what it offers at its own highest format
}

func (n *Node) formats() *NodeFormats {
	r := n.fsm.ReadsFormat()
	return &NodeFormats{Entry: r, Snapshot: r, Features: featuresAt(r).Names()}
}

// Halted is closed when the node stops because it met an entry, a
// snapshot or a gate above what it reads (HaltErr says which).
func (n *Node) Halted() <-chan struct{} { return n.halted }

// HaltErr is why the node halted, or nil.
func (n *Node) HaltErr() error {
	if p := n.haltErr.Load(); p != nil {
		return *p
	}
	return nil
}

// halt stops the node: it applies nothing more (the state machine refuses
// every later entry), serves nothing more and takes no part in elections
// (Raft shuts down), so that it never answers from, votes with or grants
// on a state it could not compute. The other members carry on.
func (n *Node) halt(err error) {
	n.haltOnce.Do(func() {
		n.haltErr.Store(&err)
		n.log.Error("STOPPED: this node met a format it does not read and stops rather than diverge from the cluster; "+
			"the other members carry on. Replace this binary with one that reads the cluster's format and start it on the same data directory, "+
			"or lower the cluster's format first (lockgate format downgrade, docs/operations.md)", "err", err)
		close(n.halted)
		go n.stop(false)
	})
}

// FormatStatus answers GET /v1/cluster/format. A node answers it at most
// once a second: an answer may be up to a second old.
type FormatStatus struct {
	Gate    fsm.Gate     `json:"gate"`
	Needs   uint8        `json:"needs"`   // the lowest format that expresses the state now
	Drain   fsm.Drain    `json:"drain"`   // what keeps it above format 1 or 2
	Voters  []VoterReads `json:"voters"`  // as this node last asked them (the leader) or now
	Offered []string     `json:"offered"` // the features offered to clients now
	Index   uint64       `json:"index"`   // the answering node's applied index
	Error   string       `json:"error,omitempty"`
}

// VoterReads is one voter's formats, as the leader learned them.
type VoterReads struct {
	ID    string `json:"id"`
	Reads uint8  `json:"reads"` // 0: unknown (did not answer)
	Error string `json:"error,omitempty"`
}

// voterReads asks every voter which format it reads: this node from its
// own state machine, the others through GET /v1/cluster/status. A member
// that answers without formats (a binary that predates the gate) reads
// format 1.
func (n *Node) voterReads(ctx context.Context) ([]VoterReads, error) {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, err
	}
	members := n.fsm.Members()
	var out []VoterReads
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		v := VoterReads{ID: string(s.ID)}
		switch addr := members[v.ID]; {
		case v.ID == n.cfg.ID:
			v.Reads = n.fsm.ReadsFormat()
		case addr == "":
			v.Error = "no API address in the member directory"
		default:
			st, err := n.members.fetchStatus(ctx, addr)
			switch {
			case errors.Is(err, errNoStatus):
				v.Reads = 1 // a binary older than the status endpoint
			case err != nil:
				v.Error = err.Error()
			case st.Formats == nil:
				v.Reads = 1
			default:
				v.Reads = min(st.Formats.Entry, st.Formats.Snapshot)
			}
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b VoterReads) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	return out, nil
}

// monitorFormats runs on every node; while it leads, it raises the gate
// to the lowest format every voter reads (never above an operator's
// Ceiling), and warns about a voter that reads less than the gate.
func (n *Node) monitorFormats() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.FormatPollInterval)
	defer t.Stop()
	for {
		select {
		case <-n.shutdown:
			return
		case <-t.C:
		}
		if !n.sched.isReady() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.FormatPollInterval+time.Second)
		n.raiseGate(ctx)
		cancel()
	}
}

// raiseGate is one round of the leader's monitor.
func (n *Node) raiseGate(ctx context.Context) {
	voters, err := n.voterReads(ctx)
	if err != nil {
		return
	}
	n.lastVoters.Store(&voters)
	g := n.fsm.Gate()
	lowest := uint8(fsm.MaxFormat)
	known := true
	for _, v := range voters {
		switch {
		case v.Reads == 0:
			known = false
		case v.Reads < g.Format:
			n.log.Error("a voter reads a lower format than the cluster writes: it will stop at the first entry it cannot read",
				"voter", v.ID, "reads", v.Reads, "gate", g.String(),
				"what_to_do", fmt.Sprintf("run a binary that reads format %d on it, or lower the gate with `lockgate format downgrade --to %d` before replacing nodes with older binaries", g.Format, v.Reads))
		}
		if v.Reads != 0 {
			lowest = min(lowest, v.Reads)
		}
	}
	target := lowest
	if g.Ceiling != 0 {
		target = min(target, g.Ceiling)
	}
	if !known || target <= g.Format && g.Offer == g.Format {
		return
	}
	if target < g.Format {
		return // the gate never goes down by itself
	}
	next := fsm.Gate{Format: target, Offer: target, Ceiling: g.Ceiling}
	if g.Offer < g.Format && g.Ceiling != 0 {
		return // a downgrade drains: the operator ends it
	}
	if err := n.writeGate(ctx, next); err != nil {
		n.log.Warn("raising the format gate failed; retrying", "to", next.String(), "err", err)
		return
	}
	n.log.Info("format gate raised: every voter reads it", "from", g.String(), "to", next.String(), "features", featuresAt(next.Offer).String())
}

// writeGate commits g.
func (n *Node) writeGate(ctx context.Context, g fsm.Gate) error {
	res, err := n.applyCtx(ctx, fsm.Op{Type: fsm.OpAppendData, Key: fsm.GateKey, Value: g.Encode()})
	if err != nil {
		return err
	}
	if st := res.Results[0].Status; st != fsm.StatusOK {
		return fmt.Errorf("raftlock: the state machine refused the gate (%s)", st)
	}
	return nil
}

// gateState is the node-side bookkeeping of the gate.
type gateState struct {
	halted     chan struct{}
	haltErr    atomic.Pointer[error]
	lastVoters atomic.Pointer[[]VoterReads]
	lastFormat atomic.Pointer[formatAnswer]
}

func (n *Node) formatStatus(ctx context.Context) FormatStatus {
	st := FormatStatus{Gate: n.fsm.Gate(), Needs: n.fsm.NeedsFormat(), Drain: n.fsm.Draining(),
		Offered: n.Features().Names(), Index: n.fsm.AppliedIndex()}
	if v, err := n.voterReads(ctx); err == nil {
		st.Voters = v
	} else {
		st.Error = err.Error()
	}
	return st
}

func (n *Node) handleFormatGet(w http.ResponseWriter, r *http.Request) {
	if _, ok := n.Credential(r); !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="lockgate"`)
		writeJSON(w, http.StatusUnauthorized, Reply{Error: "a client credential is required"})
		return
	}
	// One answer a second at most: each asks every voter and reads the
	// lock table (Draining), which a client could otherwise repeat at
	// will.
	if c := n.lastFormat.Load(); c != nil && time.Since(c.at) < time.Second {
		writeJSON(w, http.StatusOK, c.st)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	st := n.formatStatus(ctx)
	n.lastFormat.Store(&formatAnswer{at: time.Now(), st: st})
	writeJSON(w, http.StatusOK, st)
}

// formatAnswer is the last answer of GET /v1/cluster/format.
type formatAnswer struct {
	at time.Time
	st FormatStatus
}

// withinGate answers, with an unsupported error, each submission with an
// op above the gate's Format (admitted before a downgrade lowered it), and
// returns the others: the last check before the leader writes an entry.
func (n *Node) withinGate(batch []*submission) []*submission {
	g := n.fsm.Gate()
	sessions := n.fsm.NumSessions() > 0
	keep := batch[:0:0]
	for _, s := range batch {
		var err error
		for i := range s.ops {
			if err = gateRefuses(&s.ops[i], g, true, sessions); err != nil {
				break
			}
		}
		if err != nil {
			s.done <- applied{err: err}
			continue
		}
		keep = append(keep, s)
	}
	return keep
}

// soleVoterGate returns the gate a leader that is the only voter writes at
// its takeover (a new cluster's first node, a recovered or restored
// single node): its own highest format, at once, so that a new cluster
// offers everything from its first grant. ok false: nothing to raise, or
// other voters to ask first (the monitor does).
func (n *Node) soleVoterGate() (fsm.Gate, bool) {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return fsm.Gate{}, false
	}
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage == raft.Voter && s.ID != raft.ServerID(n.cfg.ID) {
			return fsm.Gate{}, false
		}
	}
	g := n.fsm.Gate()
	reads := n.fsm.ReadsFormat()
	if g.Ceiling != 0 || g.Format >= reads && g.Offer == g.Format {
		return fsm.Gate{}, false
	}
	if reads < g.Format {
		return fsm.Gate{}, false // never down by itself
	}
	return fsm.Gate{Format: reads, Offer: reads}, true
}

// FormatStatus asks the member at apiAddr for the format gate's state.
func (mc *MembershipClient) FormatStatus(ctx context.Context, apiAddr string) (*FormatStatus, error) {
	var st FormatStatus
	if err := mc.getJSON(ctx, apiAddr, PathFormat, "format status", &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// stillOffered returns the unsupported error of a queued waiter whose
// grant needs more than the cluster offers now: a downgrade began while
// it waited. Failing it at its turn, rather than granting it, keeps the
// drain short; its release-mates in the entry commit as usual.
func (n *Node) stillOffered(w *waiter, keys ...string) error {
	g := n.fsm.Gate()
	if g.Offer >= fsm.MaxFormat {
		return nil
	}
	for _, k := range keys {
		op := acquireOp(w, k)
		if err := gateRefuses(&op, g, false, false); err != nil {
			return err
		}
	}
	if len(keys) > 1 {
		all := fsm.Op{Type: fsm.OpAcquireAll, Token: uint64(len(keys))}
		return gateRefuses(&all, g, false, false)
	}
	return nil
}

// drainRefuses returns why the keep-alive of session id is refused: while
// a downgrade drains sessions (the gate offers no sessions but still
// writes them), a session that holds no lease is not kept alive, so that
// it ends at its expiry and the drain finishes even though its client
// would renew it for ever. It is not closed: an acquire into it admitted
// before the downgrade may still commit, and its lease must then live to
// the session's expiry, its holder's deadline, not end at once.
func (n *Node) drainRefuses(id string) error {
	g := n.fsm.Gate()
	if g.Offer >= 3 || g.Format < 3 {
		return nil
	}
	if si, ok := n.fsm.Session(id); ok && si.Leases == 0 {
		return errors.New("raftlock: a format downgrade drains the sessions and this one holds no lease: it is not renewed and ends at its expiry; acquire without a session")
	}
	return nil
}
