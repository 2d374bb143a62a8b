package raftlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/lock"
)

// eventually polls cond (state with no event to await: the replicated
// table) for up to 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSessionsOneEntryRenewsAll: a session's leases are renewed by one
// entry whatever their number, survive a leader change with their
// session, and all end when the session expires — none while it lives.
func TestSessionsOneEntryRenewsAll(t *testing.T) {
	_, leader, l, sess, ctx := openTestSession(t, 3, 2*time.Second)
	const n = 200
	var err error
	leases := make([]*lock.Lease, n)
	keys := make([]string, n)
	for i := range leases {
		keys[i] = fmt.Sprintf("sess/%d", i)
		if leases[i], err = l.Acquire(ctx, keys[i], lock.AcquireOptions{Session: sess}); err != nil {
			t.Fatal(err)
		}
		// Kept alive as a client would be while it acquires: 200
		// acquires can outlast the TTL on a loaded machine.
		if err := l.RenewSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
	}
	if got := sess.Leases(); got != n {
		t.Fatalf("session holds %d leases, want %d", got, n)
	}
	before := leader.metrics.opCounts[fsm.OpRenew].Load()
	sessRenews := leader.metrics.opCounts[fsm.OpSessionRenew].Load()
	// Three keep-alives, past the TTL: every lease lives on.
	for range 3 {
		if err := l.RenewSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
	}
	if got := leader.metrics.opCounts[fsm.OpSessionRenew].Load() - sessRenews; got != 3 {
		t.Errorf("%d session-renew ops for 3 keep-alives", got)
	}
	if got := leader.metrics.opCounts[fsm.OpRenew].Load() - before; got != 0 {
		t.Errorf("%d per-lease renew ops: the session should renew its leases", got)
	}
	for _, le := range leases {
		if le.Err() != nil {
			t.Fatalf("%s ended while its session lives: %v", le.Key, le.Err())
		}
		if !le.Deadline().Equal(sess.Deadline()) {
			t.Fatalf("%s deadline %v, want the session's %v", le.Key, le.Deadline(), sess.Deadline())
		}
	}
	info, err := l.Inspect(ctx, keys[0])
	if err != nil || info.Token != leases[0].Token {
		t.Fatalf("inspect: %+v %v", info, err)
	}

	// A waiter on one of the keys; then the session expires (no more
	// keep-alives): every lease ends at once on the server, the waiter is
	// granted, and every lease's Done closes on the client.
	other := leader.NewSession()
	defer other.Close()
	got := make(chan error, 1)
	go func() {
		le, err := other.Acquire(ctx, keys[7], lock.AcquireOptions{TTL: time.Minute})
		if err == nil && le.Token <= leases[7].Token {
			err = fmt.Errorf("token %d after %d", le.Token, leases[7].Token)
		}
		got <- err
	}()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	for _, le := range leases {
		<-le.Done()
	}
	<-sess.Done()
	eventually(t, "the session and its leases gone, the waiter's lock held", func() bool {
		return leader.fsm.NumSessions() == 0 && leader.fsm.NumLocks() == 1
	})
	if err := l.RenewSession(ctx, sess); !errors.Is(err, lock.ErrSessionExpired) {
		t.Fatalf("renew of an expired session: %v, want ErrSessionExpired", err)
	}
	if _, err := l.Acquire(ctx, "sess/late", lock.AcquireOptions{Session: sess}); !errors.Is(err, lock.ErrSessionExpired) {
		t.Fatalf("acquire in an expired session: %v, want ErrSessionExpired", err)
	}
}

// TestSessionCloseGrantsWaiters: closing a session releases its leases in
// one entry and the keys go to their waiters.
func TestSessionCloseGrantsWaiters(t *testing.T) {
	_, leader, l, sess, ctx := openTestSession(t, 3, time.Minute)
	a, err := l.Acquire(ctx, "close/a", lock.AcquireOptions{Session: sess})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "close/b", lock.AcquireOptions{Session: sess, Mode: lock.ModeShared}); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := leader.Acquire(ctx, "close/a", lock.AcquireOptions{TTL: time.Minute})
		got <- err
	}()
	awaitWaiting(t, leader, "close/a", 1)
	entries := leader.metrics.entryCount.Load()
	if err := l.CloseSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter after the close: %v", err)
	}
	if !errors.Is(a.Err(), lock.ErrReleased) {
		t.Fatalf("lease after its session closed: %v, want ErrReleased", a.Err())
	}
	if d := leader.metrics.entryCount.Load() - entries; d > 2 {
		t.Errorf("%d entries for a close and the grant it frees, want at most 2", d)
	}
	if err := l.CloseSession(ctx, sess); !errors.Is(err, lock.ErrSessionExpired) {
		t.Fatalf("second close: %v, want ErrSessionExpired", err)
	}
}

// TestSessionSurvivesFailover: a session and its leases outlive the
// leader; the new leader extends the session, keep-alives go on through
// it, and none of the leases is lost.
func TestSessionSurvivesFailover(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := c.Locker()
	defer cl.Close()
	sl := cl.(lock.SessionLocker)
	sess, err := sl.OpenSession(ctx, lock.SessionOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var leases []*lock.Lease
	for i := range 50 {
		le, err := cl.Acquire(ctx, fmt.Sprintf("fo/%d", i), lock.AcquireOptions{Session: sess})
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, le)
	}
	old := leader(t, c)
	next := replaceLeader(ctx, t, c, old)
	// Past two TTLs on the new leader, kept alive by the clusterLocker.
	deadline := time.Now().Add(7 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-sess.Done():
			t.Fatalf("session ended after the failover: %v", sess.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, le := range leases {
		if le.Err() != nil {
			t.Fatalf("%s lost: %v", le.Key, le.Err())
		}
		if l, ok := next.fsm.Lock(le.Key); !ok || l.Token != uint64(le.Token) {
			t.Fatalf("%s on the new leader: %+v %v", le.Key, l, ok)
		}
	}
	if si, ok := next.fsm.Session(sess.ID); !ok || si.Leases != len(leases) {
		t.Fatalf("session on the new leader: %+v %v", si, ok)
	}
}

// TestTakeoverWithManySessionLeases: a new leader takes over 20,000
// session leases in 20 sessions and 2,000 plain ones: it tracks one
// expiry item per session and per plain lease (none per session lease),
// extends the sessions in its takeover entry, keeps every lease and
// token, and grants a free key.
func TestTakeoverWithManySessionLeases(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	old := leader(t, c)
	const sessions, perSession, plain = 20, 1000, 2000
	e := fsm.Entry{}
	for s := range sessions {
		e.Ops = append(e.Ops, fsm.Op{Type: fsm.OpSessionOpen, Key: fmt.Sprintf("%032x", s+1), Owner: "o", TTL: 30 * time.Second})
	}
	if _, err := old.apply(e, time.Minute); err != nil {
		t.Fatal(err)
	}
	for s := range sessions {
		e := fsm.Entry{}
		for i := range perSession {
			e.Ops = append(e.Ops, fsm.Op{Type: fsm.OpAcquire, Key: fmt.Sprintf("many/%d/%d", s, i), Owner: "o",
				Handle: lock.NewHandle(), TTL: time.Second, Session: fmt.Sprintf("%032x", s+1)})
		}
		if _, err := old.apply(e, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	e = fsm.Entry{}
	for i := range plain {
		e.Ops = append(e.Ops, fsm.Op{Type: fsm.OpAcquire, Key: fmt.Sprintf("plain/%d", i), Owner: "o", Handle: lock.NewHandle(), TTL: 30 * time.Second})
	}
	if _, err := old.apply(e, time.Minute); err != nil {
		t.Fatal(err)
	}
	tokenOf := func(n *Node, key string) uint64 { l, _ := n.fsm.Lock(key); return l.Token }
	probe := []string{"many/0/0", "many/19/999", "plain/0", "plain/1999"}
	want := map[string]uint64{}
	for _, k := range probe {
		want[k] = tokenOf(old, k)
	}
	next := replaceLeader(ctx, t, c, old)
	if got := next.fsm.NumLocks(); got != sessions*perSession+plain {
		t.Fatalf("%d locks on the new leader, want %d", got, sessions*perSession+plain)
	}
	for k, tok := range want {
		if got := tokenOf(next, k); got != tok {
			t.Errorf("%s: token %d on the new leader, want %d", k, got, tok)
		}
	}
	next.sched.mu.Lock()
	items := len(next.sched.expiry)
	next.sched.mu.Unlock()
	if items > sessions+plain+10 {
		t.Errorf("%d expiry items on the new leader for %d sessions and %d plain leases: session leases must not have their own", items, sessions, plain)
	}
	now := next.cfg.Clock.Now()
	next.fsm.ForEachSession(func(si fsm.SessionInfo) bool {
		if si.Expires < now+int64(25*time.Second) || si.Leases != perSession {
			t.Errorf("session %s after the takeover: %+v (want a full TTL and %d leases)", si.ID, si, perSession)
		}
		return true
	})
	le, err := next.Acquire(ctx, "after-takeover", lock.AcquireOptions{TTL: time.Minute})
	if err != nil || uint64(le.Token) <= want["plain/1999"] {
		t.Fatalf("grant on the new leader: %v (token %v)", err, le)
	}
}

// replaceLeader shuts old down and returns the next ready leader.
func replaceLeader(ctx context.Context, t *testing.T, c *LocalCluster, old *Node) *Node {
	t.Helper()
	for _, s := range c.Servers {
		if s.Node == old {
			s.Shutdown()
		}
	}
	next, err := WaitLeader(ctx, followers(c, old)...)
	if err != nil {
		t.Fatal(err)
	}
	return next
}

// TestSessionLeaseWanted: a session lease hears that a caller waits for its
// key (exclusive and shared), is wanted from its grant when handed to a
// waiter while another still waits, and is not wanted while nobody waits;
// the leader keeps no holder entry of its own per session lease (it finds
// the lease through its session).
func TestSessionLeaseWanted(t *testing.T) {
	_, leader, l, sess, ctx := openTestSession(t, 1, time.Minute)
	held, err := l.Acquire(ctx, "wanted/x", lock.AcquireOptions{Session: sess})
	if err != nil {
		t.Fatal(err)
	}
	quiet, err := l.Acquire(ctx, "wanted/quiet", lock.AcquireOptions{Session: sess})
	if err != nil {
		t.Fatal(err)
	}
	r1, err := l.Acquire(ctx, "wanted/shared", lock.AcquireOptions{Session: sess, Mode: lock.ModeShared})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.Acquire(ctx, "wanted/shared", lock.AcquireOptions{Session: sess, Mode: lock.ModeShared})
	if err != nil {
		t.Fatal(err)
	}
	leader.sched.mu.Lock()
	entries := len(leader.sched.holders) + len(leader.sched.shared)
	leader.sched.mu.Unlock()
	if entries != 0 {
		t.Errorf("the scheduler keeps %d holder entries for session leases, want none", entries)
	}
	if held.IsWanted() || quiet.IsWanted() || r1.IsWanted() {
		t.Fatal("a session lease wanted before anyone waited")
	}

	type res struct {
		lease *lock.Lease
		err   error
	}
	waitFor := func(key string, mode lock.Mode) chan res {
		ch := make(chan res, 1)
		go func() {
			le, err := l.Acquire(ctx, key, lock.AcquireOptions{Session: sess, Mode: mode})
			ch <- res{le, err}
		}()
		return ch
	}
	awaitWanted := func(le *lock.Lease, why string) {
		t.Helper()
		select {
		case <-le.Wanted():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s (token %d) not told it was wanted although %s", le.Key, le.Token, why)
		}
	}
	first := waitFor("wanted/x", lock.ModeExclusive)
	awaitWanted(held, "a caller queued for its key")
	second := waitFor("wanted/x", lock.ModeExclusive)
	writer := waitFor("wanted/shared", lock.ModeExclusive)
	awaitWanted(r1, "a writer queued for its key")
	awaitWanted(r2, "a writer queued for its key")
	if quiet.IsWanted() {
		t.Error("a session lease wanted although nobody waits for its key")
	}
	eventually(t, "both callers queued for wanted/x", func() bool {
		leader.sched.mu.Lock()
		defer leader.sched.mu.Unlock()
		q := leader.sched.queues["wanted/x"]
		return q != nil && waiting(q) == 2
	})
	if err := l.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	next := <-first
	if next.err != nil {
		t.Fatal(next.err)
	}
	awaitWanted(next.lease, "it was granted while another caller still waited")
	if err := l.Release(ctx, next.lease); err != nil {
		t.Fatal(err)
	}
	last := <-second
	if last.err != nil {
		t.Fatal(last.err)
	}
	if last.lease.IsWanted() {
		t.Error("a session lease granted with nobody else waiting is wanted")
	}
	if err := l.ReleaseAll(ctx, []*lock.Lease{r1, r2}); err != nil {
		t.Fatal(err)
	}
	if w := <-writer; w.err != nil {
		t.Fatal(w.err)
	}
	if err := l.CloseSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
}

// openTestSession starts a cluster of size nodes and opens a session of
// ttl on its leader through a Session Locker; ctx ends a minute on, and
// everything is closed when the test ends.
func openTestSession(t *testing.T, size int, ttl time.Duration) (*LocalCluster, *Node, *Session, *lock.Session, context.Context) {
	t.Helper()
	c := startCluster(t, size)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	leader := leader(t, c)
	l := leader.NewSession()
	t.Cleanup(func() { l.Close() })
	sess, err := l.OpenSession(ctx, lock.SessionOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return c, leader, l, sess, ctx
}
