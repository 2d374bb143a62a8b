package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// The primitives beyond the mutex over the protocols: shared locks, semaphores,
// lock-delay (options of an acquire), acquireAll (7, 8) and watches (9,
// 10; watch.go). The gateway offers what its Locker offers
// (lock.FeaturesOf, and the MultiLocker and Watcher interfaces for the
// two that need them), announces it in the Lockgate-Features header, and
// answers a request that needs anything else with unsupported before the
// Locker sees it.

// featuresOf is what l offers through the gateway: lock.FeaturesOf, less
// multikey and watch where l lacks the interface they are called through,
// and watchprefix exactly where l is a lock.PrefixWatcher offering watch.
func featuresOf(l lock.Locker) lock.Features {
	f := lock.FeaturesOf(l)
	if _, ok := l.(lock.MultiLocker); !ok {
		f &^= lock.FeatureMultiKey
	}
	if _, ok := l.(lock.Watcher); !ok {
		f &^= lock.FeatureWatch
	}
	// A prefix watch is offered by a PrefixWatcher that offers watch (the
	// interface is the declaration: lock.FeatureWatchPrefix).
	if _, ok := l.(lock.PrefixWatcher); ok && f.Has(lock.FeatureWatch) {
		f |= lock.FeatureWatchPrefix
	} else {
		f &^= lock.FeatureWatchPrefix
	}
	if _, ok := l.(lock.SessionLocker); !ok {
		f &^= lock.FeatureSessions
	}
	return f
}

// featureNames is the Lockgate-Features header's value: "wanted" when the
// Locker signals wanted, then the features' names.
func featureNames(wanted bool, f lock.Features) string {
	var names []string
	if wanted {
		names = append(names, wire.FeatureWanted)
	}
	names = append(names, f.Names()...)
	names = append(names, wire.FeatureTraceparent)
	return strings.Join(names, ",")
}

// announcement is what the gateway offers and the header value that says
// it.
type announcement struct {
	features      lock.Features
	value         string      // the Lockgate-Features header's value
	upgradeHeader http.Header // the same, for the WebSocket upgrade's answer
}

// announce returns what the Locker offers now, rebuilding the header only
// when that changed.
func (g *Gateway) announce() *announcement {
	f := featuresOf(g.l)
	if a := g.announced.Load(); a != nil && a.features == f {
		return a
	}
	a := &announcement{features: f, value: featureNames(g.wanted, f)}
	if a.value != "" {
		a.upgradeHeader = http.Header{wire.FeaturesHeader: {a.value}}
	}
	g.announced.Store(a)
	return a
}

// Features reports what the gateway's Locker offers through it now.
func (g *Gateway) Features() lock.Features { return g.announce().features }

// unsupported is the error of a request that needs what the backend lacks.
func (g *Gateway) unsupported(need lock.Features) *apiError {
	err := kit.CheckSupported(g.backend, g.Features(), need, nil)
	if err == nil {
		return nil
	}
	return toAPIError(err)
}

// lockDelayOption turns a wire lock-delay (ms) into a duration, keeping a
// value out of range out of range without overflowing (validation then
// refuses it with invalid_lock_delay).
func lockDelayOption(ms int64) time.Duration {
	switch {
	case ms < 0:
		return -time.Millisecond
	case ms > int64(lock.MaxLockDelay/time.Millisecond):
		return lock.MaxLockDelay + time.Millisecond
	}
	return time.Duration(ms) * time.Millisecond
}

// modeName is a mode on the wire: "" (absent) for exclusive.
func modeName(m lock.Mode) string {
	if m == lock.ModeExclusive {
		return ""
	}
	return m.String()
}

// misplacedFields refuses fields of the new commands on commands that do
// not take them (keys outside 7 and 8, key on them), as bad_json: a
// misplaced field would otherwise be silently ignored.
func misplacedFields(req wire.Request) *apiError {
	multi := req.CommandType == wire.CmdAcquireAll || req.CommandType == wire.CmdTryAcquireAll
	switch req.CommandType {
	case wire.CmdAcquire, wire.CmdTryAcquire, wire.CmdAcquireAll, wire.CmdTryAcquireAll, wire.CmdRenewSession, wire.CmdCloseSession:
	default:
		if req.SessionID != "" {
			return newError(wire.CodeBadJSON, "sessionId is a field of acquires (1, 5, 7, 8), renewSession (12) and closeSession (13) only")
		}
	}
	switch {
	case req.Keys != nil && !multi:
		return newError(wire.CodeBadJSON, "keys is a field of acquireAll (7) and tryAcquireAll (8) only; use key")
	case multi && req.Key != "":
		return newError(wire.CodeBadJSON, "acquireAll and tryAcquireAll take keys, not key")
	case req.Prefix && req.CommandType != wire.CmdWatch:
		return newError(wire.CodeBadJSON, "prefix is a field of watch (9) only")
	}
	return nil
}

// acquireAll serves acquireAll (7) and tryAcquireAll (8).
func (c *conn) acquireAll(req wire.Request) {
	opts, aerr := c.g.acquireOptions(wsAcquire(req), c.owner)
	if aerr != nil {
		c.fail(req.ID, aerr)
		return
	}
	ml := c.g.tl // featuresOf checked the backend's interface
	try := req.CommandType == wire.CmdTryAcquireAll
	acquire := ml.AcquireAll
	if try {
		acquire = ml.TryAcquireAll
	}
	c.launch(req, len(req.Keys), try, func(ctx context.Context, outcome func(error) error) {
		start := time.Now()
		opts := opts
		var leases []*lock.Lease
		err := c.g.sessionAcquire(ctx, req.SessionID, req.Keys[0], &opts)
		if err == nil {
			leases, err = acquire(ctx, req.Keys, opts)
		}
		c.grantedAll(req, start, leases, outcome(err))
	})
}

// errShortGrant: a MultiLocker answered with another number of leases
// than keys (a backend bug; the leases it did return are released).
var errShortGrant = errors.New("the backend granted another number of leases than keys")

// grantedAll reports an acquireAll's outcome: one "grants" message with a
// lease per key, in the order of the keys.
func (c *conn) grantedAll(req wire.Request, start time.Time, leases []*lock.Lease, err error) {
	n := len(req.Keys)
	if err == nil && len(leases) != n {
		for _, l := range leases {
			c.releaseQuietly(l)
		}
		err = fmt.Errorf("%w (%d for %d keys)", errShortGrant, len(leases), n)
	}
	if err != nil {
		c.mu.Lock()
		c.acquiring -= n
		c.mu.Unlock()
		c.fail(req.ID, toAPIError(err))
		return
	}
	c.g.metrics.acquireWS.Observe(time.Since(start).Seconds())
	c.g.metrics.grants.Add(float64(n))
	r := wire.Reply{ID: req.ID, Type: wire.TypeGrants, Success: true, Leases: make([]wire.Grant, 0, n)}
	var tell []*lock.Lease
	for _, lease := range leases {
		if !c.hold(req, lease) {
			continue
		}
		wanted := c.g.wanted && lease.IsWanted()
		r.Leases = append(r.Leases, wire.Grant{Key: lease.Key,
			FencingToken: &wire.FencingToken{Key: lease.Key, Value: uint64(lease.Token)},
			LockToken:    lease.Handle, TTL: durationMS(lease.TTL()), Owner: lease.Owner, Wanted: wanted,
			Mode: modeName(lease.Mode), Permits: lease.Permits, SessionID: sessionIDOf(lease)})
		if !wanted {
			tell = append(tell, lease)
		}
	}
	if len(r.Leases) < n {
		return // the connection ended: nobody to tell
	}
	c.send(r)
	for _, lease := range tell {
		c.tellWanted(lease)
	}
}
