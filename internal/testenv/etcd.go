package testenv

import (
	"context"
	"testing"

	"github.com/lockgate/lockgate/internal/servers"
)

// Etcd is an etcd cluster of one or more members, each a separate etcd
// (v3.4) process with its own data directory and its own client and peer
// ports on 127.0.0.1, owned by a test: a servers.Etcd whose faults fail the
// test. It is stopped, and its data removed, by a t.Cleanup registered by
// StartEtcd. Its methods must not be called after the test has finished.
type Etcd struct {
	// Endpoints are the members' client URLs (http://127.0.0.1:<port>), in
	// member order, for clientv3.Config.Endpoints.
	Endpoints []string
	// Members are the cluster members, in the order of Endpoints.
	Members []*EtcdMember

	e *servers.Etcd
	t testing.TB
}

// EtcdMember is one member process of an Etcd cluster.
type EtcdMember struct {
	*servers.EtcdMember
	t testing.TB
}

// StartEtcd starts an n-member etcd cluster (n >= 1; typically 1 or 3)
// bootstrapped statically with --initial-cluster naming every member, and
// returns once every member answers GET <ClientURL>/health with health true
// (which needs an elected leader). Logging is zap at level warn on stderr.
//
// It skips (or under CI=true fails) the test if etcd is not installed
// (Debian package "etcd-server"), and fails the test with the tail of the
// members' logs if the cluster is not healthy within 30 seconds. All
// members are stopped when the test and its subtests finish.
func StartEtcd(t testing.TB, n int) *Etcd {
	t.Helper()
	if n < 1 {
		t.Fatalf("testenv: StartEtcd: n = %d, want at least 1", n)
	}
	bin := RequireBinary(t, "etcd", "etcd-server")
	e, err := servers.StartEtcd(context.Background(), n, servers.EtcdOptions{Bin: bin, Log: t})
	if err != nil {
		failStart(t, "StartEtcd", err)
	}
	t.Cleanup(e.Close)
	return wrapEtcd(t, e)
}

func wrapEtcd(t testing.TB, e *servers.Etcd) *Etcd {
	w := &Etcd{Endpoints: e.Endpoints, e: e, t: t}
	for _, m := range e.Members {
		w.Members = append(w.Members, &EtcdMember{EtcdMember: m, t: t})
	}
	return w
}

// Stop stops every running member gracefully (see EtcdMember.Stop):
// paused members are resumed, then the followers are stopped, and the
// leader last. Stopping a cluster that is not running does nothing.
func (e *Etcd) Stop() { e.e.Stop() }

// Restart starts every member that is not running (stopping none; paused
// members are not resumed) with its data directory and ports, and waits
// until all members are healthy; the test fails if they are not.
// Use it after stopping a quorum of members, where restarting them one by
// one with EtcdMember.Restart would wait for a quorum that is not there.
func (e *Etcd) Restart() {
	e.t.Helper()
	if err := e.e.Restart(); err != nil {
		e.t.Fatalf("testenv: %v", err)
	}
}

// Restart starts the member again with the same name, data directory and
// ports (stopping it first if it is still running); it rejoins from its
// data directory. It returns once the member reports healthy, which needs a
// quorum of the cluster running (see Etcd.Restart otherwise); the test
// fails if it does not become healthy within 30 seconds.
func (m *EtcdMember) Restart() {
	m.t.Helper()
	if err := m.EtcdMember.Restart(); err != nil {
		m.t.Fatalf("testenv: %v", err)
	}
}

// Pause freezes the member with SIGSTOP; to its peers it looks like a
// network partition until Resume.
func (m *EtcdMember) Pause() { m.t.Helper(); errorf(m.t, m.EtcdMember.Pause()) }

// Resume continues a paused member with SIGCONT. Pausing or resuming a member
// that is not running marks the test failed (t.Errorf).
func (m *EtcdMember) Resume() { m.t.Helper(); errorf(m.t, m.EtcdMember.Resume()) }
