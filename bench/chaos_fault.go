package bench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/internal/backends"
)

// Fault names, as `--faults` spells them.
const (
	FaultKill        = "kill"
	FaultPause       = "pause"
	FaultPartition   = "partition"
	FaultClock       = "clock"
	FaultClientPause = "client-pause"
)

// ErrFaultUnavailable: a campaign asked for a fault that does not apply to
// its backend, or for a fault that does not exist.
var ErrFaultUnavailable = errors.New("bench: fault not available")

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
type injector func(env faultEnv, rng *rand.Rand, ttl time.Duration) (heal func() error, what string, err error)

// faultEnv is what a fault acts on: the campaign's servers and proxies,
// and its clients.
type faultEnv struct {
	s *Servers
	// pauses counts armed client pauses (workload.takePause).
	pauses *atomic.Int32
}

// Available reports whether the fault applies to backend.
func (f *Fault) Available(backend string) bool {
	_, ok := f.on[kindOf(backend)]
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
	if f.Name == FaultClientPause && !infoOf(backend).Caps.TTL {
		return false
	}
	return f.on[kindOf(backend)].breaksSafety
}

// Note says how the fault is realised on backend, or "".
func (f *Fault) Note(backend string) string { return f.on[kindOf(backend)].note }

// check returns an error matching ErrFaultUnavailable unless the fault
// applies to backend.
func (f *Fault) check(backend string) error {
	if f.Available(backend) {
		return nil
	}
	if why := f.unavailable[kindOf(backend)]; why != "" {
		return fmt.Errorf("%w: %s on %s: %s", ErrFaultUnavailable, f.Name, backend, why)
	}
	return fmt.Errorf("%w: %s on %s", ErrFaultUnavailable, f.Name, backend)
}

// Inject injects the fault on backend and returns its heal, what it did,
// and how long to hold it before healing.
func (f *Fault) Inject(backend string, env faultEnv, rng *rand.Rand, ttl time.Duration) (heal func() error, what string, hold time.Duration, err error) {
	if err := f.check(backend); err != nil {
		return nil, "", 0, err
	}
	if heal, what, err = f.on[kindOf(backend)].inject(env, rng, ttl); err != nil {
		return nil, "", 0, err
	}
	if f.hold != nil {
		hold = f.hold(rng, ttl)
	}
	return heal, what, hold, nil
}

// holdFixed holds a fault for a random duration in [lo, hi).
func holdFixed(lo, hi time.Duration) func(*rand.Rand, time.Duration) time.Duration {
	return func(rng *rand.Rand, _ time.Duration) time.Duration { return between(rng, lo, hi) }
}

// faultKinds is every fault, in the order of Faults.
var faultKinds = []*Fault{
	{
		Name: FaultKill,
		on: map[string]realisation{
			backends.KindRaft: {inject: raftKill}, backends.KindRedis: {inject: redisKill},
			backends.KindPostgres: {inject: postgresKill}, backends.KindEtcd: {inject: etcdKill},
			backends.KindZooKeeper: {inject: zkKill},
		},
		hold: holdFixed(time.Second, 3*time.Second),
	},
	{
		Name: FaultPause,
		on: map[string]realisation{
			backends.KindRaft: {inject: raftPause}, backends.KindRedis: {inject: redisPause},
			backends.KindPostgres: {inject: postgresPause}, backends.KindEtcd: {inject: etcdPause},
			backends.KindZooKeeper: {inject: zkPause},
		},
		// TTL/2 to 2 × TTL: long enough that a paused leader's leases
		// expire while it sleeps.
		hold: func(rng *rand.Rand, ttl time.Duration) time.Duration { return between(rng, ttl/2, 2*ttl) },
	},
	{
		Name: FaultPartition,
		on: map[string]realisation{
			backends.KindRaft: {inject: raftPartition}, backends.KindRedis: {inject: redisPartition},
			backends.KindPostgres:  {inject: postgresPartition},
			backends.KindEtcd:      {inject: etcdPartition, note: "client↔server links only: etcd's peers dial each other directly"},
			backends.KindZooKeeper: {inject: zkPartition, note: "client↔server links only: ZooKeeper's servers dial each other directly"},
		},
		hold: holdFixed(time.Second, 3*time.Second),
	},
	{
		Name: FaultClock,
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
		Name: FaultClientPause,
		on: map[string]realisation{
			backends.KindRaft: {inject: clientPause, breaksSafety: true}, backends.KindRedis: {inject: clientPause, breaksSafety: true},
			backends.KindPostgres: {inject: clientPause, breaksSafety: true}, backends.KindEtcd: {inject: clientPause, breaksSafety: true},
			backends.KindZooKeeper: {inject: clientPause, breaksSafety: true},
		},
	},
}

// Faults lists every fault's name.
var Faults = func() []string {
	names := make([]string, len(faultKinds))
	for i, f := range faultKinds {
		names[i] = f.Name
	}
	return names
}()

// FaultByName returns the fault called name; the error matches
// ErrFaultUnavailable if there is none.
func FaultByName(name string) (*Fault, error) {
	for _, f := range faultKinds {
		if f.Name == name {
			return f, nil
		}
	}
	return nil, fmt.Errorf("%w: unknown fault %q (want %s)", ErrFaultUnavailable, name, strings.Join(Faults, ", "))
}

// clientPause arms a client pause: the next client to take a lock passes
// its deadline check, stalls past its TTL, then writes. It heals itself.
func clientPause(env faultEnv, _ *rand.Rand, _ time.Duration) (func() error, string, error) {
	env.pauses.Add(1)
	return func() error { return nil }, "the next client to take a lock stalls 1.5 × TTL before writing", nil
}
