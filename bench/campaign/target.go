package campaign

import (
	"context"
	"io"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/internal/backends"
	"github.com/lockgate/lockgate/lock"
)

// Target is one backend's servers, provisioned for a campaign (behind
// proxies: ProvisionOptions.Faults), and how to open its clients. The
// faults it can take are in faultKinds.
type Target struct {
	backend string
	s       *provision.Servers
	// newClient opens client i, and returns its own links when the
	// backend's locks live on a client session (see clientLinks).
	newClient func(i int) (lock.Locker, provision.ClientLinks, error)
	// cached reports whether client i runs with the SDK's lease cache
	// (nil: none); each campaign sets it (cache.go).
	cached func(i int) bool
}

func (t *Target) Close() { t.s.Close() }

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

// StartTarget provisions backend's servers for faults and defines the
// campaign's clients on them.
func StartTarget(ctx context.Context, backend, lockgate string, log io.Writer) (*Target, error) {
	s, err := provision.Provision(ctx, []string{backend}, provision.ProvisionOptions{Lockgate: lockgate, Log: log, Faults: true})
	if err != nil {
		return nil, err
	}
	t := &Target{backend: backend, s: s}
	t.newClient = func(i int) (lock.Locker, provision.ClientLinks, error) {
		ctx, cancel := context.WithTimeout(context.Background(), campaignOpenTimeout)
		defer cancel()
		spec := s.Spec
		var links provision.ClientLinks
		if provision.InfoOf(backend).Caps.Session {
			if spec, links, err = s.OwnLinks(backend, i, spec); err != nil {
				return nil, nil, err
			}
		}
		opts := campaignClients
		opts.CacheLeases = t.cached != nil && t.cached(i)
		l, err := backends.Open(ctx, backend, backends.Spec(spec), opts)
		return l, links, err
	}
	return t, nil
}
