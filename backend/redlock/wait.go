package redlock

import (
	"context"
	"time"
)

// channelState is one release channel that this Locker's waiters watch.
type channelState struct {
	refs        int
	target      []uint64        // per node: the SUBSCRIBE count that covers this state
	ready       []chan struct{} // per node: closed once subscribed
	readyClosed []bool
	waiters     []*waiter // in arrival order
	last        uint64    // token of the last release delivered (informational)
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

// join registers a waiter on channel, subscribing on every node if it is
// the channel's first waiter.
func (l *Locker) join(channel string) *waiter {
	l.mu.Lock()
	st := l.chans[channel]
	fresh := st == nil
	if fresh {
		n := len(l.nodes)
		st = &channelState{target: make([]uint64, n), ready: make([]chan struct{}, n), readyClosed: make([]bool, n)}
		for i := range st.ready {
			st.ready[i] = make(chan struct{})
		}
		l.chans[channel] = st
	}
	st.refs++
	w := &waiter{channel: channel, st: st, wake: make(chan struct{}, 1)}
	st.waiters = append(st.waiters, w)
	l.mu.Unlock()
	if fresh {
		for _, nd := range l.nodes {
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
	l.mu.Unlock()
	if last && l.ctx.Err() == nil {
		for _, nd := range l.nodes {
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
	got := 0
	for _, ch := range w.st.ready {
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
func (l *Locker) deliver(channel string, token uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.chans[channel]
	if st == nil {
		return
	}
	st.last = token
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
