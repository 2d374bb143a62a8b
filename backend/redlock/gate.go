package redlock

import (
	"context"
	"sync"
	"time"

	"github.com/lockgate/lockgate/internal/localgate"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// The local gate (lock/localgate) serializes, per key, the Acquire calls of
// one Locker: the first caller goes to Redis, the others queue in process
// and get their turn when the caller before them is done, so callers of one
// Locker neither race each other for the quorum nor split its votes. When
// the holder releases while a local caller waits, the lock is handed over
// directly (handoff.lua: one script per node instead of a release and an
// acquire), at most localgate.MaxHandoffs times in a row.

// handoff replaces lease by a new grant for t on every node. On success it
// hands the new lease to t and ends the old one; otherwise t gets the turn
// without a lease, and the old lease is released normally.
func (l *Locker) handoff(ctx context.Context, lease *lock.Lease, t *localgate.Turn) error {
	k := l.keysFor(lease.Key)
	handle := lock.NewHandle()
	opts := t.Opts
	defer l.expect(lease.Key)()
	sent := time.Now()
	r := broadcast(l, ctx, func(c context.Context, nd *node) (grantReply, error) {
		return decodeHandoff(handoffScript.Run(c, nd.client, []string{k.lock, k.fence, k.meta},
			lease.Handle, uint64(lease.Token), handle, opts.TTL.Milliseconds(), opts.Owner, opts.Value, l.wantChannel).Slice())
	})
	r.collect(false)
	if r.won() && l.validWithin(opts.TTL, time.Since(sent)) {
		// The new lease is tracked (and told of the waiters that remain)
		// before t's Acquire can return it.
		l.gate.HandOver(t, lease, l.grant(r, k, lease.Key, handle, opts, sent, true))
		return kit.Released(lease, true)
	}
	// Undo the new grant where it landed (the old one is gone there too),
	// give the waiter its turn, and release the old grant elsewhere.
	var wg sync.WaitGroup
	for i, nd := range l.nodes {
		if !r.heard[i] || !r.vals[i].Granted {
			continue
		}
		wg.Add(1)
		l.work.Go(func() {
			defer wg.Done()
			c, cancel := l.nodeCtx(context.Background())
			defer cancel()
			abortScript.Run(c, nd.client, []string{k.lock, k.meta, l.abortKey(lease.Key, "handoff")}, handle, opts.TTL.Milliseconds(), "0")
		})
	}
	wg.Wait()
	l.gate.Decline(t)
	return l.releaseCounted(ctx, lease, r.ok)
}
