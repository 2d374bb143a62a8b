// Package backends is the one table of lockgate's backends: the names
// `--backend` spells (raft, redlock, postgres, etcd), the servers each one
// needs, and how to open a lock.Locker over them. `lockgate serve`, `lockgate
// bench latency` and `lockgate bench chaos` all open their Lockers here, so a
// new backend is one entry in this package rather than a case in each of
// them.
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

	"github.com/lockgate/lockgate/backend/redlock"
	"github.com/lockgate/lockgate/backend/sqllock"
	"github.com/lockgate/lockgate/backend/zklike"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
)

// Backend names, as `--backend` spells them.
const (
	// Raft is raftlock, lockgate's own lock service. Open reaches its
	// nodes through the SDK: a raftlock node serves the gateway protocol
	// itself, and its nodes run as processes of their own (`lockgate
	// node`), or embedded in `lockgate serve`.
	Raft = "raft"
	// Redlock is Redlock over independent Redis masters (one: plain
	// single-Redis locking).
	Redlock = "redlock"
	// Postgres is sqllock: PostgreSQL row locks.
	Postgres = "postgres"
	// Etcd is zklike: the ZooKeeper lock recipe on an etcd cluster.
	Etcd = "etcd"
)

// entry is everything the command line knows about one backend.
type entry struct {
	name string
	// servers is how many servers spec names for the backend (0: none).
	servers func(Spec) int
	// unit names one server in Describe ("Redis masters"); "" when the
	// count says nothing (one PostgreSQL URL).
	unit string
	open func(ctx context.Context, spec Spec, opts Options) (lock.Locker, error)
}

// table is the one table of backends, in the order reports show them.
var table = []entry{
	{Raft, func(sp Spec) int { return len(sp.Raft) }, "nodes",
		func(_ context.Context, sp Spec, o Options) (lock.Locker, error) {
			return client.New(sp.Raft, client.Options{RequestTimeout: o.RequestTimeout})
		}},
	{Redlock, func(sp Spec) int { return len(sp.Redlock) }, "Redis masters",
		func(_ context.Context, sp Spec, _ Options) (lock.Locker, error) {
			return redlock.New(redlock.DefaultConfig(sp.Redlock...))
		}},
	{Postgres, func(sp Spec) int { return min(len(sp.Postgres), 1) }, "",
		func(ctx context.Context, sp Spec, o Options) (lock.Locker, error) {
			cfg := sqllock.DefaultConfig(sp.Postgres)
			if o.PoolSize != 0 {
				cfg.PoolSize = o.PoolSize
			}
			return sqllock.New(ctx, cfg)
		}},
	{Etcd, func(sp Spec) int { return len(sp.Etcd) }, "endpoints",
		func(_ context.Context, sp Spec, o Options) (lock.Locker, error) {
			cfg := zklike.DefaultConfig(sp.Etcd...)
			if o.SessionTTL != 0 {
				cfg.SessionTTL = o.SessionTTL
			}
			return zklike.New(cfg)
		}},
}

// Names lists every backend, in the order reports show them.
var Names = func() []string {
	var ns []string
	for _, e := range table {
		ns = append(ns, e.name)
	}
	return ns
}()

// lookup returns backend's entry, or an error matching ErrUnknownBackend.
func lookup(backend string) (entry, error) {
	for _, e := range table {
		if e.name == backend {
			return e, nil
		}
	}
	return entry{}, fmt.Errorf("%w %q (want %s)", ErrUnknownBackend, backend, strings.Join(Names, ", "))
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
}

// Has reports whether the Spec names servers for backend (false for a
// name that is no backend).
func (sp Spec) Has(backend string) bool {
	e, err := lookup(backend)
	return err == nil && e.servers(sp) > 0
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
}

// Check returns an error matching ErrUnknownBackend that names the first
// of names that is not a backend.
func Check(names ...string) error {
	for _, b := range names {
		if _, err := lookup(b); err != nil {
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
	e, err := lookup(backend)
	if err != nil {
		return nil, err
	}
	if e.servers(spec) == 0 {
		return nil, fmt.Errorf("%w for %s", ErrNoServers, backend)
	}
	return e.open(ctx, spec, opts)
}

// Describe says in a few words what Open connects to for backend, for
// logs and banners: "redlock over 3 Redis masters".
func Describe(backend string, spec Spec) string {
	e, err := lookup(backend)
	if err != nil || e.unit == "" {
		return backend
	}
	return fmt.Sprintf("%s over %d %s", backend, e.servers(spec), e.unit)
}
