package raftlock

import (
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// TestAbandonedCopyKeepsResentGrant: an acquire's first copy is granted
// but its reply is lost with its connection; the client re-sends it with
// the same handle and is answered with that grant; then the first copy's
// caller gives up. Abandoning the first copy must not release the grant
// the re-sent copy handed out: the client holds it (a 10-minute fault
// campaign under lossy links saw the lease vanish 30 ms after its grant,
// and its holder's release answered not_held).
func TestAbandonedCopyKeepsResentGrant(t *testing.T) {
	c := startCluster(t, 1)
	n := leader(t, c)
	opts, err := kit.Normalize(lock.AcquireOptions{TTL: 30 * time.Second}, "k", "client-a")
	if err != nil {
		t.Fatal(err)
	}
	handle := lock.NewHandle()
	first := &waiter{key: "k", opts: opts, handle: handle, res: make(chan result, 1), since: time.Now()}
	if err := n.sched.enqueue(first); err != nil {
		t.Fatal(err)
	}
	// The first copy's grant commits; nobody reads it (the reply is lost).
	deadline := time.Now().Add(10 * time.Second)
	for len(first.res) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first copy was not granted within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	again := &waiter{key: "k", opts: opts, handle: handle, res: make(chan result, 1), since: time.Now()}
	if err := n.sched.enqueue(again); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-again.res:
	case <-time.After(10 * time.Second):
		t.Fatal("the re-sent copy was not answered within 10 s")
	}
	if r.err != nil || len(r.grants) != 1 {
		t.Fatalf("re-sent copy: %+v", r)
	}
	token := uint64(r.grants[0].Token)
	n.sched.abandon(first)
	// A release would be committed by the scheduler's own goroutine
	// within milliseconds; the grant must still be there a second later.
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		held, _ := n.fsm.Holders("k")
		if len(held) != 1 || held[0].Token != token {
			t.Fatalf("after the first copy was abandoned the key's holders are %+v: want the re-sent copy's grant (token %d) still held", held, token)
		}
	}
}
