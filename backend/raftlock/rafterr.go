package raftlock

// What a raft future's answer, or its absence, tells a caller: the
// lock contract's errors for hashicorp/raft's.

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/lock"
)

// errAwaitTimeout is await's error when a future is not answered in time.
var errAwaitTimeout = errors.New("raft did not answer in time")

// await waits for a raft future, but not past this node's shutdown and, if
// timeout > 0, not longer than timeout. hashicorp/raft answers a future
// that was queued when its run loop stops never (hashicorp/raft#498, made
// likelier by BatchApplyCh's buffered queue): waiting on Error() alone
// hung a leader's takeover, and with it Shutdown, for good. The goroutine
// left behind by such a future is the price of not hanging.
func (n *Node) await(f raft.Future, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case err := <-done:
		return err
	case <-n.shutdown:
		select {
		case err := <-done: // an answer already there wins
			return err
		default:
		}
		return raft.ErrRaftShutdown
	case <-expired:
		return errAwaitTimeout
	}
}

// raftErr maps hashicorp/raft's errors onto the lock contract's.
//
// ErrLeadershipLost is not "not leader": the entry was appended and may
// still commit under the next leader (whose first entry commits every
// entry of earlier terms that a quorum holds), so the outcome is unknown:
// ErrUnavailable, whose caller must assume the operation may have taken
// effect. Answered as not_leader, a release that did commit would be
// re-sent, answered not_held and reported as having changed nothing.
// ErrRaftShutdown is ErrClosed here, for a future that writes nothing (a
// leader check, a barrier); writeErr judges the futures of writes.
func (n *Node) raftErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("raftlock: %v (the entry may still commit under the next leader): %w", err, lock.ErrUnavailable)
	case errors.Is(err, raft.ErrNotLeader),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrAbortedByRestore):
		var nl *lock.NotLeaderError
		errors.As(n.notLeader(), &nl)
		return fmt.Errorf("raftlock: %v: %w", err, nl)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("raftlock: %v: %w", err, lock.ErrClosed)
	default:
		return fmt.Errorf("raftlock: %v: %w", err, lock.ErrUnavailable)
	}
}

// writeErr is raftErr for the future of a log entry handed to raft (an
// Apply, a configuration change). A shutdown of this node says nothing of
// such an entry's outcome, so it is ErrUnavailable, not ErrClosed ("nothing
// done"): a leader shut down gracefully hands over leadership first, and the
// voter it hands over to holds every entry it was sent and commits them in
// its first term; await stops waiting at the shutdown whether or not raft
// answered (and raft itself answers ErrRaftShutdown for a committed entry
// it had not yet given its state machine). Answered closed, a release whose
// entry committed under the next leader was re-sent there, answered
// not_held, and reported as having changed nothing, while the lock was free
// (a 10-minute chaos campaign's membership fault, on a graceful leader
// restart).
func (n *Node) writeErr(err error) error {
	if errors.Is(err, raft.ErrRaftShutdown) {
		return fmt.Errorf("raftlock: node %s shut down before the entry's outcome was known (it may still commit under the next leader): %w",
			n.cfg.ID, lock.ErrUnavailable)
	}
	return n.raftErr(err)
}
