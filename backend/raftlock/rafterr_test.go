package raftlock

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/lock"
)

// TestRaftErrLeadershipLost: an entry whose leader was deposed before it
// committed may still commit under the next leader, so its caller hears
// "outcome unknown" (ErrUnavailable), never "not leader", which a client
// takes to mean the request had no effect and re-sends it — a re-sent
// release would then be answered not_held for a release that happened.
func TestRaftErrLeadershipLost(t *testing.T) {
	var n Node
	err := n.raftErr(raft.ErrLeadershipLost)
	if !errors.Is(err, lock.ErrUnavailable) || errors.Is(err, lock.ErrNotLeader) {
		t.Fatalf("raftErr(ErrLeadershipLost) = %v: want ErrUnavailable, not ErrNotLeader", err)
	}
	var nl *lock.NotLeaderError
	if errors.As(err, &nl) {
		t.Fatalf("raftErr(ErrLeadershipLost) = %v carries a NotLeaderError", err)
	}
}
