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
	resendAndAbandon(t, nil, func(n *Node, first *waiter) { n.sched.abandon(first) })
}

// TestAbandonDuringResend: the first copy's caller gives up while the
// re-sent copy's answer is being committed. The grant was already being
// handed to the re-sent copy: abandoning the first must not release it.
// (Recorded only once the re-sent copy's answer had committed, the
// hand-out lost this race: a 10-minute fault campaign under lossy links
// saw a grant answered and its key free 3 ms later.)
func TestAbandonDuringResend(t *testing.T) {
	resendAndAbandon(t, func(n *Node, first *waiter) {
		testHookResendApplied = func() {
			testHookResendApplied = nil
			n.sched.abandon(first)
		}
		t.Cleanup(func() { testHookResendApplied = nil })
	}, nil)
}

// TestResendAfterAbandon: the first copy's caller gave up and its grant's
// release is on its way when the re-sent copy arrives. The re-sent copy is
// not handed that grant (the release would take it from under it): it
// waits like any acquire, and whatever it is granted is held.
func TestResendAfterAbandon(t *testing.T) {
	resendAndAbandon(t, func(n *Node, first *waiter) { n.sched.abandon(first) }, nil)
}

// resendAndAbandon runs two copies of one acquire on a one-node cluster:
// the first is granted and its answer left unread (lost with its
// connection), before runs, the second is sent and answered, after runs;
// whatever the second copy was answered must then be held.
func resendAndAbandon(t *testing.T, before, after func(n *Node, first *waiter)) {
	c := startCluster(t, 1)
	n := leader(t, c)
	first, again := copiesOfOneAcquire(t)
	if err := n.sched.enqueue(first); err != nil {
		t.Fatal(err)
	}
	awaitAnswer(t, first, "the first copy was not granted within 10 s", false)
	if before != nil {
		before(n, first)
	}
	if err := n.sched.enqueue(again); err != nil {
		t.Fatal(err)
	}
	r := awaitAnswer(t, again, "the re-sent copy was not answered within 10 s", true)
	if r.err != nil || len(r.grants) != 1 {
		t.Fatalf("re-sent copy: %+v", r)
	}
	if after != nil {
		after(n, first)
	}
	stillHeld(t, n, uint64(r.grants[0].Token))
}

// copiesOfOneAcquire returns two waiters of one acquire request (one
// handle): its first copy and a re-sent one.
func copiesOfOneAcquire(t *testing.T) (first, again *waiter) {
	t.Helper()
	opts, err := kit.Normalize(lock.AcquireOptions{TTL: 30 * time.Second}, "k", "client-a")
	if err != nil {
		t.Fatal(err)
	}
	handle := lock.NewHandle()
	first = &waiter{key: "k", opts: opts, handle: handle, res: make(chan result, 1), since: time.Now()}
	again = &waiter{key: "k", opts: opts, handle: handle, res: make(chan result, 1), since: time.Now()}
	return first, again
}

// awaitAnswer waits until w has its answer; take reads it (else it stays
// unread, as a reply lost with its connection).
func awaitAnswer(t *testing.T, w *waiter, msg string, take bool) result {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(w.res) == 0 {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(time.Millisecond)
	}
	if !take {
		return result{}
	}
	return <-w.res
}

// stillHeld checks for a second that key "k" stays held with token: a
// release would be committed by the scheduler's own goroutine within
// milliseconds.
func stillHeld(t *testing.T, n *Node, token uint64) {
	t.Helper()
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		held, _ := n.fsm.Holders("k")
		if len(held) != 1 || held[0].Token != token {
			t.Fatalf("the key's holders are %+v: want the re-sent copy's grant (token %d) held", held, token)
		}
	}
}
