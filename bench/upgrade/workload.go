package upgrade

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/bench/campaign"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/check"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
)

// The rolling-upgrade drill's clients: workers that each open a Go SDK
// client with default options, cycle on it for a while (ClientLife) and
// then replace it with a new one, so that every worker sees the cluster's
// features switch on (sessions, the primitives) and off again as a client
// that connects anew would. A cycle picks what the client is offered now:
// an exclusive lock that writes to the fenced store with its token
// (always), a shared or exclusive hold of a read-write key, a semaphore
// permit, or an AcquireAll of two exclusive keys; auto-renewed leases go
// into the client's session whenever sessions are offered (the SDK's
// default). Every operation is recorded for the checkers of check.

// The drill's keys: exclusive keys (exclusive acquires and AcquireAll),
// read-write keys (shared and exclusive holds), and one semaphore key.
const (
	upgradeExclusiveKeys = 4
	upgradeRWKeys        = 2
	upgradePermits       = 2
)

// The kinds of cycle, as the report counts them.
const (
	cycleExclusive   = "exclusive"
	cycleRWShared    = "rw-shared"
	cycleRWExclusive = "rw-exclusive"
	cycleSemaphore   = "semaphore"
	cycleMultiKey    = "multikey"
)

// Bounds of one operation of the drill's clients: an acquire waits at
// most upgradeAcquireWait (a lease leaked by an unknown release lives its
// 20 s TTL), a release is re-sent for at most upgradeReleaseWait.
const (
	upgradeAcquireWait = 10 * time.Second
	upgradeReleaseWait = 10 * time.Second
)

// upgradeWorkload is the drill's workers and what they saw. It records
// through a chaos workload (its history, fenced store and clock).
type upgradeWorkload struct {
	*campaign.Workload
	endpoints []string
	life      time.Duration // how long a worker keeps one client
	hold      time.Duration // longest hold after the writes
	// downgrade is the campaign-clock time the downgrade was first
	// asked for, plus one (0: not yet).
	downgrade atomic.Int64
	// nextClient numbers the SDK clients: each is a client of its own in
	// the history, so that a lease one of them left behind is judged
	// against its successor on the same worker too.
	nextClient atomic.Int64

	umu         sync.Mutex
	grants      []grantNote
	clients     int // clients created
	withSession int // of them, offered sessions at their first connection
	featuresOn  time.Duration
	featuresOff time.Duration
	on, off     bool
}

// grantNote is what the report counts of one grant.
type grantNote struct {
	at      time.Duration
	kind    string
	session bool
}

func (u *upgradeWorkload) fail(what string, err error) {
	u.Mu.Lock()
	if u.Errs == nil {
		u.Errs = map[string]int{}
	}
	u.Errs[what+": "+provision.ErrorKindOrUnsupported(err)]++
	u.Mu.Unlock()
}

// worker runs clients one after another until ctx ends.
func (u *upgradeWorkload) worker(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil {
		id := int(u.nextClient.Add(1) - 1)
		c, err := client.New(u.endpoints, client.Options{})
		if err != nil {
			u.fail("client", err)
			provision.SleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		u.sawFeatures(c.Features())
		end := time.Now().Add(u.life)
		for ctx.Err() == nil && time.Now().Before(end) {
			u.cycle(ctx, id, c, rng)
		}
		c.Close()
	}
}

// sawFeatures notes what a new client was offered at its first
// connection (0: it did not connect in time).
func (u *upgradeWorkload) sawFeatures(f lock.Features) {
	if f == 0 {
		return
	}
	t := u.Now()
	sessions := f.Has(lock.FeatureSessions)
	u.umu.Lock()
	defer u.umu.Unlock()
	u.clients++
	if sessions {
		u.withSession++
	}
	if sessions && !u.on {
		u.on, u.featuresOn = true, t
	}
	if d := u.downgrade.Load(); d > 0 && !sessions && !u.off && t >= time.Duration(d-1) {
		u.off, u.featuresOff = true, t
	}
}

// cycle runs one acquire → use → hold → release of a kind the client is
// offered now.
func (u *upgradeWorkload) cycle(ctx context.Context, id int, c *client.Client, rng *rand.Rand) {
	f := c.Features()
	kinds := []string{cycleExclusive}
	if f.Has(lock.FeatureShared) {
		kinds = append(kinds, cycleRWShared, cycleRWExclusive)
	}
	if f.Has(lock.FeatureSemaphore) {
		kinds = append(kinds, cycleSemaphore)
	}
	if f.Has(lock.FeatureMultiKey) {
		kinds = append(kinds, cycleMultiKey)
	}
	kind := kinds[rng.IntN(len(kinds))]
	var opts lock.AcquireOptions // the SDK's default: auto-renewed, in the client's session when offered
	switch kind {
	case cycleExclusive:
		u.holdOne(ctx, id, c, kind, fmt.Sprintf("upgrade/ex/%d", rng.IntN(upgradeExclusiveKeys)), opts, true, rng)
	case cycleRWShared:
		opts.Mode = lock.ModeShared
		u.holdOne(ctx, id, c, kind, fmt.Sprintf("upgrade/rw/%d", rng.IntN(upgradeRWKeys)), opts, false, rng)
	case cycleRWExclusive:
		u.holdOne(ctx, id, c, kind, fmt.Sprintf("upgrade/rw/%d", rng.IntN(upgradeRWKeys)), opts, true, rng)
	case cycleSemaphore:
		opts.Mode, opts.Permits = lock.ModeShared, upgradePermits
		u.holdOne(ctx, id, c, kind, "upgrade/sem/0", opts, false, rng)
	case cycleMultiKey:
		a := rng.IntN(upgradeExclusiveKeys)
		b := (a + 1 + rng.IntN(upgradeExclusiveKeys-1)) % upgradeExclusiveKeys
		u.holdAll(ctx, id, c, []string{fmt.Sprintf("upgrade/ex/%d", min(a, b)), fmt.Sprintf("upgrade/ex/%d", max(a, b))}, rng)
	}
}

// acquireOp is the history's record of an acquire of key with opts.
func (u *upgradeWorkload) acquireOp(id int, key string, opts lock.AcquireOptions, start time.Duration) check.Op {
	return check.Op{Client: id, Key: key, Kind: check.Acquire, TTL: opts.TTL, Start: start,
		Shared: opts.Mode == lock.ModeShared, Permits: opts.Permits}
}

// acquired ends acq, an acquire that returned err, as chaos's workload
// does — an unknown outcome unless the key was held or the request was
// refused as unsupported, which changes nothing — and reports whether it
// was granted.
func (u *upgradeWorkload) acquired(ctx context.Context, rng *rand.Rand, acq *check.Op, what string, err error) bool {
	if err == nil {
		return true
	}
	acq.End = u.Now()
	acq.Unknown = !errors.Is(err, lock.ErrNotAcquired) && !errors.Is(err, lock.ErrUnsupported)
	u.Record(*acq)
	if ctx.Err() == nil {
		u.fail(what, err)
		provision.SleepCtx(ctx, provision.Between(rng, 20*time.Millisecond, 100*time.Millisecond))
	}
	return false
}

// granted records acq as granted lease.
func (u *upgradeWorkload) granted(acq check.Op, kind string, lease *lock.Lease) {
	acq.OK, acq.Token, acq.Deadline, acq.Session = true, uint64(lease.Token), lease.Deadline().Sub(u.Base), lease.Session() != nil
	u.Record(acq)
	u.Cycles.Add(1)
	u.umu.Lock()
	u.grants = append(u.grants, grantNote{at: acq.End, kind: kind, session: acq.Session})
	u.umu.Unlock()
}

// holdOne acquires key, uses the lease (a fenced write when write, else a
// read), holds it a little and releases it.
func (u *upgradeWorkload) holdOne(ctx context.Context, id int, c *client.Client, kind, key string, opts lock.AcquireOptions, write bool, rng *rand.Rand) {
	acq := u.acquireOp(id, key, opts, u.Now())
	actx, cancel := context.WithTimeout(ctx, upgradeAcquireWait)
	lease, err := c.Acquire(actx, key, opts)
	cancel()
	if !u.acquired(ctx, rng, &acq, "acquire "+kind, err) {
		return
	}
	acq.End = u.Now()
	u.granted(acq, kind, lease)
	u.use(ctx, id, key, lease, write)
	provision.SleepCtx(ctx, provision.Between(rng, 0, u.hold))
	u.release(ctx, id, c, key, lease)
}

// holdAll acquires keys at once, writes with each lease's token, holds
// them a little and releases each.
func (u *upgradeWorkload) holdAll(ctx context.Context, id int, c *client.Client, keys []string, rng *rand.Rand) {
	var opts lock.AcquireOptions
	start := u.Now()
	actx, cancel := context.WithTimeout(ctx, upgradeAcquireWait)
	leases, err := c.AcquireAll(actx, keys, opts)
	cancel()
	if err != nil {
		for i, key := range keys {
			acq := u.acquireOp(id, key, opts, start)
			if i == 0 {
				u.acquired(ctx, rng, &acq, "acquire "+cycleMultiKey, err)
				continue
			}
			acq.End, acq.Unknown = u.Now(), !errors.Is(err, lock.ErrNotAcquired) && !errors.Is(err, lock.ErrUnsupported)
			u.Record(acq)
		}
		return
	}
	end := u.Now()
	for i, key := range keys {
		acq := u.acquireOp(id, key, opts, start)
		acq.End = end
		u.granted(acq, cycleMultiKey, leases[i])
	}
	for i, key := range keys {
		u.use(ctx, id, key, leases[i], true)
	}
	provision.SleepCtx(ctx, provision.Between(rng, 0, u.hold))
	for i, key := range keys {
		u.release(ctx, id, c, key, leases[i])
	}
}

// use writes to the fenced store with the lease's token (write), or
// records a read: a correct client checks its lease before it acts.
func (u *upgradeWorkload) use(ctx context.Context, id int, key string, lease *lock.Lease, write bool) {
	if lease.Err() != nil || !time.Now().Before(lease.Deadline()) {
		return
	}
	if write {
		u.FencedWrite(ctx, id, key, lease.Token, fmt.Sprintf("client %d token %d", id, lease.Token))
		return
	}
	u.Read(id, key, lease.Token)
}

// release releases lease and records the outcome.
func (u *upgradeWorkload) release(ctx context.Context, id int, c *client.Client, key string, lease *lock.Lease) {
	rel := check.Op{Client: id, Key: key, Kind: check.Release, Token: uint64(lease.Token), Start: u.Now()}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), upgradeReleaseWait)
	err := c.Release(rctx, lease)
	cancel()
	rel.End = u.Now()
	if campaign.SettleRelease(&rel, err) {
		u.fail("release", err)
	}
	u.Record(rel)
}

// notes returns the grants noted so far, in time order.
func (u *upgradeWorkload) notes() []grantNote {
	u.umu.Lock()
	defer u.umu.Unlock()
	g := slices.Clone(u.grants)
	slices.SortFunc(g, func(a, b grantNote) int { return cmp.Compare(a.at, b.at) })
	return g
}
