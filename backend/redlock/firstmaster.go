package redlock

import (
	"context"
	"time"
)

// Contended keys: the first master (node 0) orders the waiters.
//
// A release wakes a waiter in every Locker that waits for the key. Were
// each of them to send a round to every node at once, nearly all would
// lose, and the votes would split between them often enough that none
// reaches a quorum: they would all undo their partial grants and back off
// while the key stayed free. Instead node 0 keeps, per key, a queue of the
// waiting Lockers (<prefix>:queue:{K}, a sorted set of their wanted
// channels by ticket: the server's time in microseconds when the Locker
// first joined, which it keeps while it waits so that it keeps its place),
// and a release that frees the key on node 0 tells only the first of
// them, on its own wanted channel ("!<released handle> <key>"), and keeps
// the key for it a short while (<prefix>:turn:{K}, turnHold): node 0
// refuses a free key to any other Locker meanwhile. With nobody queued it
// publishes on the release channel as before.
//
// A waiter's attempt (an Acquire subscribed to the key's release
// channel) is planned by planFor:
//   - told its turn: one parallel round, which node 0 grants it and which
//     nobody else contends; nodes that still name the released grant (its
//     release has not reached them yet) are asked once more (pressOn);
//   - otherwise staged: node 0 alone first, and only if node 0 grants,
//     the other nodes. Refused by node 0 (held, or kept for the Locker
//     told), it joins node 0's queue, touches nothing else and waits,
//     parked: for its turn, or for node 0's release of the grant that
//     refused it (not the copies the other nodes publish, to which it does
//     not even listen while node 0 answers).
//
// A handover thus costs a release, one message and one round, and no vote
// splits between waiters. The order is the queue's (FIFO across Lockers,
// by first refusal; within one Locker the local gate's).
//
// Safety is that of any round: a grant needs a quorum of nodes (node 0's
// vote is one of them), its validity is counted from the moment its first
// request was sent, and its token is the largest of its quorum's
// counters. The queue and the turn only decide who asks, and when.
//
// Liveness does not depend on node 0:
//   - a request to node 0 that fails sends a staged round on to the other
//     nodes at once (a quorum of them still grants), and after a few such
//     failures in a row the attempts of the next firstMasterRest are
//     parallel rounds, and the waiters listen to every node;
//   - a waiter waits at most parkedRecheck for its turn (or the holder's
//     TTL, if sooner); a parked waiter whose wait no release of node 0's
//     ended makes a parallel round, which sees past a stale copy of the
//     lock on node 0 (a release that did not reach node 0 leaves one) and
//     tells whether its holder holds a quorum;
//   - a Locker no longer subscribed is skipped (PUBLISH reached nobody), a
//     Locker told whose waiter has gone, or whose last waiter gives up,
//     leaves the queue and passes the turn on (turn.lua), and a grant
//     made without node 0 is still followed by a turn: a release that
//     finds the key free on node 0 tells the queue too.
//
// A fresh Acquire (not subscribed yet) makes a parallel round, keeping an
// uncontended acquire at one round trip, unless its Locker last held the
// key after waiting for it, or released it wanted by a waiter: then it
// subscribes first and makes a waiter's attempt, so that a Locker
// releasing a contended key does not take it straight back (barging)
// ahead of the queue.
const (
	// parkedRecheck bounds a parked waiter's wait for node 0's release.
	parkedRecheck = time.Second
	// firstMasterRest is how long attempts skip node 0's stage after
	// firstMasterFailures requests in a row to node 0 failed.
	firstMasterRest     = time.Second
	firstMasterFailures = 3
	// contendedFor is how long a wanted release makes the releasing
	// Locker's next Acquire of the key a staged one.
	contendedFor = time.Second
	// maxContended bounds the keys remembered as released while wanted.
	maxContended = 1024
	// fromLocal is the publisher of a release this Locker made itself.
	fromLocal = -1
)

// plan is how one attempt goes: staged (node 0 first) or a parallel
// round; ticket is the waiter's place in node 0's queue that a refusal
// there keeps ("0": none yet; "" for an Acquire not waiting yet);
// released, for a waiter node 0 told its turn, the handle of the grant
// whose release told it (see pressOn).
type plan struct {
	staged           bool
	ticket, released string
	// listenFirst: the key was contended a moment ago: skip the attempt,
	// subscribe and join the queue with the attempt that follows at once.
	listenFirst bool
}

// planFor decides how an attempt on key goes.
func (l *Locker) planFor(key string, try bool) plan {
	if try || len(l.nodes) < 2 {
		return plan{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Now().Before(l.firstDownUntil) {
		return plan{}
	}
	st := l.chans[l.keysFor(key).channel]
	if st == nil {
		at, ok := l.contended[key]
		delete(l.contended, key)
		return plan{listenFirst: ok && time.Since(at) < contendedFor}
	}
	p := plan{ticket: st.ticket}
	if p.ticket == "" {
		p.ticket = "0"
	}
	turned := st.turns != st.turnsAt
	st.turnsAt = st.turns
	switch {
	case turned:
		// Node 0 told this Locker alone and keeps the key for it a
		// while: no herd to avoid, no vote to split.
		p.released = st.released
	case st.parked && st.delivered == st.parkedAt:
		// A parked waiter woken by no release of node 0's: the wait
		// ran out.
	default:
		p.staged = true
	}
	return p
}

// parkOn records the outcome of an attempt of a waiter of key: parked on
// node 0 behind the grant with node-local token there (parked, with its
// ticket in node 0's queue), granted, or neither. A wake-up pending from another
// node's copy of a release, or from an older release, is dropped, unless
// node 0 already published the release waited for or gave this Locker
// its turn.
func (l *Locker) parkOn(key string, parked, granted bool, token uint64, ticket string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.chans[l.keysFor(key).channel]
	if st == nil {
		return
	}
	if !parked {
		st.parked, st.after = false, 0
		if granted {
			st.ticket = "" // the grant took it out of node 0's queue
		}
		return
	}
	if ticket != "" {
		st.ticket = ticket
	}
	st.parked, st.parkedAt, st.after = true, st.delivered, max(token, 1)
	if st.lastFirst >= st.after || st.turns != st.turnsAt {
		st.delivered++ // the release came during the attempt: keep its wake-up
		return
	}
	for _, w := range st.waiters {
		w.drain()
	}
}

// turn is node 0's message that this Locker is the first of key's queue
// and the key was released (the grant with handle released, "" when not
// known): a waiter tries at once. With none left, the turn passes on.
func (l *Locker) turn(key, released string) {
	l.mu.Lock()
	st := l.chans[l.keysFor(key).channel]
	if st != nil && len(st.waiters) > 0 {
		st.turns++
		st.released = released
		st.delivered++
		l.wakeOneLocked(st)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.leaveQueue(key)
}

// leaveQueue takes this Locker out of node 0's queue of key, in the
// background, passing the turn on if the key is free (turn.lua).
func (l *Locker) leaveQueue(key string) {
	if !l.life.Begin() {
		return
	}
	l.work.Go(func() {
		defer l.life.End()
		k := l.keysFor(key)
		c, cancel := l.nodeCtx(l.ctx)
		defer cancel()
		turnScript.Run(c, l.nodes[0].client, []string{k.lock, k.queue, k.fence, k.turn}, l.wantChannel, k.channel, key, l.turnHold().Milliseconds())
	})
}

// turnHold is how long the Locker node 0 told keeps its turn: the key is
// free, but node 0 refuses it to the others meanwhile.
func (l *Locker) turnHold() time.Duration { return 2 * l.cfg.NodeTimeout }

// markContended remembers that this Locker released key while a waiter of
// another Locker wanted it.
func (l *Locker) markContended(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.contended) >= maxContended {
		for k, at := range l.contended {
			if time.Since(at) >= contendedFor {
				delete(l.contended, k)
			}
		}
		if len(l.contended) >= maxContended {
			return
		}
	}
	l.contended[key] = time.Now()
}

// firstMasterAnswered counts node 0's failures in a row: after
// firstMasterFailures of them (one slow answer on a loaded machine is no
// outage) the attempts of the next firstMasterRest are parallel rounds.
func (l *Locker) firstMasterAnswered(err error) {
	l.mu.Lock()
	if err == nil {
		l.firstFailures = 0
		l.mu.Unlock()
		return
	}
	l.firstFailures++
	down := l.firstFailures >= firstMasterFailures
	if down {
		l.firstFailures = 0
		l.firstDownUntil = time.Now().Add(firstMasterRest)
	}
	l.mu.Unlock()
	if down {
		l.widen()
	}
}

// firstMasterRound is a staged round: ask node 0, then, unless it refused
// naming a holder, the other nodes. refused is node 0's refusal (and the
// round nil) when it did.
func (l *Locker) firstMasterRound(ask func(context.Context, *node) (grantReply, error)) (r *round[grantReply], refused *grantReply) {
	c, cancel := l.nodeCtx(l.ctx)
	v, err := ask(c, l.nodes[0])
	cancel()
	if err == nil && !v.Granted && (v.HolderHandle != "" || v.Turn) {
		return nil, &v
	}
	l.firstMasterAnswered(err)
	r = newRound[grantReply](l)
	r.replies <- reply[grantReply]{node: 0, val: v, err: err}
	r.send(l.ctx, 1, ask)
	return r, nil
}

// pressOn re-asks, once, the nodes of a failed round r that refused it
// naming the grant released (the one whose release gave the caller its
// turn): the releasing client sent its release to every node, and node 0
// ran it, but the others may not have yet. The round keeps its handle
// (a node that granted it grants it again) and its send time, so that its
// validity is counted as for any round.
func (l *Locker) pressOn(r *round[grantReply], released string, ask func(context.Context, *node) (grantReply, error)) {
	if released == "" || r.won() {
		return
	}
	var again []int
	for i, v := range r.vals {
		if r.heard[i] && !v.Granted && v.HolderHandle == released {
			again = append(again, i)
		}
	}
	if len(again) == 0 || !r.reached(r.ok+len(again)) {
		return
	}
	replies := make(chan reply[grantReply], len(again))
	for _, i := range again {
		nd := l.nodes[i]
		l.work.Go(func() {
			c, cancel := l.nodeCtx(l.ctx)
			defer cancel()
			v, err := ask(c, nd)
			replies <- reply[grantReply]{node: i, val: v, err: err}
		})
	}
	for range again {
		rp := <-replies
		if rp.err != nil || !rp.val.Granted {
			continue // the refusal stands
		}
		r.vals[rp.node] = rp.val
		r.refused--
		r.ok++
	}
}
