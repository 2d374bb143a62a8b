package testenv

import (
	"context"
	"testing"

	"github.com/lockgate/lockgate/internal/servers"
)

// ZooKeeper is a ZooKeeper ensemble of one or more members, each a
// separate JVM (Debian's zookeeper 3.8 jars) with its own data directory
// and its own client, quorum and election ports on 127.0.0.1, owned by a
// test: a servers.ZooKeeper whose faults fail the test. It is stopped, and
// its data removed, by a t.Cleanup registered by StartZooKeeper. Its
// methods must not be called after the test has finished.
type ZooKeeper struct {
	// Addrs are the members' client addresses (127.0.0.1:<port>), in
	// member order, for zk.Connect.
	Addrs []string
	// Members are the ensemble's members, in the order of Addrs.
	Members []*ZooKeeperMember

	z *servers.ZooKeeper
	t testing.TB
}

// ZooKeeperMember is one member process of a ZooKeeper ensemble.
type ZooKeeperMember struct {
	*servers.ZooKeeperMember
	t testing.TB
}

// StartZooKeeper starts an n-member ZooKeeper ensemble (1: standalone; 3:
// a quorum) with ZooKeeper's default tick of 2 s (session timeouts of 4 s
// to 40 s), and returns once every member answers srvr with its Mode
// (standalone, leader or follower). See servers.StartZooKeeper.
//
// It skips (or under CI=true fails) the test if java or ZooKeeper is not
// installed (Debian packages default-jre-headless and zookeeper), and
// fails the test with the tail of the members' logs if the ensemble is not
// ready within 30 seconds. All members are stopped when the test and its
// subtests finish.
func StartZooKeeper(t testing.TB, n int) *ZooKeeper {
	t.Helper()
	return StartZooKeeperWith(t, n, servers.ZooKeeperOptions{})
}

// StartZooKeeperWith is StartZooKeeper with options (a shorter TickTime,
// for tests of session expiry); opts.Log is set to t.
func StartZooKeeperWith(t testing.TB, n int, opts servers.ZooKeeperOptions) *ZooKeeper {
	t.Helper()
	if n < 1 {
		t.Fatalf("testenv: StartZooKeeper: n = %d, want at least 1", n)
	}
	opts.Log = t
	z, err := servers.StartZooKeeper(context.Background(), n, opts)
	if err != nil {
		failStart(t, "StartZooKeeper", err)
	}
	t.Cleanup(z.Close)
	w := &ZooKeeper{Addrs: z.Addrs, z: z, t: t}
	for _, m := range z.Members {
		w.Members = append(w.Members, &ZooKeeperMember{ZooKeeperMember: m, t: t})
	}
	return w
}

// Stop stops every running member; paused members are resumed first.
// Stopping an ensemble that is not running does nothing.
func (z *ZooKeeper) Stop() { z.z.Stop() }

// Restart starts every member that is not running with its data directory
// and ports, and waits until every member reports a Mode; the test fails
// if they do not.
func (z *ZooKeeper) Restart() {
	z.t.Helper()
	if err := z.z.Restart(); err != nil {
		z.t.Fatalf("testenv: %v", err)
	}
}

// Restart starts the member again with the same id, data directory and
// ports (stopping it first if it is still running); the test fails if it
// does not report a Mode within 30 seconds (it needs a quorum running).
func (m *ZooKeeperMember) Restart() {
	m.t.Helper()
	if err := m.ZooKeeperMember.Restart(); err != nil {
		m.t.Fatalf("testenv: %v", err)
	}
}

// Pause freezes the member with SIGSTOP.
func (m *ZooKeeperMember) Pause() { m.t.Helper(); errorf(m.t, m.ZooKeeperMember.Pause()) }

// Resume continues a paused member with SIGCONT. Pausing or resuming a
// member that is not running marks the test failed (t.Errorf).
func (m *ZooKeeperMember) Resume() { m.t.Helper(); errorf(m.t, m.ZooKeeperMember.Resume()) }
