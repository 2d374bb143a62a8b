package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Sessions through the Go client, against a three-node
// raftlock cluster with the gateway on every node.

// renewals scrapes a node's gateway metrics: successful renewals of
// leases (renew, 3) and of sessions (renewSession, 12).
func renewals(t *testing.T, apiAddr string) (lease, session int) {
	t.Helper()
	resp, err := http.Get("http://" + apiAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	get := func(kind string) int {
		m := regexp.MustCompile(`lockgate_renewals_total\{kind="` + kind + `"\} ([0-9.e+]+)`).FindSubmatch(body)
		if m == nil {
			return 0
		}
		f, _ := strconv.ParseFloat(string(m[1]), 64)
		return int(f)
	}
	return get("lease"), get("session")
}

// awaitSessionRenewals waits until the node's gateway has renewed
// sessions at least n times.
func awaitSessionRenewals(t *testing.T, apiAddr string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, s := renewals(t, apiAddr); s >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s renewed sessions fewer than %d times", apiAddr, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// acquireN acquires n keys with the zero options (auto-renewed).
func acquireN(t *testing.T, c *client.Client, prefix string, n int) []*lock.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var leases []*lock.Lease
	for i := range n {
		l, err := c.Acquire(ctx, prefix+strconv.Itoa(i), lock.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	return leases
}

// TestSessionRenewsAllLeases: the client's auto-renewed leases share one
// session, and its keep-alive renews them all: the server sees session
// renewals and not one lease renewal, while every lease's deadline moves.
func TestSessionRenewsAllLeases(t *testing.T) {
	rc := startRaft(t)
	leader := raftLeader(t, rc)
	c := newClient(t, []string{leader.APIAddr()}, client.Options{SessionTTL: 3 * time.Second})
	if lock.FeaturesOf(c)&lock.FeatureSessions == 0 {
		t.Fatal("the client does not report sessions over raftlock")
	}
	const n = 30
	leases := acquireN(t, c, "many/", n)
	s := leases[0].Session()
	if s == nil {
		t.Fatal("an auto-renewed lease is not in a session")
	}
	first := make([]time.Time, n)
	for i, l := range leases {
		if l.Session() != s {
			t.Fatalf("lease %d is in another session", i)
		}
		if l.TTL() != 3*time.Second {
			t.Fatalf("lease %d has TTL %v, want the session's 3s", i, l.TTL())
		}
		first[i] = l.Deadline()
	}
	_, s0 := renewals(t, leader.APIAddr())
	awaitSessionRenewals(t, leader.APIAddr(), s0+3)
	lr, _ := renewals(t, leader.APIAddr())
	if lr != 0 {
		t.Errorf("%d lease renewals: the session's leases were renewed one by one", lr)
	}
	for i, l := range leases {
		if err := l.Err(); err != nil {
			t.Fatalf("lease %d ended: %v", i, err)
		}
		if !l.Deadline().After(first[i]) {
			t.Errorf("lease %d: deadline did not move with the session's keep-alives", i)
		}
	}
	// On the server each key is still held by the lease.
	other := newClient(t, []string{leader.APIAddr()}, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, l := range leases {
		info, err := other.Inspect(ctx, l.Key)
		if err != nil || info.Token != l.Token {
			t.Fatalf("lease %d on the server: %+v %v", i, info, err)
		}
	}
	// Release ends one lease, not the session.
	if err := c.Release(ctx, leases[0]); err != nil {
		t.Fatal(err)
	}
	if s.Err() != nil || s.Leases() != n-1 {
		t.Fatalf("after a release the session has %d leases (err %v), want %d", s.Leases(), s.Err(), n-1)
	}
}

// TestSessionOptOut: NoSession, explicit TTLs and the lease cache keep
// leases out of the client's session.
func TestSessionOptOut(t *testing.T) {
	rc := startRaft(t)
	addr := raftLeader(t, rc).APIAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, tc := range map[string]struct {
		opts client.Options
		acq  lock.AcquireOptions
	}{
		"NoSession":   {client.Options{NoSession: true}, lock.AcquireOptions{}},
		"ExplicitTTL": {client.Options{}, lock.AcquireOptions{TTL: 5 * time.Second, AutoRenew: true}},
		"Cache":       {client.Options{CacheLeases: true}, lock.AcquireOptions{}},
	} {
		c := newClient(t, []string{addr}, tc.opts)
		l, err := c.Acquire(ctx, "optout/"+name, tc.acq)
		if err != nil {
			t.Fatal(err)
		}
		if l.Session() != nil {
			t.Errorf("%s: the lease is in a session", name)
		}
	}
}

// TestSessionKeepAliveStopped: when the session's keep-alive stops (the
// client paused), every lease in it ends — Done closes — and the server
// frees the keys at the session's expiry.
func TestSessionKeepAliveStopped(t *testing.T) {
	rc := startRaft(t)
	addr := raftLeader(t, rc).APIAddr()
	c := newClient(t, []string{addr}, client.Options{SessionTTL: 600 * time.Millisecond})
	leases := acquireN(t, c, "paused/", 5)
	client.StopSessionKeepAlive(c)
	for i, l := range leases {
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("lease %d still alive after its session's keep-alive stopped", i)
		}
		if !errors.Is(l.Err(), lock.ErrExpired) {
			t.Errorf("lease %d: Err %v, want ErrExpired", i, l.Err())
		}
	}
	other := newClient(t, []string{addr}, client.Options{NoSession: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, l := range leases {
		got, err := other.Acquire(ctx, l.Key, lock.AcquireOptions{TTL: time.Second})
		if err != nil {
			t.Fatalf("key %d not freed by the session's expiry: %v", i, err)
		}
		if got.Token <= l.Token {
			t.Errorf("key %d: token %d after the session's %d", i, got.Token, l.Token)
		}
	}
}

// TestSessionClosedByServer: a session closed elsewhere (another client
// that knows its id) is refused at its next keep-alive, which ends every
// lease in it with an error matching ErrSessionExpired and ErrNotHeld;
// the next acquire opens a new session.
func TestSessionClosedByServer(t *testing.T) {
	rc := startRaft(t)
	addr := raftLeader(t, rc).APIAddr()
	c := newClient(t, []string{addr}, client.Options{SessionTTL: 900 * time.Millisecond})
	leases := acquireN(t, c, "closed/", 4)
	s := leases[0].Session()
	admin := newClient(t, []string{addr}, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	alias := kit.NewSession(kit.SessionGrant{ID: s.ID, TTL: s.TTL(), Sent: time.Now()})
	if err := admin.CloseSession(ctx, alias); err != nil {
		t.Fatal(err)
	}
	for i, l := range leases {
		select {
		case <-l.Done():
		case <-ctx.Done():
			t.Fatalf("lease %d still alive after its session was closed", i)
		}
		if err := l.Err(); !errors.Is(err, lock.ErrSessionExpired) || !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("lease %d: Err %v, want ErrSessionExpired and ErrNotHeld", i, err)
		}
	}
	l, err := c.Acquire(ctx, "closed/again", lock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Session() == nil || l.Session() == s || l.Session().ID == s.ID {
		t.Fatal("the acquire after the session ended is not in a new session")
	}
}

// TestSessionLocker: the Client as a lock.SessionLocker for callers that
// manage their own sessions: CloseSession releases every lease of it (a
// waiter is granted), later calls answer ErrSessionExpired.
func TestSessionLocker(t *testing.T) {
	rc := startRaft(t)
	addr := raftLeader(t, rc).APIAddr()
	c := newClient(t, []string{addr}, client.Options{NoSession: true})
	var sl lock.SessionLocker = c
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := sl.OpenSession(ctx, lock.SessionOptions{TTL: 5 * time.Second, Owner: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.TryAcquire(ctx, "sl/a", lock.AcquireOptions{Session: s})
	if err != nil {
		t.Fatal(err)
	}
	bs, err := c.TryAcquireAll(ctx, []string{"sl/b", "sl/c"}, lock.AcquireOptions{Session: s})
	if err != nil {
		t.Fatal(err)
	}
	if a.Owner != "mine" || a.Session() != s || bs[1].Session() != s || s.Leases() != 3 {
		t.Fatalf("leases not in the session: owner %q, %d leases", a.Owner, s.Leases())
	}
	if _, err := c.TryAcquire(ctx, "sl/d", lock.AcquireOptions{Session: s, TTL: time.Second}); !errors.Is(err, lock.ErrInvalidTTL) {
		t.Fatalf("a TTL other than the session's: %v, want ErrInvalidTTL", err)
	}
	if err := sl.RenewSession(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := c.Renew(ctx, a, 0); err != nil {
		t.Fatalf("Renew of a session lease: %v", err)
	}
	waiter := newClient(t, []string{addr}, client.Options{NoSession: true})
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, "sl/c", lock.AcquireOptions{TTL: 5 * time.Second})
		got <- err
	}()
	awaitWaiters(t, waiter, "sl/c", 1)
	if err := sl.CloseSession(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter was not granted after the close: %v", err)
	}
	for _, l := range append(bs, a) {
		if !errors.Is(l.Err(), lock.ErrReleased) {
			t.Errorf("lease %s: Err %v, want ErrReleased", l.Key, l.Err())
		}
	}
	if err := sl.RenewSession(ctx, s); !errors.Is(err, lock.ErrSessionExpired) {
		t.Errorf("renew of a closed session: %v, want ErrSessionExpired", err)
	}
	if err := sl.CloseSession(ctx, kit.NewSession(kit.SessionGrant{ID: s.ID, TTL: time.Second, Sent: time.Now()})); !errors.Is(err, lock.ErrSessionExpired) {
		t.Errorf("close of a closed session: %v, want ErrSessionExpired", err)
	}
}

// TestSessionSurvivesLeaderChange: the session is the cluster's: when the
// leader stops, the client follows the new one, its keep-alive goes on
// there, and the session's leases stay held.
func TestSessionSurvivesLeaderChange(t *testing.T) {
	rc := startRaft(t)
	old := raftLeader(t, rc)
	c := newClient(t, apiAddrs(rc), client.Options{SessionTTL: 4 * time.Second})
	leases := acquireN(t, c, "failover/", 5)
	for i, s := range rc.Servers {
		if s.Node == old {
			s.Shutdown()
			rc.Servers[i] = nil
		}
	}
	nl := raftLeaderOf(t, rc, old)
	awaitSessionRenewals(t, nl.APIAddr(), 2)
	other := newClient(t, []string{nl.APIAddr()}, client.Options{NoSession: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, l := range leases {
		if err := l.Err(); err != nil {
			t.Fatalf("lease %d ended across the leader change: %v", i, err)
		}
		info, err := other.Inspect(ctx, l.Key)
		if err != nil || info.Token != l.Token {
			t.Fatalf("lease %d on the new leader: %+v %v", i, info, err)
		}
	}
	if lr, _ := renewals(t, nl.APIAddr()); lr != 0 {
		t.Errorf("the new leader renewed %d leases one by one", lr)
	}
}
