package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/internal/backends"
	"github.com/lockgate/lockgate/internal/servers"
	"github.com/lockgate/lockgate/lock"
)

// Fault names, as `--faults` spells them.
const (
	FaultKill        = "kill"
	FaultPause       = "pause"
	FaultPartition   = "partition"
	FaultClock       = "clock"
	FaultClientPause = "client-pause"
)

// Faults lists every fault.
var Faults = []string{FaultKill, FaultPause, FaultPartition, FaultClock, FaultClientPause}

// injector injects one fault into a target and returns how to heal it and
// what it did. Server faults (internal/servers) return their errors.
type injector func(rng *rand.Rand, ttl time.Duration) (heal func() error, what string, err error)

// target is one backend's servers, provisioned for a campaign (behind
// proxies: ProvisionOptions.Faults), with the faults it supports.
type target struct {
	backend   string
	s         *Servers
	newClient func() (lock.Locker, error)
	faults    map[string]injector
	// notes say how a fault is realised on this backend where that is not
	// obvious (e.g. an emulated clock jump).
	notes map[string]string
}

func (t *target) close() { t.s.Close() }

// do runs a server fault's heal and says what failed.
func (t *target) do(what string, f func() error) error {
	if err := f(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// campaignClients tunes the campaign's clients, each a Locker of its own
// (backends.Open). Campaign servers fail on purpose, so a client should
// give up on a dead path and let its lease go sooner than a production one
// would: the SDK's requests time out after 5 s (not 10), and an etcd
// session lives 2 s past its client's last keep-alive. Each PostgreSQL
// client pools 4 connections, not sqllock's 16: the campaign's 8 clients
// at 16 would pass PostgreSQL's default max_connections of 100.
var campaignClients = backends.Options{RequestTimeout: 5 * time.Second, PoolSize: 4, SessionTTL: 2 * time.Second}

// campaignOpenTimeout bounds opening one campaign client (PostgreSQL's
// pool dials at once; the other backends connect lazily).
const campaignOpenTimeout = 30 * time.Second

// startTarget provisions backend's servers for faults and defines the
// faults and the campaign's clients on them.
func startTarget(ctx context.Context, backend, lockgate string, log io.Writer) (*target, error) {
	s, err := Provision(ctx, []string{backend}, ProvisionOptions{Lockgate: lockgate, Log: log, Faults: true})
	if err != nil {
		return nil, err
	}
	t := &target{backend: backend, s: s, faults: map[string]injector{}, notes: map[string]string{}}
	t.newClient = func() (lock.Locker, error) {
		ctx, cancel := context.WithTimeout(context.Background(), campaignOpenTimeout)
		defer cancel()
		return backends.Open(ctx, backend, backends.Spec(s.Spec), campaignClients)
	}
	switch backend {
	case Raft:
		t.raftFaults()
	case Redlock:
		t.redlockFaults()
	case Postgres:
		t.postgresFaults()
	case Etcd:
		t.etcdFaults()
	}
	return t, nil
}

// pick returns a random element of xs.
func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

// between returns a random duration in [lo, hi).
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// cutAll cuts ps and returns the heal of all of them.
func cutAll(ps []*Proxy) func() error {
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

func (t *target) raftFaults() {
	rl, api, peer := t.s.RaftProcs, t.s.RaftAPILinks, t.s.RaftPeerLinks
	// victim is the leader, or (one time in two for kill) a random node.
	victim := func(rng *rand.Rand, anyNode bool) (*servers.RaftNode, int, string) {
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
	t.faults[FaultKill] = func(rng *rand.Rand, ttl time.Duration) (func() error, string, error) {
		nd, _, who := victim(rng, true)
		nd.Kill()
		return func() error { return t.do("restarting "+who, nd.Restart) }, "SIGKILL " + who, nil
	}
	t.faults[FaultPause] = func(rng *rand.Rand, ttl time.Duration) (func() error, string, error) {
		nd, _, who := victim(rng, false)
		if err := nd.Pause(); err != nil {
			return nil, "", err
		}
		return func() error { return t.do("resuming "+who, nd.Resume) }, "SIGSTOP " + who, nil
	}
	t.faults[FaultPartition] = func(rng *rand.Rand, ttl time.Duration) (func() error, string, error) {
		_, i, who := victim(rng, rng.IntN(2) == 0) // the leader, or a random node: minority | majority
		var cut []*Proxy
		for j := range rl.Nodes {
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
	t.faults[FaultClock] = func(rng *rand.Rand, ttl time.Duration) (func() error, string, error) {
		nd, _, who := victim(rng, false)
		jump := between(rng, ttl, 3*ttl)
		if err := skewRaftClock(nd.APIAddr, jump); err != nil {
			return nil, "", err
		}
		return func() error { return skewRaftClock(nd.APIAddr, 0) },
			fmt.Sprintf("clock of %s jumps %v forward", who, jump.Round(time.Millisecond)), nil
	}
	t.notes[FaultClock] = "the node's leader clock is shifted through its fault-injection endpoint (Go binaries ignore libfaketime)"
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

func (t *target) redlockFaults() {
	rs, ps := t.s.Redis, t.s.RedisLinks
	t.faults[FaultKill] = func(rng *rand.Rand, ttl time.Duration) (func() error, string, error) {
		i := rng.IntN(len(rs))
		rs[i].Kill()
		return func() error { return t.do("restarting redis", rs[i].Restart) },
			fmt.Sprintf("SIGKILL redis %d (restarts empty: no persistence)", i), nil
	}
	t.faults[FaultPause] = func(rng *rand.Rand, ttl time.Duration) (func() error, string, error) {
		i := rng.IntN(len(rs))
		if err := rs[i].Pause(); err != nil {
			return nil, "", err
		}
		return func() error { return t.do("resuming redis", rs[i].Resume) }, fmt.Sprintf("SIGSTOP redis %d", i), nil
	}
	t.faults[FaultPartition] = func(rng *rand.Rand, ttl time.Duration) (func() error, string, error) {
		n := 1 + rng.IntN(len(rs)/2) // a minority: the quorum survives
		idx := rng.Perm(len(rs))[:n]
		cut := make([]*Proxy, n)
		for k, i := range idx {
			cut[k] = ps[i]
		}
		return cutAll(cut), fmt.Sprintf("cut clients from redis %v", idx), nil
	}
	t.faults[FaultClock] = func(rng *rand.Rand, ttl time.Duration) (func() error, string, error) {
		jump := between(rng, 2*ttl, 4*ttl)
		idx := rng.Perm(len(rs))[:len(rs)/2+1] // a quorum's clocks jump
		for _, i := range idx {
			if err := jumpRedisClock(rs[i].Addr, jump); err != nil {
				return nil, "", err
			}
		}
		return func() error { return nil }, fmt.Sprintf("clocks of redis %v jump %v forward", idx, jump.Round(time.Millisecond)), nil
	}
	t.notes[FaultClock] = "emulated: libfaketime cannot run Debian's redis-server (its jemalloc recurses into " +
		"clock_gettime during libfaketime's start, wolfcw/libfaketime#130), so every key's remaining TTL on the " +
		"node is shortened by the jump, which is what a forward wall-clock step does to Redis expiry"
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

func (t *target) postgresFaults() {
	pg, p, clock := t.s.PG, t.s.PGLink, t.s.PGClock
	t.faults[FaultKill] = func(rng *rand.Rand, ttl time.Duration) (func() error, string, error) {
		pg.Kill()
		return func() error { return t.do("restarting postgres", pg.Restart) }, "SIGKILL postgres", nil
	}
	t.faults[FaultPause] = func(rng *rand.Rand, ttl time.Duration) (func() error, string, error) {
		if err := pg.Pause(); err != nil {
			return nil, "", err
		}
		return func() error { return t.do("resuming postgres", pg.Resume) }, "SIGSTOP postgres", nil
	}
	t.faults[FaultPartition] = func(rng *rand.Rand, ttl time.Duration) (func() error, string, error) {
		return cutAll([]*Proxy{p}), "cut clients from postgres", nil
	}
	t.faults[FaultClock] = func(rng *rand.Rand, ttl time.Duration) (func() error, string, error) {
		jump := between(rng, 2*ttl, 4*ttl).Round(time.Second) // libfaketime: whole seconds
		if err := clock.Jump(jump); err != nil {
			return nil, "", err
		}
		return func() error { return nil }, fmt.Sprintf("the server's clock jumps %v forward (now %v ahead)", jump, clock.Offset()), nil
	}
	t.notes[FaultClock] = "libfaketime shifts the server's wall clock (clock_timestamp()), not its monotonic clock; a jump takes effect within a second"
}

func (t *target) etcdFaults() {
	e, ps := t.s.EtcdProcs, t.s.EtcdLinks
	member := func(rng *rand.Rand) (*servers.EtcdMember, string) {
		m := pick(rng, e.Members)
		return m, m.Name
	}
	t.faults[FaultKill] = func(rng *rand.Rand, ttl time.Duration) (func() error, string, error) {
		m, who := member(rng)
		m.Kill()
		return func() error { return t.do("restarting "+who, m.Restart) }, "SIGKILL " + who, nil
	}
	t.faults[FaultPause] = func(rng *rand.Rand, ttl time.Duration) (func() error, string, error) {
		m, who := member(rng)
		if err := m.Pause(); err != nil {
			return nil, "", err
		}
		return func() error { return t.do("resuming "+who, m.Resume) }, "SIGSTOP " + who, nil
	}
	t.faults[FaultPartition] = func(rng *rand.Rand, ttl time.Duration) (func() error, string, error) {
		n := 1 + rng.IntN(len(ps)-1)
		idx := rng.Perm(len(ps))[:n]
		cut := make([]*Proxy, n)
		for k, i := range idx {
			cut[k] = ps[i]
		}
		return cutAll(cut), fmt.Sprintf("cut clients from etcd members %v", idx), nil
	}
	t.notes[FaultPartition] = "client↔server links only: etcd's peers dial each other directly"
}
