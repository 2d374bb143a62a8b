package raftlock

// Lowering the format gate (the downgrade procedure) and ending a
// downgrade: POST /v1/cluster/format on the leader, the snapshots every
// voter takes after the gate is lowered, and the client's ChangeFormat.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
)

// FormatArgs is POST /v1/cluster/format: lower the gate to DowngradeTo
// (the downgrade procedure), or Resume (end a downgrade: the leader raises
// the gate again once every voter reads more).
type FormatArgs struct {
	DowngradeTo uint8 `json:"downgradeTo,omitempty"`
	Resume      bool  `json:"resume,omitempty"`
	// WaitMs bounds how long the leader waits for the state to drain
	// (default 30 s, at most 10 min); the operator's tool asks again.
	WaitMs int64 `json:"waitMs,omitempty"`
}

// FormatReply answers POST /v1/cluster/format.
type FormatReply struct {
	// Done: the gate is at the format asked for, and every voter took a
	// snapshot after it (Snapshots), so that none replays an entry of a
	// higher format when restarted with an older binary.
	Done      bool              `json:"done"`
	Gate      fsm.Gate          `json:"gate"`
	Needs     uint8             `json:"needs"`
	Drain     fsm.Drain         `json:"drain"`
	Snapshots map[string]uint64 `json:"snapshots,omitempty"` // voter → index of its snapshot
	Index     uint64            `json:"index,omitempty"`     // the log index every snapshot covers
	Message   string            `json:"message,omitempty"`
	Error     string            `json:"error,omitempty"`
	LeaderID  string            `json:"leaderId,omitempty"`
}

const (
	defaultDrainWait = 30 * time.Second
	maxDrainWait     = 10 * time.Minute
)

func (n *Node) handleFormatPost(w http.ResponseWriter, r *http.Request) {
	if !n.authorized(w, r) {
		return
	}
	var a FormatArgs
	if !readJSON(w, r, &a) {
		return
	}
	if a.Resume == (a.DowngradeTo != 0) || a.DowngradeTo > fsm.MaxFormat || a.WaitMs < 0 {
		writeJSON(w, http.StatusBadRequest, FormatReply{Error: fmt.Sprintf("give either resume or downgradeTo (1..%d), and a non-negative waitMs", fsm.MaxFormat)})
		return
	}
	if n.forwardToLeader(w, r, PathFormat, a, func(lid, msg string) any { return FormatReply{LeaderID: lid, Error: msg} }) {
		return
	}
	wait := defaultDrainWait
	if a.WaitMs > 0 {
		wait = min(time.Duration(a.WaitMs)*time.Millisecond, maxDrainWait)
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	var rep FormatReply
	var err error
	if a.Resume {
		rep, err = n.resumeFormat(ctx)
	} else {
		rep, err = n.downgradeFormat(ctx, a.DowngradeTo)
	}
	rep.LeaderID = n.cfg.ID
	code := http.StatusOK
	switch {
	case err != nil:
		rep.Error = err.Error()
		code = http.StatusConflict
	case !rep.Done:
		code = http.StatusAccepted
	}
	n.log.Warn("format gate changed by an operator", "remote", r.RemoteAddr, "resume", a.Resume, "downgrade_to", a.DowngradeTo,
		"gate", rep.Gate.String(), "done", rep.Done, "err", rep.Error)
	writeJSON(w, code, rep)
}

// resumeFormat ends a downgrade: new work is offered everything the gate's
// Format allows, and the monitor may raise the gate again.
func (n *Node) resumeFormat(ctx context.Context) (FormatReply, error) {
	g := n.fsm.Gate()
	next := fsm.Gate{Format: g.Format, Offer: g.Format}
	if next != g {
		if err := n.writeGate(ctx, next); err != nil {
			return FormatReply{Gate: g}, err
		}
	}
	return FormatReply{Done: true, Gate: n.fsm.Gate(), Needs: n.fsm.NeedsFormat(), Drain: n.fsm.Draining(),
		Message: "downgrade ended: the gate rises again once every voter reads a higher format"}, nil
}

// downgradeFormat runs the downgrade to format to, as far as it can
// before ctx ends: (1) new work is held to format to (Offer) and the gate
// stops rising (Ceiling); (2) the state drains: keep-alives of sessions
// that hold no lease are refused, so they end at their expiry
// (drainRefuses), and the others end as their holders release or expire; (3)
// once the state needs no more than format to, the gate's Format goes
// down, so the leader writes nothing above it; (4) every voter takes a
// snapshot covering that point, so a voter restarted on an older binary
// starts from a snapshot it reads and replays no entry above format to.
// It returns Done false, with what still drains, when ctx ends first:
// asking again continues.
func (n *Node) downgradeFormat(ctx context.Context, to uint8) (FormatReply, error) {
	g := n.fsm.Gate()
	step1 := fsm.Gate{Format: g.Format, Offer: min(g.Offer, to), Ceiling: to}
	if step1 != g {
		if err := n.writeGate(ctx, step1); err != nil {
			return FormatReply{Gate: g}, err
		}
	}
	for {
		if n.fsm.NeedsFormat() <= to {
			break
		}
		select {
		case <-ctx.Done():
			return FormatReply{Gate: n.fsm.Gate(), Needs: n.fsm.NeedsFormat(), Drain: n.fsm.Draining(),
				Message: fmt.Sprintf("draining: the state still needs format %d; new work is held to format %d; ask again to continue", n.fsm.NeedsFormat(), to)}, nil
		case <-time.After(250 * time.Millisecond): // an operator's wait on holders' releases
		}
	}
	final := fsm.Gate{Format: to, Offer: to, Ceiling: to}
	if n.fsm.Gate() != final {
		if err := n.writeGate(ctx, final); err != nil {
			return FormatReply{Gate: n.fsm.Gate()}, err
		}
	}
	// One more entry: every entry encoded before the leader applied the
	// final gate (checked against the older one) is now behind it.
	if err := n.writeGate(ctx, final); err != nil {
		return FormatReply{Gate: final}, err
	}
	index := n.fsm.AppliedIndex()
	snaps, err := n.snapshotVoters(ctx, index)
	rep := FormatReply{Gate: final, Needs: n.fsm.NeedsFormat(), Drain: n.fsm.Draining(), Snapshots: snaps, Index: index}
	if err != nil {
		rep.Message = "the gate is at format " + fmt.Sprint(to) + " but not every voter has a snapshot past it yet; ask again"
		return rep, nil
	}
	rep.Done = true
	rep.Message = fmt.Sprintf("the cluster writes format %d and every voter's snapshot covers index %d: replace the nodes one at a time", to, index)
	return rep, nil
}

// snapshotVoters has every voter take a snapshot that covers index.
func (n *Node) snapshotVoters(ctx context.Context, index uint64) (map[string]uint64, error) {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, err
	}
	members := n.fsm.Members()
	out := map[string]uint64{}
	var errs []error
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		id := string(s.ID)
		var got uint64
		var err error
		if id == n.cfg.ID {
			got, err = n.snapshotNow()
		} else {
			got, err = n.members.snapshotAfter(ctx, members[id], index)
		}
		if err == nil && got < index {
			err = fmt.Errorf("snapshot at %d, before %d", got, index)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("voter %s: %w", id, err))
			continue
		}
		out[id] = got
	}
	return out, errors.Join(errs...)
}

// snapshotNow takes a snapshot of this node and returns its index.
func (n *Node) snapshotNow() (uint64, error) {
	f := n.raft.Snapshot()
	if err := f.Error(); err != nil {
		return 0, err
	}
	meta, rc, err := f.Open()
	if err != nil {
		return 0, err
	}
	rc.Close()
	return meta.Index, nil
}

// snapshotAfter waits until the member at addr has applied index, then
// has it take a snapshot.
func (mc *MembershipClient) snapshotAfter(ctx context.Context, addr string, index uint64) (uint64, error) {
	if addr == "" {
		return 0, errors.New("no API address in the member directory")
	}
	for {
		st, err := mc.fetchStatus(ctx, addr)
		if err == nil && st.AppliedIndex >= index {
			break
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("applied %d of %d", st.AppliedIndex, index)
			}
			return 0, fmt.Errorf("%w (%v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond): // another process's progress: polled
		}
	}
	var rep SnapshotReply
	code, err := mc.postJSON(ctx, addr, PathSnapshot, 0, struct{}{}, &rep)
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("%d %s", code, rep.Error)
	}
	return rep.Index, nil
}

// ChangeFormat posts a downgrade or its end to the member at apiAddr (it
// forwards to the leader) and returns the reply: Done false with a nil
// error means the state still drains, and asking again continues.
func (mc *MembershipClient) ChangeFormat(ctx context.Context, apiAddr string, a FormatArgs) (*FormatReply, error) {
	var rep FormatReply
	code, err := mc.postJSON(ctx, apiAddr, PathFormat, 0, a, &rep)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK && code != http.StatusAccepted {
		return &rep, fmt.Errorf("raftlock: %s: %d: %s", apiAddr, code, rep.Error)
	}
	return &rep, nil
}
