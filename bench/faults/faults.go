// Package faults is every fault the bench injects, by one name each
// (kill, pause, partition, clock, client-pause, the raftlock-only ones:
// partitions of the leader, a majority or one direction, slow and lossy
// links, membership changes, clock skews, a full disk, killing and
// restarting every server), with how each is realised on every server
// kind, whether it is available there, and whether it breaks the
// backend's safety by design (Fault.BreaksSafety).
package faults

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/internal/backends"
)

// Fault names, as `--faults` spells them.
const (
	Kill        = "kill"
	Pause       = "pause"
	Partition   = "partition"
	Clock       = "clock"
	ClientPause = "client-pause"

	PartitionLeader   = "partition-leader"
	PartitionMajority = "partition-majority"
	PartitionBridge   = "partition-bridge"
	PartitionOneWay   = "partition-oneway"
	SlowNet           = "slow-net"
	LossyNet          = "lossy-net"
	Membership        = "membership"
	ClockSmall        = "clock-small"
	ClockBig          = "clock-big"
	KillAll           = "kill-all"
	DiskFull          = "disk-full"
	Restart           = "restart"
)

// FaultAll, in a list of faults, stands for every fault that applies to
// the backend (ExpandFaults).
const All = "all"

// ErrFaultUnavailable: a campaign asked for a fault that does not apply to
// its backend, or for a fault that does not exist.
var ErrUnavailable = errors.New("bench: fault not available")

// Fault is one kind of fault a chaos campaign injects, after the
// failpoints of etcd's robustness tests: a name, the backends it applies
// to (with, for each, whether it is expected to break mutual exclusion
// there and how it is realised), how long it is held, and an Inject that
// returns its heal. Adding a fault kind or a backend is a row here, not a
// special case in RunChaos.
type Fault struct {
	Name string
	// on says how the fault is realised on each server kind it applies
	// to (every backend of the kind: redlock, redsync and redislock share
	// Redis's).
	on map[string]realisation
	// unavailable says why the fault does not apply to a server kind,
	// where the reason is worth telling the user.
	unavailable map[string]string
	// hold draws how long the fault is held before its heal (nil: it is
	// not held; it acts once, as an armed client pause does).
	hold func(rng *rand.Rand, ttl time.Duration) time.Duration
	// probe, when not nil, says why the fault cannot be injected on this
	// machine (say, it needs root to mount a filesystem), or nil.
	probe func() error
}

// realisation is one fault on one backend.
type realisation struct {
	inject injector
	// breaksSafety: a campaign that injects this fault and shows no
	// overlap tested nothing (ChaosReport.Valid).
	breaksSafety bool
	// note says how the fault is realised where that is not obvious (e.g.
	// an emulated clock jump); it goes into the report.
	note string
}

// injector injects one fault and returns how to heal it and what it did.
// Server faults (internal/servers) return their errors.
type injector func(env Env, rng *rand.Rand, ttl time.Duration) (heal func() error, what string, err error)

// faultEnv is what a fault acts on: the campaign's servers and proxies,
// and its clients.
type Env struct {
	S *provision.Servers
	// Pauses counts armed client pauses (workload.takePause).
	Pauses *atomic.Int32
}

// Available reports whether the fault applies to backend.
func (f *Fault) Available(backend string) bool {
	_, ok := f.on[provision.KindOf(backend)]
	return ok
}

// BreaksSafety reports whether the fault is expected to break mutual
// exclusion on backend: a client paused past its TTL breaks every
// lease-based lock (that is what fencing is for), and a forward jump of a
// quorum's clocks breaks Redlock.
//
// A lock without a TTL (pg-advisory) is not broken by a client pause: it
// stays held by the paused client as long as its connection lives, which
// costs availability instead. A lock on a client session (Caps.Session) is
// broken once the session's keep-alive stalls too, as in a paused process:
// the pause cuts that client's own links (clientLinks).
func (f *Fault) BreaksSafety(backend string) bool {
	if f.Name == ClientPause && !provision.InfoOf(backend).Caps.TTL {
		return false
	}
	return f.on[provision.KindOf(backend)].breaksSafety
}

// Note says how the fault is realised on backend, or "".
func (f *Fault) Note(backend string) string { return f.on[provision.KindOf(backend)].note }

// Check returns an error matching ErrFaultUnavailable unless the fault
// applies to backend.
func (f *Fault) Check(backend string) error {
	if f.Available(backend) {
		if f.probe != nil {
			if err := f.probe(); err != nil {
				return fmt.Errorf("%w: %s on %s: %v", ErrUnavailable, f.Name, backend, err)
			}
		}
		return nil
	}
	if why := f.unavailable[provision.KindOf(backend)]; why != "" {
		return fmt.Errorf("%w: %s on %s: %s", ErrUnavailable, f.Name, backend, why)
	}
	return fmt.Errorf("%w: %s on %s", ErrUnavailable, f.Name, backend)
}

// Inject injects the fault on backend and returns its heal, what it did,
// and how long to hold it before healing.
func (f *Fault) Inject(backend string, env Env, rng *rand.Rand, ttl time.Duration) (heal func() error, what string, hold time.Duration, err error) {
	if err := f.Check(backend); err != nil {
		return nil, "", 0, err
	}
	if heal, what, err = f.on[provision.KindOf(backend)].inject(env, rng, ttl); err != nil {
		return nil, "", 0, err
	}
	if f.hold != nil {
		hold = f.hold(rng, ttl)
	}
	return heal, what, hold, nil
}

// holdFixed holds a fault for a random duration in [lo, hi).
func holdFixed(lo, hi time.Duration) func(*rand.Rand, time.Duration) time.Duration {
	return func(rng *rand.Rand, _ time.Duration) time.Duration { return provision.Between(rng, lo, hi) }
}

// raftOnly is a fault that only raftlock takes; why says why, for the
// others.
func raftOnly(name string, r realisation, why string, hold func(*rand.Rand, time.Duration) time.Duration) *Fault {
	return &Fault{Name: name, on: map[string]realisation{backends.KindRaft: r}, unavailable: unavailableOffRaft(why), hold: hold}
}

// Why the raft-only faults do not apply elsewhere.
const (
	whyPeerLinks   = "a partition between servers needs raftlock's proxied peer links"
	whyLeaderClock = "the leader-clock faults move raftlock's clock through its fault-injection endpoint; clock covers the other backends"
)

// faultKinds is every fault, in the order of Faults.
var faultKinds = []*Fault{
	{
		Name: Kill,
		on: map[string]realisation{
			backends.KindRaft: {inject: raftKill}, backends.KindRedis: {inject: redisKill},
			backends.KindPostgres: {inject: postgresKill}, backends.KindEtcd: {inject: etcdKill},
			backends.KindZooKeeper: {inject: zkKill},
		},
		hold: holdFixed(time.Second, 3*time.Second),
	},
	{
		Name: Pause,
		on: map[string]realisation{
			backends.KindRaft: {inject: raftPause}, backends.KindRedis: {inject: redisPause},
			backends.KindPostgres: {inject: postgresPause}, backends.KindEtcd: {inject: etcdPause},
			backends.KindZooKeeper: {inject: zkPause},
		},
		// TTL/2 to 2 × TTL: long enough that a paused leader's leases
		// expire while it sleeps.
		hold: func(rng *rand.Rand, ttl time.Duration) time.Duration { return provision.Between(rng, ttl/2, 2*ttl) },
	},
	{
		Name: Partition,
		on: map[string]realisation{
			backends.KindRaft: {inject: raftPartition}, backends.KindRedis: {inject: redisPartition},
			backends.KindPostgres: {inject: postgresPartition},
			backends.KindEtcd: {inject: etcdPartition,
				note: "client↔server links, or two members cut from each other with the third bridging them (the peer links are proxied per member)"},
			backends.KindZooKeeper: {inject: zkPartition, note: "client↔server links only: ZooKeeper's servers dial each other directly"},
		},
		hold: holdFixed(time.Second, 3*time.Second),
	},
	{
		Name: Clock,
		on: map[string]realisation{
			backends.KindRaft: {inject: raftClock,
				note: "the node's leader clock is shifted through its fault-injection endpoint (Go binaries ignore libfaketime)"},
			backends.KindRedis: {inject: redisClock, breaksSafety: true,
				note: "emulated: libfaketime cannot run Debian's redis-server (its jemalloc recurses into " +
					"clock_gettime during libfaketime's start, wolfcw/libfaketime#130), so every key's remaining TTL on the " +
					"node is shortened by the jump, which is what a forward wall-clock step does to Redis expiry"},
			backends.KindPostgres: {inject: postgresClock,
				note: "libfaketime shifts the server's wall clock (clock_timestamp()), not its monotonic clock; a jump takes effect within a second"},
		},
		unavailable: map[string]string{
			backends.KindEtcd:      "not supported (etcd is a Go binary, which libfaketime does not shift, and its leases run on a monotonic timer)",
			backends.KindZooKeeper: "not supported (ZooKeeper runs on the JVM, whose clocks libfaketime does not reliably shift, and its session expiry runs on a monotonic clock)",
		},
		hold: holdFixed(time.Second, 2*time.Second),
	},
	{
		Name: ClientPause,
		on: map[string]realisation{
			backends.KindRaft: {inject: clientPause, breaksSafety: true}, backends.KindRedis: {inject: clientPause, breaksSafety: true},
			backends.KindPostgres: {inject: clientPause, breaksSafety: true}, backends.KindEtcd: {inject: clientPause, breaksSafety: true},
			backends.KindZooKeeper: {inject: clientPause, breaksSafety: true},
		},
	},
	raftOnly(PartitionLeader, realisation{inject: raftPartitionLeader}, whyPeerLinks, holdFixed(time.Second, 3*time.Second)),
	raftOnly(PartitionMajority, realisation{inject: raftPartitionMajority}, whyPeerLinks, holdFixed(time.Second, 3*time.Second)),
	raftOnly(PartitionBridge, realisation{inject: raftPartitionBridge}, whyPeerLinks, holdFixed(time.Second, 3*time.Second)),
	raftOnly(PartitionOneWay, realisation{inject: raftPartitionOneWay,
		note: "one direction of each link black-holed by toxiproxy's timeout toxic; the connections are dropped at the heal"},
		whyPeerLinks, holdFixed(time.Second, 3*time.Second)),
	{
		Name: SlowNet,
		on:   onEveryKind(realisation{inject: slowNet, note: "toxiproxy latency toxic on both directions of every link"}),
		hold: holdFixed(2*time.Second, 4*time.Second),
	},
	{
		Name: LossyNet,
		on: onEveryKind(realisation{inject: lossyNet,
			note: "emulated: TCP hides packet loss, so a random 5–20 % of the streams stall and close (toxiproxy timeout toxic)"}),
		hold: holdFixed(2*time.Second, 4*time.Second),
	},
	raftOnly(Membership, realisation{inject: raftMembership,
		note: "a fourth voter joins, an original node is removed, the leader hands over (graceful restart); the heal restores the three voters"},
		"membership changes are raftlock's API", holdFixed(time.Second, 3*time.Second)),
	raftOnly(ClockSmall, realisation{inject: raftClockSmall,
		note: "the leader's clock steps by at most TTL/100, within the holders' drift allowance"},
		whyLeaderClock, holdFixed(time.Second, 2*time.Second)),
	raftOnly(ClockBig, realisation{inject: raftClock, breaksSafety: true,
		note: "the leader's clock jumps 1–3 TTL forward, beyond the drift allowance: leases expire early, the fence must catch every late write"},
		whyLeaderClock, holdFixed(time.Second, 2*time.Second)),
	{
		Name: KillAll,
		on: map[string]realisation{
			backends.KindRaft: {inject: raftKillAll},
			backends.KindRedis: {inject: redisKillAll, breaksSafety: true,
				note: "every Redis master restarts empty (no persistence): held locks and token counters are lost"},
			backends.KindPostgres:  {inject: postgresKill, note: "one server: the same as kill"},
			backends.KindEtcd:      {inject: etcdKillAll},
			backends.KindZooKeeper: {inject: zkKillAll},
		},
		hold: holdFixed(time.Second, 3*time.Second),
	},
	{
		Name: DiskFull,
		on: map[string]realisation{backends.KindRaft: {inject: raftDiskFull,
			note: "node 1's data directory is on a 256 MiB tmpfs the campaign mounted; the fault fills it, the heal frees it"}},
		unavailable: unavailableOffRaft("only raftlock's nodes are given a filesystem of their own"),
		hold:        holdFixed(time.Second, 3*time.Second),
		probe:       provision.CanMountTmpfs,
	},
	{
		Name: Restart,
		on: map[string]realisation{
			backends.KindRaft: {inject: raftRestart}, backends.KindRedis: {inject: redisRestart},
			backends.KindPostgres: {inject: postgresRestart}, backends.KindEtcd: {inject: etcdRestart},
			backends.KindZooKeeper: {inject: zkRestart},
		},
		hold: holdFixed(time.Second, 3*time.Second),
	},
}

// serverKinds lists every server kind.
var serverKinds = []string{backends.KindRaft, backends.KindRedis, backends.KindPostgres, backends.KindEtcd, backends.KindZooKeeper}

// onEveryKind realises a fault the same way on every server kind.
func onEveryKind(r realisation) map[string]realisation {
	m := map[string]realisation{}
	for _, k := range serverKinds {
		m[k] = r
	}
	return m
}

// unavailableOffRaft gives why as the reason on every kind but raft's.
func unavailableOffRaft(why string) map[string]string {
	m := map[string]string{}
	for _, k := range serverKinds {
		if k != backends.KindRaft {
			m[k] = why
		}
	}
	return m
}

// Faults lists every fault's name.
var Names = func() []string {
	names := make([]string, len(faultKinds))
	for i, f := range faultKinds {
		names[i] = f.Name
	}
	return names
}()

// FaultByName returns the fault called name; the error matches
// ErrFaultUnavailable if there is none.
func ByName(name string) (*Fault, error) {
	for _, f := range faultKinds {
		if f.Name == name {
			return f, nil
		}
	}
	return nil, fmt.Errorf("%w: unknown fault %q (want %s, or %s)", ErrUnavailable, name, strings.Join(Names, ", "), All)
}

// ExpandFaults resolves a `--faults` list for backend: FaultAll ("all")
// stands for every fault that applies to the backend's server kind, can
// be injected on this machine, and lies within what the backend promises
// to survive (not Fault.BreaksSafety there), in the order of Faults (on
// raftlock without clock, which clock-small and clock-big split; disk-full
// only where a tmpfs can be mounted). A campaign under "all" must then
// show no overlap; the faults that break a backend by design (a client
// pause on any lease, clock-big on raftlock, a clock jump or a
// whole-cluster restart on Redis) are asked for by name, alone or beside
// "all". Any other name must be a fault that applies. Duplicates go. The
// error matches ErrFaultUnavailable for a fault that does not exist or
// does not apply.
func Expand(backend string, names []string) ([]string, error) {
	if err := provision.CheckBackends([]string{backend}); err != nil {
		return nil, err
	}
	var out []string
	add := func(n string) {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for _, n := range names {
		if n != All {
			f, err := ByName(n)
			if err != nil {
				return nil, err
			}
			if err := f.Check(backend); err != nil {
				return nil, err
			}
			add(n)
			continue
		}
		for _, f := range faultKinds {
			if f.Name == Clock && provision.KindOf(backend) == backends.KindRaft {
				continue
			}
			if f.Check(backend) == nil && !f.BreaksSafety(backend) {
				add(f.Name)
			}
		}
	}
	return out, nil
}

// clientPause arms a client pause: the next client to take a lock passes
// its deadline check, stalls past its TTL, then writes. It heals itself.
func clientPause(env Env, _ *rand.Rand, _ time.Duration) (func() error, string, error) {
	env.Pauses.Add(1)
	return func() error { return nil }, "the next client to take a lock stalls 1.5 × TTL before writing", nil
}
