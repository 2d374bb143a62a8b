package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Renew implements lock.Locker: compare-and-pexpire on every node; the lease
// is extended only when a quorum still holds its handle and the round ended
// within the new validity window. A renewed lease is told when it is wanted
// from then on, also one rebuilt with kit.NewLease (this Locker becomes
// the one the grant's waiters notify), and at once if a waiter was already
// refused by the grant.
func (l *Locker) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	return l.life.Renew(lease, ttl, func(ttl time.Duration) error { return l.renew(ctx, lease, ttl) })
}

func (l *Locker) renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	k := l.keysFor(lease.Key)
	l.subscribeWanted()
	defer l.expect(lease.Key)()
	sent := time.Now()
	r := broadcast(l, ctx, func(c context.Context, nd *node) (renewReply, error) {
		return decodeRenew(renewScript.Run(c, nd.client, []string{k.lock, k.fence, k.meta},
			lease.Handle, ttl.Milliseconds(), uint64(lease.Token), l.wantChannel).Int64())
	})
	r.collect(true)
	switch {
	case r.won():
		if err := kit.Renewed(lease, sent, ttl, true); err != nil {
			return err
		}
		if err := lease.Err(); err != nil {
			return fmt.Errorf("%w: redlock: renew %q took too long: %w", lock.ErrNotHeld, lease.Key, err)
		}
		wanted := false
		for i, v := range r.vals {
			wanted = wanted || r.heard[i] && v.wanted
		}
		l.track(lease, false, wanted)
		return nil
	case r.lost():
		return kit.Renewed(lease, sent, ttl, false)
	default:
		return fmt.Errorf("%w: redlock: renew %q: %d of %d nodes answered, %d still hold it (quorum %d): %v",
			lock.ErrUnavailable, lease.Key, r.answered(), r.n, r.ok, r.quorum, r.err())
	}
}

// Release implements lock.Locker: compare-and-delete on every node. It
// succeeds when a quorum still had the lease's handle; otherwise it returns
// ErrNotHeld (or ErrUnavailable when too few nodes answered to tell).
func (l *Locker) Release(ctx context.Context, lease *lock.Lease) error {
	return l.life.Release(lease, func() error { return l.gate.Release(ctx, lease) })
}

func (l *Locker) release(ctx context.Context, lease *lock.Lease) error {
	return l.releaseCounted(ctx, lease, 0)
}

// releaseCounted releases lease; moved is the number of nodes on which a
// failed handoff already removed it (they count as having held it).
func (l *Locker) releaseCounted(ctx context.Context, lease *lock.Lease, moved int) error {
	k := l.keysFor(lease.Key)
	f, prev := l.startRelease(lease.Key)
	r := broadcast(l, ctx, func(c context.Context, nd *node) (releaseReply, error) {
		defer l.finishRelease(lease.Key, f, nd.idx)
		prev.wait(nd.idx, l.cfg.NodeTimeout)
		return l.releaseOn(c, nd, k, lease)
	})
	r.collect(true)
	r.ok, r.refused = r.ok+moved, r.refused-moved
	if err := l.released(r, k, lease); err != nil || r.won() {
		return err
	}
	// Too few nodes answered to tell. The lease may still hold the key on
	// a quorum (the requests did not reach those nodes, or not yet): every
	// waiter would then wait for its TTL, and the other callers of this
	// Locker, queued behind it in the local gate, too. The release goes on
	// in the background on the nodes that did not answer until the
	// outcome is known (or the lease's deadline has passed: then it
	// expired on its own).
	l.settleRelease(r, k, lease)
	return fmt.Errorf("%w: redlock: release %q: only %d of %d nodes answered (quorum %d), outcome unknown: %v",
		lock.ErrUnavailable, lease.Key, r.answered(), r.n, r.quorum, r.err())
}

// releaseOn runs release.lua for lease on one node.
func (l *Locker) releaseOn(c context.Context, nd *node, k keys, lease *lock.Lease) (releaseReply, error) {
	ks := []string{k.lock, k.fence, k.meta, l.releasedKey(lease.Key, lease.Handle)}
	args := []any{lease.Handle, uint64(lease.Token), k.channel, max(lease.TTL().Milliseconds(), 1), lease.Key}
	if nd.idx == 0 && len(l.nodes) > 1 {
		// node 0 tells the first waiting Locker
		ks = append(ks, k.queue, k.turn)
		args = append(args, l.turnHold().Milliseconds())
	}
	return decodeRelease(releaseScript.Run(c, nd.client, ks, args...).Int64())
}

// released acts on a release round whose outcome is known: it wakes a
// local waiter, passes the local gate's turn on and ends the lease. It
// returns nil with r.won(), the lease's error when r says it was not held,
// and nil (nothing done) when too few nodes answered to tell.
func (l *Locker) released(r *round[releaseReply], k keys, lease *lock.Lease) error {
	switch {
	case r.won():
		wanted := lease.IsWanted()
		for i, v := range r.vals {
			wanted = wanted || r.heard[i] && v.wanted
		}
		if wanted {
			l.markContended(lease.Key)
		}
		l.deliver(k.channel, uint64(lease.Token), fromLocal) // wake a local waiter at once
		l.gate.EndHolder(lease, lock.ErrReleased)
		return kit.Released(lease, true)
	case r.lost() || r.answered() == r.n:
		err := kit.Released(lease, false)
		l.gate.EndHolder(lease, err)
		return err
	}
	return nil
}

// settleRelease re-sends the release of round r to the nodes that did not
// answer, each until it answers, the lease's deadline passes or the Locker
// closes, and acts on the outcome as soon as it is known (released).
func (l *Locker) settleRelease(r *round[releaseReply], k keys, lease *lock.Lease) {
	if !l.life.Begin() {
		return
	}
	go func() {
		defer l.life.End()
		deadline := lease.Deadline()
		var failed []int
		for i := range r.vals {
			if !r.heard[i] {
				failed = append(failed, i)
			}
		}
		again := newRound[releaseReply](l)
		again.pending = len(failed)
		for _, i := range failed {
			nd := l.nodes[i]
			l.work.Go(func() {
				for {
					c, cancel := l.nodeCtx(l.ctx)
					v, err := l.releaseOn(c, nd, k, lease)
					cancel()
					if err == nil || l.ctx.Err() != nil || !time.Now().Add(l.cfg.NodeTimeout).Before(deadline) {
						again.replies <- reply[releaseReply]{node: i, val: v, err: err}
						return
					}
					select {
					case <-l.ctx.Done():
					case <-time.After(l.cfg.NodeTimeout):
					}
				}
			})
		}
		// Tally the round's answers and the new ones together.
		again.ok, again.refused = r.ok, r.refused
		for i := range r.vals {
			again.heard[i], again.vals[i] = r.heard[i], r.vals[i]
		}
		for again.pending > 0 {
			again.collect1()
			if again.won() || again.lost() {
				break
			}
		}
		l.released(again, k, lease)
	}()
}

// inflight is one release of a key, per node: done[i] is closed once node i
// answered (or failed). A later attempt or release of the same key by this
// Locker waits for it on that node before sending its own request, so that
// the two cannot reach the node out of order on different connections.
type inflight struct {
	done []chan struct{}
	left int
}

func (f *inflight) wait(i int, timeout time.Duration) {
	if f == nil {
		return
	}
	select {
	case <-f.done[i]:
	default:
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-f.done[i]:
		case <-t.C:
		}
	}
}

// startRelease registers a release of key; prev is the one still in
// flight, if any.
func (l *Locker) startRelease(key string) (f, prev *inflight) {
	f = &inflight{done: make([]chan struct{}, len(l.nodes)), left: len(l.nodes)}
	for i := range f.done {
		f.done[i] = make(chan struct{})
	}
	l.mu.Lock()
	prev = l.releasing[key]
	l.releasing[key] = f
	l.mu.Unlock()
	return f, prev
}

func (l *Locker) finishRelease(key string, f *inflight, i int) {
	close(f.done[i])
	l.mu.Lock()
	if f.left--; f.left == 0 && l.releasing[key] == f {
		delete(l.releasing, key)
	}
	l.mu.Unlock()
}

// releaseQuietly frees a grant nobody will use (a waiter's grant that raced
// its cancellation).
func (l *Locker) releaseQuietly(lease *lock.Lease) {
	l.release(context.Background(), lease)
	lease.End(lock.ErrReleased)
}
