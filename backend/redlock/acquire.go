package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/localgate"
	"github.com/lockgate/lockgate/lock"
)

// Acquire implements lock.Locker. Callers of one Locker queue for a key in
// process, in arrival order, and a release hands the lock to the next of
// them directly (see localgate.MaxHandoffs). The caller at the head tries; while
// the key is held it subscribes to the key's release channel, tries once
// more, then waits for a release message or for the holder's TTL to run
// out, and tries again. Across Lockers there is no order (not FIFO).
func (l *Locker) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return l.acquire(ctx, key, opts, false)
}

// TryAcquire implements lock.Locker: one attempt. A key held by another
// owner gives a *lock.HeldError naming the holder's owner and token.
func (l *Locker) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return l.acquire(ctx, key, opts, true)
}

func (l *Locker) acquire(ctx context.Context, key string, opts lock.AcquireOptions, try bool) (*lock.Lease, error) {
	return l.life.Acquire(key, opts, l.cfg.ClientID, func(opts lock.AcquireOptions) (*lock.Lease, error) {
		if err := l.checkSupported(opts); err != nil {
			return nil, err
		}
		if !try {
			// A caller that may wait tells this Locker's holders of key
			// at once (see wanted.go).
			l.startWaiting(key)
			defer l.stopWaiting(key)
		}
		return l.gate.Acquire(ctx, key, opts, try)
	})
}

// gaveUp is the error to return instead of a grant when the caller's
// context or the Locker ended meanwhile (the caller's context first: its
// error says why the caller stopped).
func (l *Locker) gaveUp(ctx context.Context, key string) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("redlock: acquire %q: %w", key, ctx.Err())
	case l.ctx.Err() != nil:
		return lock.ErrClosed
	}
	return nil
}

// attemptOnce is the local gate's Attempt: one Redlock round, staged or
// parallel (firstmaster.go). A refusal by a holder that holds a quorum is
// waited out (node 0's turn, its release message, or its TTL, a waiter's
// wait bounded by parkedRecheck); any other refusal backs off.
func (l *Locker) attemptOnce(key string, opts lock.AcquireOptions, try bool, floor lock.Token) localgate.Outcome {
	l.subscribeWanted()
	done := l.expect(key)
	p := l.planFor(key, try)
	if p.listenFirst {
		done()
		return localgate.Outcome{} // the gate subscribes and tries at once
	}
	o := l.attempt(key, l.keysFor(key), opts, floor, try, p)
	done()
	if o.lease != nil && p.ticket != "" {
		l.markContended(key) // it waited: so may the others
	}
	if p.ticket != "" {
		// A waiter: node 0 tells it its turn; a lost message costs at
		// most parkedRecheck.
		l.parkOn(key, o.parked, o.lease != nil, uint64(o.heldFirst), o.ticket)
		o.pttl = min(o.pttl, parkedRecheck)
	}
	if o.lease != nil {
		l.awaitWantedSubscribed()
	}
	return localgate.Outcome{Lease: o.lease, Held: o.held, Err: o.err,
		AwaitRelease: o.quorumHeld, Await: o.pttl + time.Duration(rand.N(int64(time.Millisecond)*3))}
}

// subscribe is the local gate's Subscribe: join key's release channel and
// wait until enough nodes confirmed it.
func (l *Locker) subscribe(ctx context.Context, key string) *localgate.Subscription {
	w := l.join(key)
	l.awaitSubscribed(ctx, w)
	return &localgate.Subscription{Wake: w.wake, Close: func() { l.leave(w) }}
}

// outcome of one acquire attempt.
type outcome struct {
	lease      *lock.Lease
	held       *lock.HeldError // the holder seen by most refusing nodes
	quorumHeld bool            // that holder holds a quorum: wait for its release
	pttl       time.Duration   // its remaining TTL
	err        error           // no quorum of answers, or validity exceeded
	// parked: a staged attempt that node 0 refused, naming a holder with
	// node-local token heldFirst there (see firstmaster.go).
	parked    bool
	heldFirst lock.Token
	ticket    string // the caller's place in node 0's queue
}

// attempt makes one Redlock round. Unless try, a holder that refuses it is
// told that the caller waits (acquire.lua publishes on its wanted channel).
func (l *Locker) attempt(key string, k keys, opts lock.AcquireOptions, minToken lock.Token, try bool, p plan) outcome {
	handle := opts.Handle
	if handle == "" {
		handle = lock.NewHandle()
	}
	attemptID := lock.NewHandle()[:16]
	abortKey := l.abortKey(key, attemptID)
	ttlMS := opts.TTL.Milliseconds()
	waits := "1"
	if try {
		waits = "0"
	}
	ticket := p.ticket
	sent := time.Now()
	l.mu.Lock()
	prev := l.releasing[key]
	l.mu.Unlock()
	ask := func(c context.Context, nd *node) (grantReply, error) {
		prev.wait(nd.idx, l.cfg.NodeTimeout)
		ks := []string{k.lock, k.fence, k.meta, abortKey, l.releasedKey(key, handle)}
		args := []any{handle, ttlMS, opts.Owner, opts.Value, uint64(minToken), l.wantChannel, waits, key}
		if nd.idx == 0 && len(l.nodes) > 1 {
			// A grant leaves node 0's queue; a staged refusal joins it.
			ks = append(ks, k.queue, k.turn)
			args = append(args, ticket)
		}
		return decodeAcquire(acquireScript.Run(c, nd.client, ks, args...).Slice())
	}
	var r *round[grantReply]
	if p.staged {
		var refused *grantReply
		if r, refused = l.firstMasterRound(ask); refused != nil {
			if refused.HolderHandle == "" {
				// Free, but node 0 told a queued Locker: wait for a turn.
				refused.HolderPTTL = parkedRecheck
			}
			return outcome{
				held:       &lock.HeldError{Key: key, Owner: refused.HolderOwner, Token: refused.Token, Expires: time.Now().Add(refused.HolderPTTL)},
				quorumHeld: true,
				pttl:       min(refused.HolderPTTL, parkedRecheck),
				parked:     true,
				heldFirst:  refused.Token,
				ticket:     refused.Ticket,
			}
		}
	} else {
		r = broadcast(l, l.ctx, ask)
	}
	r.collect(true)
	if !r.won() {
		l.pressOn(r, p.released, ask)
	} // the rest is collected in the background by propagate
	elapsed := time.Since(sent)
	if r.won() && l.validWithin(opts.TTL, elapsed) {
		return outcome{lease: l.grant(r, k, key, handle, opts, sent, !try)}
	}
	// Failed (too late): hear from the remaining nodes too, so that the
	// undo below is synchronous wherever it can be.
	won := r.won()
	r.collect(false)
	// Undo wherever it may have succeeded, including nodes that did not
	// answer (their copy of the request may still be queued).
	l.abort(r, k, handle, abortKey, ttlMS, ticket)
	o := heldBy(r, key)
	if r.heard[0] && !r.vals[0].Granted && r.vals[0].Ticket != "" {
		// Queued at node 0: woken by its turn, or recheck (firstmaster.go).
		o.ticket = r.vals[0].Ticket
		if o.quorumHeld && r.vals[0].HolderHandle != "" {
			o.parked, o.heldFirst, o.pttl = true, r.vals[0].Token, min(o.pttl, parkedRecheck)
		}
	}
	switch {
	case won:
		o.err = fmt.Errorf("%w: redlock: acquire %q: the attempt took %v, leaving no validity of its %v TTL (drift %v); released",
			lock.ErrUnavailable, key, elapsed.Round(time.Microsecond), opts.TTL, lock.Drift(opts.TTL, l.cfg.DriftFactor))
	case o.held == nil || !r.reached(r.answered()) && len(r.errs) > 0 && !o.quorumHeld:
		o.err = fmt.Errorf("%w: redlock: acquire %q: only %d of %d nodes answered (quorum %d): %v",
			lock.ErrUnavailable, key, r.answered(), r.n, r.quorum, r.err())
	}
	return o
}

// heldBy names the holder that most of the refusing nodes of a failed
// attempt named, and whether it holds a quorum.
func heldBy(r *round[grantReply], key string) outcome {
	type holder struct {
		count int
		owner string
		token lock.Token
		pttl  time.Duration
	}
	holders := map[string]*holder{}
	var best *holder
	for i, v := range r.vals {
		if !r.heard[i] || v.Granted || v.HolderHandle == "" {
			continue // a tombstone's refusal names no holder
		}
		hd := holders[v.HolderHandle]
		if hd == nil {
			hd = &holder{}
			holders[v.HolderHandle] = hd
		}
		hd.count++
		hd.owner = v.HolderOwner
		hd.token = max(hd.token, v.Token)
		hd.pttl = max(hd.pttl, v.HolderPTTL)
		if best == nil || hd.count > best.count {
			best = hd
		}
	}
	if best == nil {
		return outcome{}
	}
	return outcome{
		held:       &lock.HeldError{Key: key, Owner: best.owner, Token: best.token, Expires: time.Now().Add(best.pttl)},
		quorumHeld: r.reached(best.count),
		pttl:       best.pttl,
	}
}

// abort undoes a failed attempt: synchronously on the nodes that granted
// (so that the caller's next attempt does not trip over its own leftovers),
// in the background, with a tombstone, on the nodes that did not answer.
//
// On node 0, a waiter with a ticket gets its place in the queue back
// (its grant there took it out).
func (l *Locker) abort(r *round[grantReply], k keys, handle, abortKey string, ttlMS int64, ticket string) {
	run := func(c context.Context, nd *node, tombstone string) error {
		ks := []string{k.lock, k.meta, abortKey}
		args := []any{handle, ttlMS, tombstone}
		if nd.idx == 0 && len(l.nodes) > 1 {
			ks = append(ks, k.queue)
			args = append(args, l.wantChannel, ticket)
		}
		return abortScript.Run(c, nd.client, ks, args...).Err()
	}
	var wg sync.WaitGroup
	for i, nd := range l.nodes {
		switch {
		case r.heard[i] && r.vals[i].Granted:
			wg.Add(1)
			l.work.Go(func() {
				defer wg.Done()
				c, cancel := l.nodeCtx(context.Background())
				defer cancel()
				run(c, nd, "0")
			})
		case !r.heard[i]:
			if !l.life.Begin() {
				continue
			}
			go func() {
				defer l.life.End()
				// Retry until the node answers or the attempt's TTL is
				// over (then a late grant has expired by itself).
				deadline := time.Now().Add(time.Duration(ttlMS) * time.Millisecond)
				for time.Now().Before(deadline) {
					c, cancel := context.WithDeadline(context.Background(), deadline)
					err := run(c, nd, "1")
					cancel()
					if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, redis.ErrClosed) {
						return
					}
					time.Sleep(l.cfg.NodeTimeout)
				}
			}()
		}
	}
	wg.Wait()
}
