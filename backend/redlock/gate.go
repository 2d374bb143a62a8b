package redlock

import (
	"context"
	"sync"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/localgate"
)

// MaxLocalHandoffs bounds how many times in a row a lease is handed from
// one caller to the next waiter of the same Locker without freeing the key
// (see the local gate below); then the key is released, so that waiters of
// other Lockers get their chance.
const MaxLocalHandoffs = 8

// The local gate (lock/localgate) serializes, per key, the Acquire calls of
// one Locker: the first caller goes to Redis, the others queue in process
// and get their turn when the caller before them is done, so callers of one
// Locker neither race each other for the quorum nor split its votes. When
// the holder releases while a local caller waits, the lock is handed over
// directly (handoff.lua: one script per node instead of a release and an
// acquire).

// handoff replaces lease by a new grant for t on every node. On success it
// hands the new lease to t and ends the old one; otherwise t gets the turn
// without a lease, and the old lease is released normally.
func (l *Locker) handoff(ctx context.Context, lease *lock.Lease, t *localgate.Turn) error {
	k := l.keysFor(lease.Key)
	handle := lock.NewHandle()
	opts := t.Opts
	n := len(l.nodes)
	replies := make(chan reply, n)
	sent := time.Now()
	for i, nd := range l.nodes {
		l.spawn(func() {
			c, cancel := l.nodeCtx(ctx)
			defer cancel()
			v, err := handoffScript.Run(c, nd.client, []string{k.lock, k.fence, k.meta},
				lease.Handle, uint64(lease.Token), handle, opts.TTL.Milliseconds(), opts.Owner, opts.Value).Slice()
			replies <- reply{node: i, val: v, err: err}
		})
	}
	granted := make([]bool, n)
	answered := make([]bool, n)
	tokens := make([]lock.Token, n)
	ok := 0
	for range l.nodes {
		r := <-replies
		if r.err != nil || len(r.val) < 2 {
			continue
		}
		answered[r.node] = true
		if toInt(r.val[0]) == 1 {
			granted[r.node] = true
			tokens[r.node] = lock.Token(toInt(r.val[1]))
			ok++
		}
	}
	if ok >= l.quorum && time.Since(sent) < opts.TTL-lock.Drift(opts.TTL, l.cfg.DriftFactor) {
		var token lock.Token
		for _, tk := range tokens {
			token = max(token, tk)
		}
		l.propagate(k, handle, token, tokens, answered, nil, 0)
		next := lock.NewLease(lock.Grant{
			Key: lease.Key, Owner: opts.Owner, Token: token, Handle: handle, Value: opts.Value,
			TTL: opts.TTL, Sent: sent, DriftFactor: l.cfg.DriftFactor,
		})
		l.gate.HandOver(t, lease, next)
		return lease.Released(true)
	}
	// Undo the new grant where it landed (the old one is gone there too),
	// give the waiter its turn, and release the old grant elsewhere.
	var wg sync.WaitGroup
	for i, nd := range l.nodes {
		if !granted[i] {
			continue
		}
		wg.Add(1)
		l.spawn(func() {
			defer wg.Done()
			c, cancel := l.nodeCtx(context.Background())
			defer cancel()
			abortScript.Run(c, nd.client, []string{k.lock, k.meta, l.abortKey(lease.Key, "handoff")}, handle, opts.TTL.Milliseconds(), "0")
		})
	}
	wg.Wait()
	l.gate.Decline(t)
	return l.releaseCounted(ctx, lease, ok)
}
