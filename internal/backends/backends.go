// Package backends is the one table of lockgate's backends: the names
// `--backend` spells (raft, redlock, postgres, etcd), the servers each one
// needs, and how to open a lock.Locker over them. `lockgate serve`,
// `lockgate-bench latency` and `lockgate-bench chaos` all open their Lockers
// here, so a new backend is one entry in this package rather than a case in
// each of them. The peer libraries the bench measures beside ours join the
// table from internal/peers (Register), which `lockgate serve` does not
// link.
//
// It is internal because it is the command line's table, not a library API:
// a program that embeds lockgate picks a backend by importing its package
// (redlock.New, sqllock.New, …), as go-redsync's users import one driver
// package, and does not link the others.
package backends

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// Backend names, as `--backend` spells them: lockgate's own backends.
const (
	// Raft is raftlock, lockgate's own lock service. Open reaches its
	// nodes through the SDK: a raftlock node serves the gateway protocol
	// itself, and its nodes run as processes of their own (`lockgate
	// node`), or embedded in `lockgate serve`.
	Raft = "raft"
	// Redlock is Redlock over independent Redis masters (variant single:
	// plain single-Redis locking on the first of them).
	Redlock = "redlock"
	// Postgres is sqllock: PostgreSQL row locks.
	Postgres = "postgres"
	// Etcd is zklike: the ZooKeeper lock recipe on an etcd cluster.
	Etcd = "etcd"
)

// Peer library names: the locks lockgate's users would otherwise pick,
// which the bench measures beside ours (internal/peers).
const (
	EtcdMutex  = "etcd-mutex"
	Redsync    = "redsync"
	Redislock  = "redislock"
	PGAdvisory = "pg-advisory"
	ZooKeeper  = "zookeeper"
)

// Server kinds: what a backend runs on. Backends of one kind share the
// servers a bench run starts, and the faults that apply to them.
const (
	KindRaft      = "raft"
	KindRedis     = "redis"
	KindPostgres  = "postgres"
	KindEtcd      = "etcd"
	KindZooKeeper = "zookeeper"
)

// entry is everything the command line knows about one backend.
type entry struct {
	name string
	kind string
	// peerOf names the backend of ours this peer library is compared
	// with ("" for one of ours).
	peerOf string
	caps   Caps
	// variants are the modes it can run in; the first is the default,
	// the mode its users run.
	variants []variant
	// serve is the variant a gateway serves by default ("": the first).
	// A gateway's clients come and go while the gateway lives on, so it
	// needs each lock to end at its own TTL, whatever the bench's default.
	serve string
}

// variant is one mode of a backend.
type variant struct {
	name string
	// mode says in a few words how the Locker is run, for the reports.
	mode string
	// session: its locks live on a client session (Caps.Session).
	session bool
	open    func(ctx context.Context, spec Spec, opts Options) (lock.Locker, error)
}

// kinds says, per server kind, how many servers a Spec names and what one
// is called in Describe ("" when the count says nothing).
var kinds = map[string]struct {
	servers func(Spec) int
	unit    string
}{
	KindRaft:      {func(sp Spec) int { return len(sp.Raft) }, "nodes"},
	KindRedis:     {func(sp Spec) int { return len(sp.Redlock) }, "Redis masters"},
	KindPostgres:  {func(sp Spec) int { return min(len(sp.Postgres), 1) }, ""},
	KindEtcd:      {func(sp Spec) int { return len(sp.Etcd) }, "endpoints"},
	KindZooKeeper: {func(sp Spec) int { return len(sp.ZooKeeper) }, "ZooKeeper servers"},
}

// Names lists every backend, ours first, in the order reports show them.
var Names = func() []string {
	var ns []string
	for _, e := range table {
		ns = append(ns, e.name)
	}
	return ns
}()

// Ours lists lockgate's own backends: the ones `lockgate serve` serves.
var Ours = func() []string {
	var ns []string
	for _, e := range table {
		if e.peerOf == "" {
			ns = append(ns, e.name)
		}
	}
	return ns
}()

// Info describes one backend in one mode, as a reference names it.
type Info struct {
	// Ref is the canonical reference, "name:variant".
	Ref     string `json:"ref"`
	Name    string `json:"name"`
	Variant string `json:"variant"`
	// Mode says how the Locker is run, in a few words.
	Mode string `json:"mode"`
	// Kind is the server kind it runs on.
	Kind string `json:"kind"`
	// PeerOf names the backend of ours a peer library is compared with;
	// empty for ours.
	PeerOf string `json:"peerOf,omitempty"`
	Caps   Caps   `json:"caps"`
}

// Parse resolves a reference, "name" (its default mode) or
// "name:variant". The error matches ErrUnknownBackend.
func Parse(ref string) (Info, error) {
	name, vname, hasVariant := strings.Cut(ref, ":")
	e, err := lookup(name)
	if err != nil {
		return Info{}, err
	}
	v := e.variants[0]
	if hasVariant {
		var names []string
		found := false
		for _, c := range e.variants {
			names = append(names, c.name)
			if c.name == vname {
				v, found = c, true
			}
		}
		if !found {
			return Info{}, fmt.Errorf("%w: %s has no variant %q (want %s)", ErrUnknownBackend, name, vname, strings.Join(names, ", "))
		}
	}
	caps := e.caps
	caps.Session = v.session
	return Info{Ref: e.name + ":" + v.name, Name: e.name, Variant: v.name, Mode: v.mode,
		Kind: e.kind, PeerOf: e.peerOf, Caps: caps}, nil
}

// ForServing resolves the reference `lockgate serve --backend` names: one
// of ours (a peer library is the bench's, not a lock service), in the
// variant given, else the one a gateway needs.
func ForServing(ref string) (Info, error) {
	info, err := Parse(ref)
	if err != nil {
		return Info{}, err
	}
	if info.PeerOf != "" {
		return Info{}, fmt.Errorf("%w: %s is a peer library that lockgate's bench compares against; serve one of %s",
			ErrUnknownBackend, info.Name, strings.Join(Ours, ", "))
	}
	if e, _ := lookup(info.Name); !strings.Contains(ref, ":") && e.serve != "" {
		return Parse(info.Name + ":" + e.serve)
	}
	return info, nil
}

// Variants lists the references of every mode of every backend.
func Variants() []string {
	var refs []string
	for _, e := range table {
		for _, v := range e.variants {
			refs = append(refs, e.name+":"+v.name)
		}
	}
	return refs
}

// lookup returns backend's entry, or an error matching ErrUnknownBackend.
func lookup(backend string) (entry, error) {
	for _, e := range table {
		if e.name == backend {
			return e, nil
		}
	}
	return entry{}, fmt.Errorf("%w %q (want %s)", ErrUnknownBackend, backend, strings.Join(Names, ", "))
}

// variantOf returns the entry and variant a reference names.
func variantOf(ref string) (entry, variant, error) {
	info, err := Parse(ref)
	if err != nil {
		return entry{}, variant{}, err
	}
	e, _ := lookup(info.Name)
	for _, v := range e.variants {
		if v.name == info.Variant {
			return e, v, nil
		}
	}
	panic("unreachable: Parse returned a variant lookup cannot find")
}

var (
	// ErrUnknownBackend: the name is not one of Names.
	ErrUnknownBackend = errors.New("backends: unknown backend")
	// ErrNoServers: the Spec names no servers for the backend asked for.
	ErrNoServers = errors.New("backends: no servers given")
)

// Spec names the servers of each backend. Its field set is the one
// bench.Spec has, so that a bench.Spec converts to it.
type Spec struct {
	Raft     []string // raftlock nodes' API addresses
	Redlock  []string // independent Redis masters
	Postgres string   // connection URL
	Etcd     []string // client URLs
	// ZooKeeper are the ensemble's client addresses (host:port).
	ZooKeeper []string
}

// Has reports whether the Spec names servers for backend (false for a
// name that is no backend).
func (sp Spec) Has(backend string) bool {
	info, err := Parse(backend)
	return err == nil && kinds[info.Kind].servers(sp) > 0
}

// Options tunes the Lockers Open builds. The zero value is every backend's
// own defaults; a field applies to one backend and the others ignore it.
type Options struct {
	// RequestTimeout is the SDK's per-request timeout (raft); zero keeps
	// client.Options' default.
	RequestTimeout time.Duration
	// PoolSize is the number of pooled connections (postgres); zero keeps
	// sqllock.DefaultPoolSize.
	PoolSize int
	// SessionTTL is the etcd session's TTL (etcd); zero keeps zklike's
	// default.
	SessionTTL time.Duration
	// CacheLeases turns on the SDK's lease cache (raft:
	// client.Options.CacheLeases, docs/lease-cache.md).
	CacheLeases bool
}

// Check returns an error matching ErrUnknownBackend that names the first
// of names that is not a backend.
func Check(refs ...string) error {
	for _, b := range refs {
		if _, err := Parse(b); err != nil {
			return err
		}
	}
	return nil
}

// Open returns a new Locker of backend over the servers spec names for
// it: its own connections, as a separate process would have. ctx bounds
// the connecting (PostgreSQL's pool checks its server at once; the others
// connect lazily). The error matches ErrUnknownBackend or ErrNoServers, or
// is the backend's own.
func Open(ctx context.Context, backend string, spec Spec, opts Options) (lock.Locker, error) {
	e, v, err := variantOf(backend)
	if err != nil {
		return nil, err
	}
	if kinds[e.kind].servers(spec) == 0 {
		return nil, fmt.Errorf("%w for %s", ErrNoServers, backend)
	}
	return v.open(ctx, spec, opts)
}

// Describe says in a few words what Open connects to for backend, for
// logs and banners: "redlock over 3 Redis masters".
func Describe(backend string, spec Spec) string {
	info, err := Parse(backend)
	if err != nil || kinds[info.Kind].unit == "" {
		return backend
	}
	k := kinds[info.Kind]
	return fmt.Sprintf("%s over %d %s", backend, k.servers(spec), k.unit)
}
