package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/proxy"
	"github.com/lockgate/lockgate/internal/servers"
)

// healing runs a server fault's heal and says what failed.
func healing(what string, f func() error) error {
	if err := f(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// cutAll cuts ps and returns the heal of all of them.
func cutAll(ps []*proxy.Proxy) func() error {
	for _, p := range ps {
		p.Cut()
	}
	return func() error {
		var first error
		for _, p := range ps {
			if err := p.Heal(); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
}

// raftVictim picks the node a raftlock fault strikes: the leader, or
// (anyNode, one time in two) a random node.
func raftVictim(s *provision.Servers, rng *rand.Rand, anyNode bool) (*servers.RaftNode, int, string) {
	rl := s.RaftProcs
	l := rl.Leader()
	if l == nil || anyNode && rng.IntN(2) == 0 {
		i := rng.IntN(len(rl.Nodes))
		return rl.Nodes[i], i, "node " + rl.Nodes[i].ID
	}
	for i, nd := range rl.Nodes {
		if nd == l {
			return nd, i, "leader " + nd.ID
		}
	}
	return l, 0, "leader " + l.ID
}

func raftKill(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	nd, _, who := raftVictim(env.S, rng, true)
	nd.Kill()
	return func() error { return healing("restarting "+who, nd.Restart) }, "SIGKILL " + who, nil
}

func raftPause(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	nd, _, who := raftVictim(env.S, rng, false)
	if err := nd.Pause(); err != nil {
		return nil, "", err
	}
	return func() error { return healing("resuming "+who, nd.Resume) }, "SIGSTOP " + who, nil
}

// raftPartition isolates the leader or a random node from its peers (a
// minority or the majority loses its leader), and half the time from its
// clients too.
func raftPartition(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	api, peer := env.S.RaftAPILinks, env.S.RaftPeerLinks
	_, i, who := raftVictim(env.S, rng, rng.IntN(2) == 0)
	var cut []*proxy.Proxy
	for j := range env.S.RaftProcs.Nodes {
		if j != i {
			cut = append(cut, peer[i][j], peer[j][i])
		}
	}
	what := "isolate " + who + " from its peers"
	if rng.IntN(2) == 0 {
		cut = append(cut, api[i])
		what += " and clients"
	}
	return cutAll(cut), what, nil
}

func raftClock(env Env, rng *rand.Rand, ttl time.Duration) (func() error, string, error) {
	nd, _, who := raftVictim(env.S, rng, false)
	jump := provision.Between(rng, ttl, 3*ttl)
	if err := skewRaftClock(nd.APIAddr, jump); err != nil {
		return nil, "", err
	}
	return func() error { return skewRaftClock(nd.APIAddr, 0) },
		fmt.Sprintf("clock of %s jumps %v forward", who, jump.Round(time.Millisecond)), nil
}

// skewRaftClock sets a raftlock node's clock offset (fault injection).
func skewRaftClock(apiAddr string, d time.Duration) error {
	body, _ := json.Marshal(raftlock.ClockSkew{OffsetMs: d.Milliseconds()})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+apiAddr+raftlock.PathDebugClock, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("skewing the clock of %s: %w", apiAddr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("skewing the clock of %s: %s: %s", apiAddr, resp.Status, msg)
	}
	return nil
}

func redisKill(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	rs := env.S.Redis
	i := rng.IntN(len(rs))
	rs[i].Kill()
	return func() error { return healing("restarting redis", rs[i].Restart) },
		fmt.Sprintf("SIGKILL redis %d (restarts empty: no persistence)", i), nil
}

func redisPause(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	rs := env.S.Redis
	i := rng.IntN(len(rs))
	if err := rs[i].Pause(); err != nil {
		return nil, "", err
	}
	return func() error { return healing("resuming redis", rs[i].Resume) }, fmt.Sprintf("SIGSTOP redis %d", i), nil
}

// redisPartition cuts the clients from a minority of the Redis masters:
// the quorum survives.
func redisPartition(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	ps := env.S.RedisLinks
	n := 1 + rng.IntN(len(env.S.Redis)/2)
	idx := rng.Perm(len(env.S.Redis))[:n]
	cut := make([]*proxy.Proxy, n)
	for k, i := range idx {
		cut[k] = ps[i]
	}
	return cutAll(cut), fmt.Sprintf("cut clients from redis %v", idx), nil
}

// redisClock jumps a quorum's clocks forward; a jump cannot be undone, so
// its heal does nothing.
func redisClock(env Env, rng *rand.Rand, ttl time.Duration) (func() error, string, error) {
	rs := env.S.Redis
	jump := provision.Between(rng, 2*ttl, 4*ttl)
	// A majority, always with redis 0: the one server of the
	// single-Redis backends (redlock:single, redislock), so that the
	// jump reaches them too.
	idx := rng.Perm(len(rs))[:len(rs)/2+1]
	if !slices.Contains(idx, 0) {
		idx[0] = 0
	}
	for _, i := range idx {
		if err := jumpRedisClock(rs[i].Addr, jump); err != nil {
			return nil, "", err
		}
	}
	return func() error { return nil }, fmt.Sprintf("clocks of redis %v jump %v forward", idx, jump.Round(time.Millisecond)), nil
}

// jumpRedisClock does to one Redis server's keys what a forward jump of
// its wall clock by d does: keys whose remaining TTL is at most d expire,
// the others lose d. Keys without a TTL (redlock's token counters) keep.
func jumpRedisClock(addr string, d time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const script = `
local jump = tonumber(ARGV[1])
local n = 0
for _, k in ipairs(redis.call('KEYS', '*')) do
  local ttl = redis.call('PTTL', k)
  if ttl > 0 then
    if ttl <= jump then redis.call('DEL', k) else redis.call('PEXPIRE', k, ttl - jump) end
    n = n + 1
  end
end
return n`
	if err := c.Eval(ctx, script, nil, d.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("jumping the clock of redis %s: %w", addr, err)
	}
	return nil
}

func postgresKill(env Env, _ *rand.Rand, _ time.Duration) (func() error, string, error) {
	pg := env.S.PG
	pg.Kill()
	return func() error { return healing("restarting postgres", pg.Restart) }, "SIGKILL postgres", nil
}

func postgresPause(env Env, _ *rand.Rand, _ time.Duration) (func() error, string, error) {
	pg := env.S.PG
	if err := pg.Pause(); err != nil {
		return nil, "", err
	}
	return func() error { return healing("resuming postgres", pg.Resume) }, "SIGSTOP postgres", nil
}

func postgresPartition(env Env, _ *rand.Rand, _ time.Duration) (func() error, string, error) {
	return cutAll([]*proxy.Proxy{env.S.PGLink}), "cut clients from postgres", nil
}

// postgresClock jumps the server's clock forward through libfaketime, in
// whole seconds (its granularity); the jump is not undone.
func postgresClock(env Env, rng *rand.Rand, ttl time.Duration) (func() error, string, error) {
	clock := env.S.PGClock
	jump := provision.Between(rng, 2*ttl, 4*ttl).Round(time.Second)
	if err := clock.Jump(jump); err != nil {
		return nil, "", err
	}
	return func() error { return nil }, fmt.Sprintf("the server's clock jumps %v forward (now %v ahead)", jump, clock.Offset()), nil
}

// etcdMember picks a random etcd member.
func etcdMember(s *provision.Servers, rng *rand.Rand) (*servers.EtcdMember, string) {
	m := provision.Pick(rng, s.EtcdProcs.Members)
	return m, m.Name
}

func etcdKill(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	m, who := etcdMember(env.S, rng)
	m.Kill()
	return func() error { return healing("restarting "+who, m.Restart) }, "SIGKILL " + who, nil
}

func etcdPause(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	m, who := etcdMember(env.S, rng)
	if err := m.Pause(); err != nil {
		return nil, "", err
	}
	return func() error { return healing("resuming "+who, m.Resume) }, "SIGSTOP " + who, nil
}

// etcdPartition cuts two members from each other, the third bridging
// them, or (one time in two, and where the members' peer links have no
// proxies) the clients from one to all but one of the members.
//
// etcd's members each advertise one peer URL, which every peer dials, so
// the proxies are per member, not per pair: cutting member a's proxy stops
// every dial to a. Member x receives y's messages over a stream that x
// dials at y, or, when that stream is down, as posts that y dials at x.
// With the proxies of a and b cut, neither can reach the other either way,
// while a and c still talk over connections a dials (its stream from c,
// its posts to c), and b and c likewise: the bridge. No other shape can be
// cut this way without isolating every member.
func etcdPartition(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	if peers := env.S.EtcdPeerLinks; len(peers) >= 3 && rng.IntN(2) == 0 {
		perm := rng.Perm(len(peers))
		a, b := perm[0], perm[1]
		ms := env.S.EtcdProcs.Members
		var bridges []string
		for _, c := range perm[2:] {
			bridges = append(bridges, ms[c].Name)
		}
		return cutAll([]*proxy.Proxy{peers[a], peers[b]}),
			fmt.Sprintf("cut %s from %s (no peer reaches their peer ports); %s bridges them", ms[a].Name, ms[b].Name, strings.Join(bridges, ", ")), nil
	}
	ps := env.S.EtcdLinks
	n := 1 + rng.IntN(len(ps)-1)
	idx := rng.Perm(len(ps))[:n]
	cut := make([]*proxy.Proxy, n)
	for k, i := range idx {
		cut[k] = ps[i]
	}
	return cutAll(cut), fmt.Sprintf("cut clients from etcd members %v", idx), nil
}

func zkMember(s *provision.Servers, rng *rand.Rand) (*servers.ZooKeeperMember, string) {
	i := rng.IntN(len(s.ZKProcs.Members))
	return s.ZKProcs.Members[i], fmt.Sprintf("zookeeper member %d", i)
}

func zkKill(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	m, who := zkMember(env.S, rng)
	m.Kill()
	return func() error { return healing("restarting "+who, m.Restart) }, "SIGKILL " + who, nil
}

func zkPause(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	m, who := zkMember(env.S, rng)
	if err := m.Pause(); err != nil {
		return nil, "", err
	}
	return func() error { return healing("resuming "+who, m.Resume) }, "SIGSTOP " + who, nil
}

// zkPartition cuts the clients from one to all but one of the servers.
func zkPartition(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	ps := env.S.ZKLinks
	n := 1 + rng.IntN(len(ps)-1)
	idx := rng.Perm(len(ps))[:n]
	cut := make([]*proxy.Proxy, n)
	for k, i := range idx {
		cut[k] = ps[i]
	}
	return cutAll(cut), fmt.Sprintf("cut clients from ZooKeeper servers %v", idx), nil
}
