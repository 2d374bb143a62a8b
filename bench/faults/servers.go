package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/internal/servers"
)

// Server nemeses beyond kill and pause: the whole cluster killed at once,
// a graceful restart, membership changes under load, and the leader's
// clock moved within and beyond the drift allowance.

// concurrently runs fs at once and joins their errors.
func concurrently(fs ...func() error) error {
	errs := make([]error, len(fs))
	var wg sync.WaitGroup
	for i, f := range fs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// raftKillAll SIGKILLs every node at once; the heal starts them all
// together (each waits for a leader, which needs a quorum running). Every
// acknowledged grant and the token counter live in the log, which each
// node synced before it acknowledged.
func raftKillAll(env Env, _ *rand.Rand, _ time.Duration) (func() error, string, error) {
	nodes := env.S.RaftProcs.Nodes
	var fs []func() error
	for _, nd := range nodes {
		fs = append(fs, func() error { nd.Kill(); return nil })
	}
	concurrently(fs...)
	return func() error {
		fs = fs[:0]
		for _, nd := range nodes {
			fs = append(fs, func() error { return healing("restarting node "+nd.ID, nd.Restart) })
		}
		return concurrently(fs...)
	}, fmt.Sprintf("SIGKILL all %d nodes at once", len(nodes)), nil
}

func redisKillAll(env Env, _ *rand.Rand, _ time.Duration) (func() error, string, error) {
	rs := env.S.Redis
	var kill, restart []func() error
	for i, r := range rs {
		kill = append(kill, func() error { r.Kill(); return nil })
		restart = append(restart, func() error { return healing(fmt.Sprintf("restarting redis %d", i), r.Restart) })
	}
	concurrently(kill...)
	return func() error { return concurrently(restart...) },
		fmt.Sprintf("SIGKILL all %d redis at once (they restart empty: no persistence)", len(rs)), nil
}

func etcdKillAll(env Env, _ *rand.Rand, _ time.Duration) (func() error, string, error) {
	e := env.S.EtcdProcs
	var kill []func() error
	for _, m := range e.Members {
		kill = append(kill, func() error { m.Kill(); return nil })
	}
	concurrently(kill...)
	return func() error { return healing("restarting etcd", e.Restart) },
		fmt.Sprintf("SIGKILL all %d etcd members at once", len(e.Members)), nil
}

func zkKillAll(env Env, _ *rand.Rand, _ time.Duration) (func() error, string, error) {
	z := env.S.ZKProcs
	var kill []func() error
	for _, m := range z.Members {
		kill = append(kill, func() error { m.Kill(); return nil })
	}
	concurrently(kill...)
	return func() error { return healing("restarting zookeeper", z.Restart) },
		fmt.Sprintf("SIGKILL all %d ZooKeeper servers at once", len(z.Members)), nil
}

// postgresRestart stops PostgreSQL gracefully ("fast" shutdown: SIGINT,
// open transactions rolled back, a checkpoint written) and starts it again
// at the heal: an operator's restart, where kill is a crash and recovery.
func postgresRestart(env Env, _ *rand.Rand, _ time.Duration) (func() error, string, error) {
	pg := env.S.PG
	pg.Stop()
	return func() error { return healing("starting postgres", pg.Restart) }, "stop postgres gracefully (fast shutdown)", nil
}

// raftRestart stops the leader (or a random node) gracefully, SIGTERM,
// on which `lockgate node` hands its leadership to a peer before it exits,
// and starts it again at the heal: a rolling restart's step.
func raftRestart(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	nd, _, who := raftVictim(env.S, rng, true)
	nd.Stop()
	return func() error { return healing("starting "+who, nd.Restart) }, "stop " + who + " gracefully (SIGTERM)", nil
}

func etcdRestart(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	m, who := etcdMember(env.S, rng)
	m.Stop()
	return func() error { return healing("starting "+who, m.Restart) }, "stop " + who + " gracefully (SIGTERM)", nil
}

func zkRestart(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	m, who := zkMember(env.S, rng)
	m.Stop()
	return func() error { return healing("starting "+who, m.Restart) }, "stop " + who + " gracefully (SIGTERM)", nil
}

func redisRestart(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	rs := env.S.Redis
	i := rng.IntN(len(rs))
	rs[i].Stop()
	return func() error { return healing("starting redis", rs[i].Restart) },
		fmt.Sprintf("stop redis %d gracefully (SIGTERM; it restarts empty: no persistence)", i), nil
}

// raftClockSmall moves the leader's clock by at most TTL/100, forward or
// back: within the drift allowance every holder gives up (lock.Drift:
// TTL·1 % + 2 ms), so no lease may expire before its holder's deadline.
// The heal's return to 0 is itself a step of the same size.
func raftClockSmall(env Env, rng *rand.Rand, ttl time.Duration) (func() error, string, error) {
	nd, _, who := raftVictim(env.S, rng, false)
	jump := provision.Between(rng, ttl/400, ttl/100)
	dir := "forward"
	if rng.IntN(2) == 0 {
		jump, dir = -jump, "back"
	}
	if err := skewRaftClock(nd.APIAddr, jump); err != nil {
		return nil, "", err
	}
	return func() error { return skewRaftClock(nd.APIAddr, 0) },
		fmt.Sprintf("clock of %s steps %v %s (within the drift allowance)", who, jump.Abs().Round(time.Microsecond), dir), nil
}

// membershipTimeout bounds one membership change of the membership fault.
const membershipTimeout = 30 * time.Second

// raftMembership changes the cluster's membership under load: a fourth
// voter joins (a new `lockgate node` process, outside the proxies), a
// random one of the three original nodes is removed (the leader, too,
// which then steps down), and the leadership moves (the current leader is
// stopped gracefully — it hands leadership to a peer — and started
// again). The heal re-adds the removed node (from its data directory, as
// it was), removes the fourth and waits until the three original nodes
// are the voters again.
//
// hashicorp/raft has no leadership-transfer call in raftlock's HTTP API;
// the graceful stop is the transfer an operator's rolling restart makes.
func raftMembership(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	s := env.S
	rl := s.RaftProcs
	ctx, cancel := context.WithTimeout(context.Background(), membershipTimeout)
	defer cancel()
	added, err := rl.AddNode(ctx, "--fault-injection")
	if err != nil {
		return nil, "", err
	}
	x := rng.IntN(len(rl.Nodes))
	removed := rl.Nodes[x]
	undo := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*membershipTimeout)
		defer cancel()
		return raftRestoreMembers(ctx, s, removed, x, added)
	}
	if _, err := raftlock.Remove(ctx, raftSeeds(s, added), removed.ID); err != nil {
		return nil, "", errors.Join(fmt.Errorf("removing node %s: %w", removed.ID, err), undo())
	}
	what := fmt.Sprintf("node %s joins as a fourth voter; node %s is removed", added.ID, removed.ID)
	if l := raftLeaderAmong(s, added, removed); l != nil {
		l.Stop()
		if err := l.Restart(); err != nil {
			return nil, "", errors.Join(fmt.Errorf("restarting leader %s after the transfer: %w", l.ID, err), undo())
		}
		what += "; leader " + l.ID + " hands over its leadership (graceful restart)"
	}
	return undo, what, nil
}

// raftSeeds are the API addresses of the cluster's nodes (not through the
// proxies), added's too, for membership calls.
func raftSeeds(s *provision.Servers, added *servers.RaftNode) []string {
	seeds := slices.Clone(s.RaftProcs.APIAddrs)
	if added != nil {
		seeds = append(seeds, added.APIAddr)
	}
	return seeds
}

// raftLeaderAmong returns the current leader if it is one of the nodes
// still in the cluster (an original node other than removed, or added).
func raftLeaderAmong(s *provision.Servers, added, removed *servers.RaftNode) *servers.RaftNode {
	for _, addr := range raftSeeds(s, added) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		pl, err := raftlock.FetchPeers(ctx, addr)
		cancel()
		if err != nil || pl.LeaderID == "" || pl.LeaderID == removed.ID {
			continue
		}
		if pl.LeaderID == added.ID {
			return added
		}
		for _, nd := range s.RaftProcs.Nodes {
			if nd.ID == pl.LeaderID {
				return nd
			}
		}
	}
	return nil
}

// raftRestoreMembers puts the original nodes back as the only voters:
// removed (at index x) joins again under its own id and addresses and is
// restarted from its data directory (a removed node's Raft shuts down),
// then added leaves and stops.
func raftRestoreMembers(ctx context.Context, s *provision.Servers, removed *servers.RaftNode, x int, added *servers.RaftNode) error {
	seeds := raftSeeds(s, added)
	// Clients reach each original node at its proxy: that is the API
	// address the member directory must hold.
	api := removed.APIAddr
	if s.RaftAPILinks != nil {
		api = s.RaftAPILinks[x].Addr()
	}
	// The removed node may have been the leader: the others then elect a
	// new one, and until they have, every seed answers "no leader".
	join := func() error {
		_, err := raftlock.Join(ctx, seeds, raftlock.JoinArgs{ServerID: removed.ID, ServerAddr: removed.RaftAddr, APIAddr: api})
		return err
	}
	if err := untilDone(ctx, join); err != nil {
		return fmt.Errorf("re-adding node %s: %w", removed.ID, err)
	}
	if err := removed.Restart(); err != nil {
		return fmt.Errorf("restarting node %s: %w", removed.ID, err)
	}
	if err := untilDone(ctx, func() error { _, err := raftlock.Remove(ctx, seeds, added.ID); return err }); err != nil {
		return fmt.Errorf("removing node %s: %w", added.ID, err)
	}
	added.Stop()
	want := make([]string, len(s.RaftProcs.Nodes))
	for i, nd := range s.RaftProcs.Nodes {
		want[i] = nd.ID
	}
	slices.Sort(want)
	for {
		var last error
		for _, addr := range s.RaftProcs.APIAddrs {
			pl, err := raftlock.FetchPeers(ctx, addr)
			if err != nil {
				last = err
				continue
			}
			got := slices.Clone(pl.Voters)
			slices.Sort(got)
			if pl.LeaderID != "" && slices.Equal(got, want) {
				return nil
			}
			last = fmt.Errorf("voters %v, leader %q", got, pl.LeaderID)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the voters never became %v again: %w", want, errors.Join(last, ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// untilDone calls f until it succeeds or ctx ends, 100 ms apart, and
// returns its last error with ctx's.
func untilDone(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
