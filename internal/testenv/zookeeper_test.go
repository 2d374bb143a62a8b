package testenv

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// newZkConn connects to addrs and waits for the session.
func newZkConn(t *testing.T, addrs ...string) *zk.Conn {
	t.Helper()
	c, events, err := zk.Connect(addrs, 10*time.Second, zk.WithLogger(zkQuiet{}))
	if err != nil {
		t.Fatalf("zk.Connect(%v): %v", addrs, err)
	}
	t.Cleanup(c.Close)
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return c
			}
		case <-timeout:
			t.Fatalf("zk.Connect(%v): no session after 30s (state %v)", addrs, c.State())
		}
	}
}

func zkCreate(t *testing.T, c *zk.Conn, path, val string) {
	t.Helper()
	if _, err := c.Create(path, []byte(val), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("Create %s: %v", path, err)
	}
}

// zkGet reads path after a sync, so that a follower's answer includes
// every write committed before the call.
func zkGet(t *testing.T, c *zk.Conn, path string) string {
	t.Helper()
	if _, err := c.Sync(path); err != nil {
		t.Fatalf("Sync %s: %v", path, err)
	}
	b, _, err := c.Get(path)
	if err != nil {
		t.Fatalf("Get %s: %v", path, err)
	}
	return string(b)
}

func checkZooKeeperMembers(t *testing.T, z *ZooKeeper, n int) {
	t.Helper()
	if len(z.Members) != n || len(z.Addrs) != n {
		t.Fatalf("got %d members, %d addrs; want %d", len(z.Members), len(z.Addrs), n)
	}
	modes := map[string]int{}
	for i, m := range z.Members {
		if z.Addrs[i] != m.Addr {
			t.Errorf("Addrs[%d] = %q, member %d Addr %q", i, z.Addrs[i], m.ID, m.Addr)
		}
		requireAlive(t, m.Addr, m.PID())
		mode, err := m.Mode()
		if err != nil {
			t.Fatalf("member %d: Mode: %v", m.ID, err)
		}
		modes[mode]++
	}
	// The members form one ensemble of n, not n of one.
	want := map[string]int{"standalone": 1}
	if n > 1 {
		want = map[string]int{"leader": 1, "follower": n - 1}
	}
	if len(modes) != len(want) || modes["leader"] != want["leader"] || modes["follower"] != want["follower"] || modes["standalone"] != want["standalone"] {
		t.Errorf("member modes %v, want %v", modes, want)
	}
}

func TestZooKeeperSingle(t *testing.T) {
	t.Parallel()
	z := StartZooKeeper(t, 1)
	checkZooKeeperMembers(t, z, 1)
	c := newZkConn(t, z.Addrs...)
	zkCreate(t, c, "/k", "v")
	if got := zkGet(t, c, "/k"); got != "v" {
		t.Fatalf("Get /k = %q, want v", got)
	}

	m := z.Members[0]
	m.Kill()
	m.Restart() // same data dir: the node survives
	if got := zkGet(t, newZkConn(t, m.Addr), "/k"); got != "v" {
		t.Errorf("after Kill+Restart: Get /k = %q, want v", got)
	}

	pid := m.PID()
	m.Stop()
	requireGone(t, "after Stop", pid)
	requireRefused(t, m.Addr)
	m.Stop() // idempotent
}

func TestZooKeeperEnsemble(t *testing.T) {
	t.Parallel()
	z := StartZooKeeper(t, 3)
	checkZooKeeperMembers(t, z, 3)

	// A write through any member is read through every other.
	conns := make([]*zk.Conn, 3)
	for i, m := range z.Members {
		conns[i] = newZkConn(t, m.Addr)
	}
	zkCreate(t, conns[0], "/k", "v")
	for i, c := range conns {
		if got := zkGet(t, c, "/k"); got != "v" {
			t.Errorf("Get /k via member %d = %q, want v", z.Members[i].ID, got)
		}
	}

	// One member down: the other two are a quorum and still take writes.
	down := z.Members[2]
	pid := down.PID()
	down.Stop()
	requireGone(t, "stopped member", pid)
	requireRefused(t, down.Addr)
	zkCreate(t, newZkConn(t, z.Addrs[0], z.Addrs[1]), "/while-down", "yes")
	down.Restart() // rejoins from its data directory and catches up
	if got := zkGet(t, newZkConn(t, down.Addr), "/while-down"); got != "yes" {
		t.Errorf("restarted member: Get /while-down = %q, want yes", got)
	}
	checkZooKeeperMembers(t, z, 3)

	// The whole ensemble down and up again (ZooKeeper.Restart starts the
	// members together, as none has a quorum alone): same ports, same data.
	var old []int
	for _, m := range z.Members {
		old = append(old, m.PID())
	}
	z.Stop()
	for i, m := range z.Members {
		requireGone(t, fmt.Sprintf("member %d after ZooKeeper.Stop", m.ID), old[i])
		requireRefused(t, m.Addr)
	}
	z.Restart()
	if got := zkGet(t, newZkConn(t, z.Addrs...), "/while-down"); got != "yes" {
		t.Errorf("after ZooKeeper.Stop+Restart: Get /while-down = %q, want yes", got)
	}
	checkZooKeeperMembers(t, z, 3)
}

// TestZooKeeperCleanup proves that the t.Cleanup registered by
// StartZooKeeper stops every member and removes its data when the subtest
// that started the ensemble ends, a paused member included.
func TestZooKeeperCleanup(t *testing.T) {
	t.Parallel()
	var pids []int
	var addrs, dirs []string
	t.Run("start", func(t *testing.T) {
		z := StartZooKeeper(t, 3)
		for _, m := range z.Members {
			requireAlive(t, m.Addr, m.PID())
			pids = append(pids, m.PID())
			addrs = append(addrs, m.Addr)
			dirs = append(dirs, m.DataDir)
		}
		z.Members[1].Pause() // cleanup must cope with a paused member too
	})
	if len(pids) != 3 {
		t.Fatalf("subtest recorded %d PIDs", len(pids))
	}
	for _, pid := range pids {
		requireGone(t, "member after subtest", pid)
	}
	for _, a := range addrs {
		requireRefused(t, a)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("data directory %s still there after cleanup (stat: %v)", d, err)
		}
	}
}
