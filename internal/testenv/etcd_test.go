package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func newEtcdClient(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("clientv3.New(%v): %v", endpoints, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func etcdPut(t *testing.T, c *clientv3.Client, key, val string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, key, val); err != nil {
		t.Fatalf("Put %s via %v: %v", key, c.Endpoints(), err)
	}
}

func etcdGet(t *testing.T, c *clientv3.Client, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, key) // linearizable: goes through the leader
	if err != nil {
		t.Fatalf("Get %s via %v: %v", key, c.Endpoints(), err)
	}
	if len(resp.Kvs) != 1 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

func checkEtcdMembers(t *testing.T, e *Etcd, n int) {
	t.Helper()
	if len(e.Members) != n || len(e.Endpoints) != n {
		t.Fatalf("got %d members, %d endpoints; want %d", len(e.Members), len(e.Endpoints), n)
	}
	seen := map[string]bool{}
	for i, m := range e.Members {
		if e.Endpoints[i] != m.ClientURL {
			t.Errorf("Endpoints[%d] = %q, member %s ClientURL %q", i, e.Endpoints[i], m.Name, m.ClientURL)
		}
		for _, u := range []string{m.ClientURL, m.PeerURL} {
			if !strings.HasPrefix(u, "http://127.0.0.1:") || seen[u] {
				t.Errorf("member %s: URL %q not on 127.0.0.1 or duplicate", m.Name, u)
			}
			seen[u] = true
		}
		requireAlive(t, m.Name, m.PID())
	}
	// The members form one cluster of n, not n clusters of one.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := newEtcdClient(t, e.Endpoints[0]).MemberList(ctx)
	if err != nil {
		t.Fatalf("MemberList: %v", err)
	}
	if len(resp.Members) != n {
		t.Errorf("MemberList has %d members, want %d", len(resp.Members), n)
	}
}

func TestEtcdSingle(t *testing.T) {
	t.Parallel()
	e := StartEtcd(t, 1)
	checkEtcdMembers(t, e, 1)
	c := newEtcdClient(t, e.Endpoints...)
	etcdPut(t, c, "k", "v")
	if got := etcdGet(t, c, "k"); got != "v" {
		t.Fatalf("Get k = %q, want v", got)
	}

	m := e.Members[0]
	m.Kill()
	m.Restart() // same data dir: the key survives
	if got := etcdGet(t, newEtcdClient(t, m.ClientURL), "k"); got != "v" {
		t.Errorf("after Kill+Restart: Get k = %q, want v", got)
	}

	pid := m.PID()
	m.Stop()
	requireGone(t, "after Stop", pid)
	requireRefused(t, m.ClientURL)
	requireRefused(t, m.PeerURL)
	m.Stop() // idempotent
}

func TestEtcdCluster(t *testing.T) {
	t.Parallel()
	e := StartEtcd(t, 3)
	checkEtcdMembers(t, e, 3)

	// Every member serves writes, and reads see every write.
	clients := make([]*clientv3.Client, 3)
	for i, ep := range e.Endpoints {
		clients[i] = newEtcdClient(t, ep)
		etcdPut(t, clients[i], fmt.Sprint("k", i), fmt.Sprint("v", i))
	}
	for _, c := range clients {
		for i := range clients {
			if got, want := etcdGet(t, c, fmt.Sprint("k", i)), fmt.Sprint("v", i); got != want {
				t.Errorf("Get k%d via %v = %q, want %q", i, c.Endpoints(), got, want)
			}
		}
	}

	// One member down: the other two are a quorum.
	down := e.Members[2]
	pid := down.PID()
	down.Stop()
	requireGone(t, "stopped member", pid)
	requireRefused(t, down.ClientURL)
	if down.PID() != 0 {
		t.Errorf("PID() of stopped member = %d, want 0", down.PID())
	}
	etcdPut(t, newEtcdClient(t, e.Endpoints[0], e.Endpoints[1]), "while-down", "yes")

	// It rejoins from its data directory and catches up.
	down.Restart()
	if got := etcdGet(t, newEtcdClient(t, down.ClientURL), "while-down"); got != "yes" {
		t.Errorf("restarted member: Get while-down = %q, want yes", got)
	}

	// A paused member does not answer; the rest of the cluster does. Pause
	// a follower, so the Put below does not have to wait for an election.
	p := etcdFollower(t, e)
	p.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err := newEtcdClient(t, p.ClientURL).Get(ctx, "k0", clientv3.WithSerializable())
	cancel()
	if err == nil {
		t.Errorf("Get from a paused member succeeded")
	}
	var others []string
	for _, m := range e.Members {
		if m != p {
			others = append(others, m.ClientURL)
		}
	}
	etcdPut(t, newEtcdClient(t, others...), "while-paused", "yes")
	p.Resume()
	if got := etcdGet(t, newEtcdClient(t, p.ClientURL), "while-paused"); got != "yes" {
		t.Errorf("resumed member: Get while-paused = %q, want yes", got)
	}

	// The whole cluster down and up again: same ports, same data.
	var old []int
	for _, m := range e.Members {
		old = append(old, m.PID())
	}
	e.Stop()
	for i, m := range e.Members {
		requireGone(t, m.Name+" after Etcd.Stop", old[i])
		requireRefused(t, m.ClientURL)
	}
	e.Restart()
	c := newEtcdClient(t, e.Endpoints...)
	for _, k := range []string{"k0", "while-down", "while-paused"} {
		if got := etcdGet(t, c, k); got == "" {
			t.Errorf("after Etcd.Stop+Restart: %s is gone", k)
		}
	}
	checkEtcdMembers(t, e, 3)
}

// etcdFollower returns a member that is not the leader.
func etcdFollower(t *testing.T, e *Etcd) *EtcdMember {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range e.Members {
		st, err := newEtcdClient(t, m.ClientURL).Status(ctx, m.ClientURL)
		if err != nil {
			t.Fatalf("Status(%s): %v", m.ClientURL, err)
		}
		if st.Header.MemberId != st.Leader {
			return m
		}
	}
	t.Fatalf("no follower found")
	return nil
}

// TestEtcdCleanup proves that the t.Cleanup registered by StartEtcd stops
// every member when the subtest that started the cluster ends.
func TestEtcdCleanup(t *testing.T) {
	t.Parallel()
	var pids []int
	var urls []string
	t.Run("start", func(t *testing.T) {
		e := StartEtcd(t, 3)
		for _, m := range e.Members {
			requireAlive(t, m.Name, m.PID())
			pids = append(pids, m.PID())
			urls = append(urls, m.ClientURL, m.PeerURL)
		}
		e.Members[1].Pause() // cleanup must cope with a paused member too
	})
	if len(pids) != 3 {
		t.Fatalf("subtest recorded %d PIDs", len(pids))
	}
	for _, pid := range pids {
		requireGone(t, "member after subtest", pid)
	}
	for _, u := range urls {
		requireRefused(t, u)
	}
}
