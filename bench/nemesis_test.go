package bench

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
	"github.com/lockgate/lockgate/internal/backends"
	"github.com/lockgate/lockgate/internal/servers"
	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

// TestNemesisFaultTable: where each of the newer faults applies and
// whether it is expected to break mutual exclusion there.
func TestNemesisFaultTable(t *testing.T) {
	for _, tc := range []struct {
		fault     string
		backend   string
		available bool
		breaks    bool
	}{
		{FaultPartitionLeader, Raft, true, false},
		{FaultPartitionLeader, Etcd, false, false},
		{FaultPartitionMajority, Raft, true, false},
		{FaultPartitionMajority, Redlock, false, false},
		{FaultPartitionBridge, Raft, true, false},
		{FaultPartitionBridge, ZooKeeper, false, false},
		{FaultPartitionOneWay, Raft, true, false},
		{FaultPartitionOneWay, Postgres, false, false},
		{FaultSlowNet, Raft, true, false},
		{FaultSlowNet, Redlock, true, false},
		{FaultSlowNet, Postgres, true, false},
		{FaultSlowNet, Etcd, true, false},
		{FaultSlowNet, ZooKeeper, true, false},
		{FaultLossyNet, Raft, true, false},
		{FaultLossyNet, Redsync, true, false},
		{FaultLossyNet, PGAdvisory, true, false},
		{FaultLossyNet, EtcdMutex, true, false},
		{FaultMembership, Raft, true, false},
		{FaultMembership, Etcd, false, false},
		{FaultClockSmall, Raft, true, false},
		{FaultClockSmall, Redlock, false, false},
		{FaultClockBig, Raft, true, true},
		{FaultClockBig, Postgres, false, false},
		{FaultClock, Raft, true, false}, // as it was: docs/backends.md's table
		{FaultKillAll, Raft, true, false},
		{FaultKillAll, Redlock, true, true},
		{FaultKillAll, Redislock, true, true},
		{FaultKillAll, Postgres, true, false},
		{FaultKillAll, Etcd, true, false},
		{FaultKillAll, ZooKeeper, true, false},
		{FaultDiskFull, Raft, true, false},
		{FaultDiskFull, Redlock, false, false},
		{FaultRestart, Raft, true, false},
		{FaultRestart, Postgres, true, false},
		{FaultRestart, PGAdvisory, true, false},
		{FaultRestart, Etcd, true, false},
		{FaultRestart, Redlock, true, false},
		{FaultRestart, ZooKeeper, true, false},
	} {
		f, err := FaultByName(tc.fault)
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
			err := f.check(tc.backend)
			if !errors.Is(err, ErrFaultUnavailable) || !strings.Contains(err.Error(), ": "+tc.fault+" on ") || len(err.Error()) < 60 {
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
	raft, err := ExpandFaults(Raft, []string{FaultAll})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range Faults {
		fault, _ := FaultByName(f)
		want := f != FaultClock && (f != FaultDiskFull || canMountTmpfs() == nil) && !fault.BreaksSafety(Raft)
		if slices.Contains(raft, f) != want {
			t.Errorf("all on raft = %v: has %s %v, want %v", raft, f, !want, want)
		}
	}
	etcd, err := ExpandFaults(Etcd, []string{FaultKill, FaultAll, FaultKill})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{FaultKill, FaultPause, FaultPartition, FaultSlowNet, FaultLossyNet, FaultKillAll, FaultRestart}
	if !slices.Equal(etcd, want) {
		t.Errorf("kill,all,kill on etcd = %v, want %v", etcd, want)
	}
	if got, err := ExpandFaults(Redlock, []string{FaultClock, FaultClientPause}); err != nil || !slices.Equal(got, []string{FaultClock, FaultClientPause}) {
		t.Errorf("clock,client-pause on redlock = %v, %v", got, err)
	}
	for _, tc := range []struct{ backend, fault string }{{Etcd, FaultClock}, {Redlock, FaultMembership}, {Raft, "meteor"}} {
		if _, err := ExpandFaults(tc.backend, []string{tc.fault}); !errors.Is(err, ErrFaultUnavailable) {
			t.Errorf("%s on %s: %v, want ErrFaultUnavailable", tc.fault, tc.backend, err)
		}
	}
	if _, err := ExpandFaults("nosuch", []string{FaultAll}); err == nil {
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
	ps := NewProxies()
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
	s, err := Provision(ctx, []string{Raft}, ProvisionOptions{Lockgate: testenv.BuildLockgate(t)})
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
		lk, err := backends.Open(ctx, Raft, backends.Spec{Raft: rest}, backends.Options{RequestTimeout: 2 * time.Second})
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
