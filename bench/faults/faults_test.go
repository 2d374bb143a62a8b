package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/proxy"
	"github.com/lockgate/lockgate/internal/backends"
	"github.com/lockgate/lockgate/internal/servers"
	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

// TestFaultApplicability: where each of the newer faults applies and
// whether it is expected to break mutual exclusion there.
func TestFaultApplicability(t *testing.T) {
	for _, tc := range []struct {
		fault     string
		backend   string
		available bool
		breaks    bool
	}{
		{PartitionLeader, provision.Raft, true, false},
		{PartitionLeader, provision.Etcd, false, false},
		{PartitionMajority, provision.Raft, true, false},
		{PartitionMajority, provision.Redlock, false, false},
		{PartitionBridge, provision.Raft, true, false},
		{PartitionBridge, provision.ZooKeeper, false, false},
		{PartitionOneWay, provision.Raft, true, false},
		{PartitionOneWay, provision.Postgres, false, false},
		{SlowNet, provision.Raft, true, false},
		{SlowNet, provision.Redlock, true, false},
		{SlowNet, provision.Postgres, true, false},
		{SlowNet, provision.Etcd, true, false},
		{SlowNet, provision.ZooKeeper, true, false},
		{LossyNet, provision.Raft, true, false},
		{LossyNet, provision.Redsync, true, false},
		{LossyNet, provision.PGAdvisory, true, false},
		{LossyNet, provision.EtcdMutex, true, false},
		{Membership, provision.Raft, true, false},
		{Membership, provision.Etcd, false, false},
		{ClockSmall, provision.Raft, true, false},
		{ClockSmall, provision.Redlock, false, false},
		{ClockBig, provision.Raft, true, true},
		{ClockBig, provision.Postgres, false, false},
		{Clock, provision.Raft, true, false}, // as it was: docs/backends.md's table
		{KillAll, provision.Raft, true, false},
		{KillAll, provision.Redlock, true, true},
		{KillAll, provision.Redislock, true, true},
		{KillAll, provision.Postgres, true, false},
		{KillAll, provision.Etcd, true, false},
		{KillAll, provision.ZooKeeper, true, false},
		{DiskFull, provision.Raft, true, false},
		{DiskFull, provision.Redlock, false, false},
		{Restart, provision.Raft, true, false},
		{Restart, provision.Postgres, true, false},
		{Restart, provision.PGAdvisory, true, false},
		{Restart, provision.Etcd, true, false},
		{Restart, provision.Redlock, true, false},
		{Restart, provision.ZooKeeper, true, false},
	} {
		f, err := ByName(tc.fault)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Available(tc.backend); got != tc.available {
			t.Errorf("%s.Available(%s) = %v, want %v", tc.fault, tc.backend, got, tc.available)
		}
		if got := f.BreaksSafety(tc.backend); got != tc.breaks {
			t.Errorf("%s.BreaksSafety(%s) = %v, want %v", tc.fault, tc.backend, got, tc.breaks)
		}
		if !tc.available {
			err := f.Check(tc.backend)
			if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), ": "+tc.fault+" on ") || len(err.Error()) < 60 {
				t.Errorf("%s on %s: %v, want ErrFaultUnavailable with a reason", tc.fault, tc.backend, err)
			}
		}
	}
}

// TestExpandFaults: "all" is every fault that applies to the backend and
// does not break it by design (no client pause; on raft no clock-big, and
// no clock, which clock-small and clock-big split), other names
// pass through once, and a fault that does not exist or does not apply is
// refused.
func TestExpandFaults(t *testing.T) {
	raft, err := Expand(provision.Raft, []string{All})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range Names {
		fault, _ := ByName(f)
		want := f != Clock && (f != DiskFull || provision.CanMountTmpfs() == nil) && !fault.BreaksSafety(provision.Raft)
		if slices.Contains(raft, f) != want {
			t.Errorf("all on raft = %v: has %s %v, want %v", raft, f, !want, want)
		}
	}
	etcd, err := Expand(provision.Etcd, []string{Kill, All, Kill})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{Kill, Pause, Partition, SlowNet, LossyNet, KillAll, Restart}
	if !slices.Equal(etcd, want) {
		t.Errorf("kill,all,kill on etcd = %v, want %v", etcd, want)
	}
	if got, err := Expand(provision.Redlock, []string{Clock, ClientPause}); err != nil || !slices.Equal(got, []string{Clock, ClientPause}) {
		t.Errorf("clock,client-pause on redlock = %v, %v", got, err)
	}
	for _, tc := range []struct{ backend, fault string }{{provision.Etcd, Clock}, {provision.Redlock, Membership}, {provision.Raft, "meteor"}} {
		if _, err := Expand(tc.backend, []string{tc.fault}); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s on %s: %v, want ErrFaultUnavailable", tc.fault, tc.backend, err)
		}
	}
	if _, err := Expand("nosuch", []string{All}); err == nil {
		t.Error("an unknown backend was accepted")
	}
}

// TestProxyOneWayToxic: the one-way partition's toxic drops one direction
// of a connection while the other flows, and RemoveToxics(true) drops the
// connection so that no stream with a hole in it carries data again;
// a new connection then flows both ways.
func TestProxyOneWayToxic(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The server greets, then echoes lines.
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					fmt.Fprintf(c, "echo %s\n", sc.Text())
				}
			}()
		}
	}()
	ps := proxy.NewProxies()
	defer ps.Close()
	p, err := ps.Add("oneway-test", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(c net.Conn, r *bufio.Reader, msg string, wait time.Duration) (string, error) {
		c.SetDeadline(time.Now().Add(wait))
		if _, err := fmt.Fprintf(c, "%s\n", msg); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}
	if got, err := roundTrip(c, r, "a", 5*time.Second); err != nil || got != "echo a\n" {
		t.Fatalf("before the toxic: %q, %v", got, err)
	}
	tx := oneWay
	tx.Stream = "upstream"
	if err := p.AddToxic(tx); err != nil {
		t.Fatal(err)
	}
	// The request is dropped: no answer within 300 ms (an answer would
	// come back in well under a millisecond).
	if got, err := roundTrip(c, r, "b", 300*time.Millisecond); err == nil {
		t.Fatalf("upstream black-holed, yet the server answered %q", got)
	}
	if err := p.RemoveToxics(true); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("the connection that lost data survived the heal")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, err := roundTrip(c2, bufio.NewReader(c2), "c", 5*time.Second); err != nil || got != "echo c\n" {
		t.Fatalf("after the heal: %q, %v", got, err)
	}
}

// TestMembershipRemovedNodeGrantsNothing: a node removed from the cluster
// grants no lock itself: asked directly over REST (redirects not
// followed), it answers with an error or a redirect to a remaining member,
// never a lease; the remaining members still grant. (The SDK, given only
// the removed node's address, follows that redirect to the cluster: the
// lease it then gets is the cluster's.)
func TestMembershipRemovedNodeGrantsNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a raftlock cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := provision.Provision(ctx, []string{provision.Raft}, provision.ProvisionOptions{Lockgate: testenv.BuildLockgate(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rl := s.RaftProcs
	for _, leader := range []bool{false, true} {
		// A follower first, then the leader (which steps down).
		var gone *servers.RaftNode
		l := rl.Leader()
		for _, nd := range rl.Nodes {
			if nd.PID() != 0 && (nd == l) == leader && !removedIDs[nd.ID] {
				gone = nd
				break
			}
		}
		if gone == nil {
			t.Fatalf("no node to remove (leader %v)", leader)
		}
		var rest []string
		for _, nd := range rl.Nodes {
			if nd != gone && !removedIDs[nd.ID] {
				rest = append(rest, nd.APIAddr)
			}
		}
		if _, err := raftlock.Remove(ctx, rest, gone.ID); err != nil {
			t.Fatalf("removing node %s: %v", gone.ID, err)
		}
		removedIDs[gone.ID] = true
		for i := range 3 {
			code, loc, body := postLock(t, gone.APIAddr, fmt.Sprintf("removed-%s-%d", gone.ID, i))
			t.Logf("removed node %s answers %d %s %s", gone.ID, code, loc, body)
			if code >= 200 && code < 300 {
				t.Fatalf("removed node %s granted: %d %s", gone.ID, code, body)
			}
			if loc != "" && strings.Contains(loc, gone.APIAddr) {
				t.Fatalf("removed node %s redirects to itself: %s", gone.ID, loc)
			}
		}
		if leader {
			break // one node left: no quorum to ask for more
		}
		// The cluster without it still grants.
		lk, err := backends.Open(ctx, provision.Raft, backends.Spec{Raft: rest}, backends.Options{RequestTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		actx, acancel := context.WithTimeout(ctx, 10*time.Second)
		lease, err := lk.Acquire(actx, "after-removal", lock.AcquireOptions{TTL: 5 * time.Second})
		if err == nil {
			err = lk.Release(actx, lease)
		}
		acancel()
		lk.Close()
		if err != nil {
			t.Fatalf("the remaining members %v: %v", rest, err)
		}
	}
}

// removedIDs are the nodes TestMembershipRemovedNodeGrantsNothing removed.
var removedIDs = map[string]bool{}

// postLock asks the node at addr for key over REST, without following a
// redirect, and returns the status, the Location and the body.
func postLock(t *testing.T, addr, key string) (int, string, string) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Post("http://"+addr+"/locks/"+key, "application/json", strings.NewReader(`{"client_id":"t","ttl_ms":5000}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, resp.Header.Get("Location"), strings.TrimSpace(string(body))
}
