package redlock

import (
	"context"
	"time"
)

// channelState is one release channel that this Locker's waiters watch.
type channelState struct {
	key         string
	refs        int
	target      []uint64        // per node: the SUBSCRIBE count that covers this state
	ready       []chan struct{} // per node: closed once subscribed
	readyClosed []bool
	waiters     []*waiter // in arrival order
	last        uint64    // token of the last release delivered (informational)
	// after: the waiters wait for the release of a grant whose token on
	// the first master is after (set by a staged attempt that the first
	// master refused; 0 otherwise): the copies of older releases, which
	// every node publishes, wake nobody.
	after uint64
	// delivered counts the releases that woke a waiter; parked says the
	// last attempt was a staged one refused by the first master, when
	// delivered was parkedAt. An attempt that finds no release delivered
	// since then (the wait ran out) is a full round (see firstMasterPlan).
	delivered uint64
	parkedAt  uint64
	parked    bool
	// lastFirst is the largest token of a release the first master
	// published (release.lua raises its counter to that token first, so
	// a grant it makes later has a larger one).
	lastFirst uint64
	// ticket is this Locker's place in node 0's queue of the key ("" when
	// not queued); turns counts the turns node 0 gave it, turnsAt their
	// count when the current attempt started.
	ticket         string
	turns, turnsAt uint64
	released       string // the released handle of the last turn
	// wide: subscribed on every node. Otherwise on node 0 alone, which
	// tells its queue's Lockers their turns and broadcasts only when
	// none waits there: the other nodes' copies of every release would
	// reach every waiting Locker for nothing (see widen).
	wide bool
}

// waiter is one blocked Acquire.
type waiter struct {
	channel string
	st      *channelState
	wake    chan struct{} // holds at most one pending wake-up
}

// drain drops a pending wake-up before a new attempt: the attempt sees the
// state that the wake-up announced.
func (w *waiter) drain() {
	select {
	case <-w.wake:
	default:
	}
}

// join registers a waiter on key's release channel, subscribing on every
// node if it is the channel's first waiter.
func (l *Locker) join(key string) *waiter {
	channel := l.keysFor(key).channel
	l.mu.Lock()
	st := l.chans[channel]
	fresh := st == nil
	if fresh {
		n := len(l.nodes)
		st = &channelState{key: key, target: make([]uint64, n), ready: make([]chan struct{}, n), readyClosed: make([]bool, n)}
		for i := range st.ready {
			st.ready[i] = make(chan struct{})
		}
		l.chans[channel] = st
	}
	st.refs++
	w := &waiter{channel: channel, st: st, wake: make(chan struct{}, 1)}
	st.waiters = append(st.waiters, w)
	nodes := l.nodes
	if fresh {
		st.wide = len(l.nodes) < 2 || time.Now().Before(l.firstDownUntil)
		if !st.wide {
			nodes = l.nodes[:1]
		}
	}
	l.mu.Unlock()
	if fresh {
		for _, nd := range nodes {
			nd.enqueue(psCmd{subscribe: true, channel: channel, st: st})
		}
	}
	return w
}

// leave unregisters w. A wake-up it did not use passes to the next waiter.
func (l *Locker) leave(w *waiter) {
	l.mu.Lock()
	st := w.st
	for i, x := range st.waiters {
		if x == w {
			st.waiters = append(st.waiters[:i:i], st.waiters[i+1:]...)
			break
		}
	}
	select {
	case <-w.wake:
		l.wakeOneLocked(st)
	default:
	}
	st.refs--
	last := st.refs == 0
	if last {
		delete(l.chans, w.channel)
	}
	queued := last && st.ticket != ""
	nodes := l.nodes
	if !st.wide {
		nodes = l.nodes[:1]
	}
	l.mu.Unlock()
	if queued {
		l.leaveQueue(st.key)
	}
	if last && l.ctx.Err() == nil {
		for _, nd := range nodes {
			nd.enqueue(psCmd{channel: w.channel})
		}
	}
}

// awaitSubscribed waits until a quorum of nodes confirmed the subscription
// (a release is published on a quorum of nodes, so it reaches us through at
// least one of them), or for at most NodeTimeout.
func (l *Locker) awaitSubscribed(ctx context.Context, w *waiter) {
	t := time.NewTimer(l.cfg.NodeTimeout)
	defer t.Stop()
	n := len(l.nodes)
	need := n - l.quorum + 1
	l.mu.Lock()
	ready := w.st.ready
	if !w.st.wide {
		ready, need = ready[:1], 1
	}
	l.mu.Unlock()
	got := 0
	for _, ch := range ready {
		select {
		case <-ch:
			got++
			if got >= need {
				return
			}
			continue
		default:
		}
		select {
		case <-ch:
			got++
			if got >= need {
				return
			}
		case <-t.C:
			return
		case <-ctx.Done():
			return
		case <-l.ctx.Done():
			return
		}
	}
}

// deliver wakes one local waiter of channel for a release with the given
// token. Every node publishes the release and every copy wakes a waiter:
// a waiter whose attempt raced the release (it reached some nodes before
// the release did) must be woken again by the later copies. The local gate
// leaves at most one Acquire per key and Locker waiting here, so this is
// no herd.
//
// from is the node that published it (fromLocal for this Locker's own
// release). While the waiters are parked on the first master (after > 0)
// only its copies of the awaited release, or a later one, wake them.
func (l *Locker) deliver(channel string, token uint64, from int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.chans[channel]
	if st == nil {
		return
	}
	st.last = token
	if from == 0 {
		st.lastFirst = max(st.lastFirst, token)
	}
	if st.after > 0 && (from > 0 || token < st.after) {
		return // not the first master's release of the grant waited for
	}
	st.delivered++
	l.wakeOneLocked(st)
}

// wakeOneLocked wakes the first waiter that has no pending wake-up.
func (l *Locker) wakeOneLocked(st *channelState) {
	for _, w := range st.waiters {
		select {
		case w.wake <- struct{}{}:
			return
		default:
		}
	}
}

// widen subscribes the release channels that only node 0 carries on the
// other nodes too: node 0 failed to answer, so its turns and broadcasts
// may not come, and the waiters fall back to parallel rounds and to every
// node's copies of the releases.
func (l *Locker) widen() {
	type sub struct {
		channel string
		st      *channelState
	}
	var subs []sub
	l.mu.Lock()
	for ch, st := range l.chans {
		if !st.wide {
			st.wide = true
			subs = append(subs, sub{ch, st})
		}
	}
	l.mu.Unlock()
	for _, s := range subs {
		for _, nd := range l.nodes[1:] {
			nd.enqueue(psCmd{subscribe: true, channel: s.channel, st: s.st})
		}
	}
}
