package raftlock

import (
	"fmt"
	"testing"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
)

// TestKeepAlivesJumpTheQueue: with acquires queued for several entries, a
// session keep-alive or lease renewal submitted after them is taken into
// the very next entry; acquires keep their order; an entry stays within
// maxBatchOps.
func TestKeepAlivesJumpTheQueue(t *testing.T) {
	b := &batcher{}
	sub := func(ops ...fsm.Op) *submission { return &submission{ops: ops} }
	var acquires []*submission
	for i := range 3 * maxBatchOps / 64 {
		ops := make([]fsm.Op, 64)
		for j := range ops {
			ops[j] = fsm.Op{Type: fsm.OpAcquire, Key: fmt.Sprint(i, "/", j)}
		}
		acquires = append(acquires, sub(ops...))
	}
	b.pending = append(b.pending, acquires...)
	keep := sub(fsm.Op{Type: fsm.OpSessionRenew, Key: "s"})
	renew := sub(fsm.Op{Type: fsm.OpRenew, Key: "k"})
	mixed := sub(fsm.Op{Type: fsm.OpRenew, Key: "k"}, fsm.Op{Type: fsm.OpRelease, Key: "k"})
	for _, s := range []*submission{keep, renew, mixed} {
		if urgent(s.ops) {
			b.urgent = append(b.urgent, s)
		} else {
			b.pending = append(b.pending, s)
		}
	}
	first := b.takeLocked()
	if len(first) < 2 || first[0] != keep || first[1] != renew {
		t.Fatalf("the next entry does not start with the keep-alive and the renewal: %d submissions", len(first))
	}
	ops := 0
	for i, s := range first {
		ops += len(s.ops)
		if i >= 2 && s != acquires[i-2] {
			t.Fatalf("submission %d out of order", i)
		}
	}
	if ops > maxBatchOps {
		t.Fatalf("%d ops in one entry, limit %d", ops, maxBatchOps)
	}
	// The renew+release is not urgent: it waits its turn, after the acquires.
	var rest []*submission
	for len(b.pending) > 0 || len(b.urgent) > 0 {
		rest = append(rest, b.takeLocked()...)
	}
	if rest[len(rest)-1] != mixed {
		t.Fatal("a submission that is not only keep-alives jumped the queue")
	}
}
