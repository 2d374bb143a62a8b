package raftlock

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestContactCountsRejectedAppends: an append that this node rejects (its
// log diverges from the leader's) is contact with the leader all the same;
// raft.LastContact would not move for it.
func TestContactCountsRejectedAppends(t *testing.T) {
	follower, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Close()
	leaderTr, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer leaderTr.Close()
	done := make(chan struct{})
	defer close(done)
	ct := newContactTransport(follower, done)
	if ct.heardWithin("L", time.Minute) {
		t.Fatal("contact before any append")
	}
	sent := make(chan error, 1)
	go func() {
		var resp raft.AppendEntriesResponse
		sent <- leaderTr.AppendEntries("F", follower.LocalAddr(), &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ID: []byte("L"), Addr: []byte(leaderTr.LocalAddr())}, Term: 2, PrevLogEntry: 100, PrevLogTerm: 1,
			Entries: []*raft.Log{{Index: 101, Term: 2, Type: raft.LogCommand, Data: []byte("x")}}}, &resp)
	}()
	select {
	case rpc := <-ct.Consumer():
		rpc.Respond(&raft.AppendEntriesResponse{Term: 2, Success: false}, nil) // the logs diverge
	case <-time.After(10 * time.Second):
		t.Fatal("the append never reached the consumer")
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if !ct.heardWithin("L", time.Minute) {
		t.Error("a rejected append from L is not contact with L")
	}
	if ct.heardWithin("M", time.Minute) {
		t.Error("contact with L counted for M")
	}
}
