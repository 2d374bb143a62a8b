package redlock

import (
	"slices"
	"strings"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// The wanted signal (lock.Lease.Wanted): a holder hears that a caller waits
// for its key.
//
// Remote waiters: every Locker has one pub/sub channel of its own,
// <prefix>:wanted:<random id>, subscribed on every node's PubSub connection
// (the one that already carries the release channels) the first time the
// Locker makes a grant or renews a lease. A grant records that channel in
// the lock's meta hash (field "notify"); an Acquire's attempt that a holder
// refuses, and that will wait, publishes "<holder handle> <key>" on the
// holder's channel, inside acquire.lua, and sets the meta field "wanted".
// So a waiter costs no extra request (the PUBLISH rides on the attempt it
// makes anyway), a holder costs no subscription of its own, and a key
// nobody waits for costs two small fields in its meta hash. The Locker that
// receives the message marks its live leases of that grant wanted (see
// wantedMessage for one whose reply is still on its way). A waiter publishes at every refused
// attempt (its first, the one right after it subscribed to the release
// channel, and each after a release or at the holder's TTL), so a new
// holder granted while it still waits hears it as soon as the waiter's next
// attempt finds it. The "wanted" field covers what pub/sub may lose (a
// PubSub connection that was reconnecting) and what it cannot reach: renew.lua
// reports it and moves "notify" to the renewing Locker, so a lease rebuilt
// with kit.NewLease and renewed by another Locker is told from that Renew
// on; handoff.lua carries it to the next grant, so a local waiter handed
// the lock while remote waiters still wait (they only retry on a real
// release) is told at once.
//
// Local waiters (callers queued in this Locker's gate) never reach Redis
// while the Locker holds the key: Acquire counts them per key, a caller
// that starts waiting marks the key's live leases of this Locker, and a
// grant made while others of this Locker wait is marked at once — no
// request at all.

// wantState is what a Locker knows of one key for the wanted signal: the
// live leases of it that the Locker tracks (its grants, and rebuilt copies
// it renewed) and how many of its Acquire calls (not TryAcquire) for the
// key are in progress. It exists while either is non-zero.
type wantState struct {
	leases  []*lock.Lease
	callers int
	// busy counts this Locker's requests in flight that may yield a lease
	// of the key to track (attempts, handoffs, renewals): a waiter refused
	// by the grant may publish before the grant's reply is back, so
	// messages for a handle not tracked yet are kept in early, the newest
	// maxEarly of them, while busy > 0, and track consumes them.
	busy  int
	early []string
}

// maxEarly bounds the handles a key keeps heard before their lease was
// tracked (a refused attempt's handle can be one that never becomes a
// lease: its grant failed).
const maxEarly = 4

// wantedChannelFor is the pub/sub channel of a Locker with the given id.
func wantedChannelFor(prefix, id string) string {
	return prefix + ":wanted:" + id
}

// startWaiting counts an Acquire call for key, which may wait, and marks
// the leases of key this Locker holds wanted: the caller will queue behind
// them in the local gate, where no Redis script would tell them.
func (l *Locker) startWaiting(key string) {
	l.mu.Lock()
	st := l.want[key]
	if st == nil {
		st = &wantState{}
		l.want[key] = st
	}
	st.callers++
	held := slices.Clone(st.leases)
	l.mu.Unlock()
	for _, lease := range held {
		kit.MarkWanted(lease)
	}
}

// stopWaiting ends what startWaiting counted, when the Acquire returns.
func (l *Locker) stopWaiting(key string) {
	l.mu.Lock()
	if st := l.want[key]; st != nil {
		st.callers--
		l.dropIfIdleLocked(key, st)
	}
	l.mu.Unlock()
}

func (l *Locker) dropIfIdleLocked(key string, st *wantState) {
	if st.callers <= 0 && st.busy <= 0 && len(st.leases) == 0 {
		delete(l.want, key)
	}
}

// expect marks a request for key in flight whose result track may record
// (see wantState.busy); done ends it.
func (l *Locker) expect(key string) (done func()) {
	l.mu.Lock()
	st := l.want[key]
	if st == nil {
		st = &wantState{}
		l.want[key] = st
	}
	st.busy++
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		st.busy--
		if st.busy == 0 {
			st.early = nil
		}
		l.dropIfIdleLocked(key, st)
		l.mu.Unlock()
	}
}

// track records lease, a live lease of this Locker, until it ends, so
// that wanted messages for its key reach it. self says that the lease is
// the grant of one of the counted Acquire calls (which does not wait for
// itself); remote that Redis reported waiters of the grant. The lease is
// marked wanted at once if Redis said so, if another Acquire of this
// Locker waits for the key, or if another tracked copy of the same grant
// was already told. Tracking a lease twice is a no-op. It costs a slice
// slot and one AfterEnd callback per lease: no goroutine, no request.
func (l *Locker) track(lease *lock.Lease, self, remote bool) {
	l.mu.Lock()
	st := l.want[lease.Key]
	if st == nil {
		st = &wantState{}
		l.want[lease.Key] = st
	}
	if slices.Contains(st.leases, lease) {
		l.mu.Unlock()
		if remote {
			kit.MarkWanted(lease)
		}
		return
	}
	others := st.callers
	if self {
		others--
	}
	wanted := remote || others > 0
	if i := slices.Index(st.early, lease.Handle); i >= 0 {
		st.early = slices.Delete(st.early, i, i+1)
		wanted = true
	}
	for _, x := range st.leases {
		if x.Handle == lease.Handle && x.IsWanted() {
			wanted = true
		}
	}
	st.leases = append(st.leases, lease)
	l.mu.Unlock()
	// Registered after the insertion: a lease that ended meanwhile runs
	// the callback at once, so nothing is left behind.
	lease.AfterEnd(func() { l.untrack(lease) })
	if wanted {
		kit.MarkWanted(lease)
	}
}

// untrack forgets lease once it ended.
func (l *Locker) untrack(lease *lock.Lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.want[lease.Key]
	if st == nil {
		return
	}
	if i := slices.Index(st.leases, lease); i >= 0 {
		st.leases = slices.Delete(st.leases, i, i+1)
	}
	l.dropIfIdleLocked(lease.Key, st)
}

// tracking reports whether lease is tracked (it is not after its end).
func (l *Locker) tracking(lease *lock.Lease) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.want[lease.Key]
	return st != nil && slices.Contains(st.leases, lease)
}

// wantedMessage handles a message on this Locker's wanted channel,
// "<handle> <key>": a caller waits for key and was refused by the grant
// with that handle, so the live leases of that grant this Locker tracks are
// wanted. A grant not tracked yet while a request for key is in flight is
// remembered for track; any other is ignored (it ended, or it is not ours).
// The handle is the lock key's value on the node: a client that can
// subscribe to the channel could read it there anyway.
func (l *Locker) wantedMessage(payload string) {
	handle, key, ok := strings.Cut(payload, " ")
	if !ok {
		return
	}
	var held []*lock.Lease
	l.mu.Lock()
	if st := l.want[key]; st != nil {
		for _, x := range st.leases {
			if x.Handle == handle {
				held = append(held, x)
			}
		}
		if len(held) == 0 && st.busy > 0 && !slices.Contains(st.early, handle) {
			if len(st.early) == maxEarly {
				st.early = slices.Delete(st.early, 0, 1)
			}
			st.early = append(st.early, handle)
		}
	}
	l.mu.Unlock()
	for _, lease := range held {
		kit.MarkWanted(lease)
	}
}

// subscribeWanted subscribes this Locker's wanted channel on every node,
// once: the first grant or renewal asks for it.
func (l *Locker) subscribeWanted() {
	l.wantOnce.Do(func() {
		for _, nd := range l.nodes {
			nd.enqueue(psCmd{own: true, channel: l.wantChannel})
		}
	})
}

// awaitWantedSubscribed waits, before a grant is returned, until enough
// nodes confirmed the wanted channel that a waiter who sleeps behind the
// grant published on one of them (it was refused by a quorum, which
// intersects them), or for at most NodeTimeout. Once they have, it costs
// one channel poll.
func (l *Locker) awaitWantedSubscribed() {
	select {
	case <-l.wantReady:
		return
	default:
	}
	t := time.NewTimer(l.cfg.NodeTimeout)
	defer t.Stop()
	select {
	case <-l.wantReady:
	case <-t.C:
	case <-l.ctx.Done():
	}
}

// wantConfirmedLocked records node n's first confirmation of the wanted
// channel (a reconnect's resubscription confirms it again).
func (l *Locker) wantConfirmedLocked(n *node) {
	if n.wantConfirmed {
		return
	}
	n.wantConfirmed = true
	l.wantNodes++
	if l.wantNodes == len(l.nodes)-l.quorum+1 {
		close(l.wantReady)
	}
}

// SignalsWanted implements lock.WantedSignaler: a holder's Lease.Wanted
// closes when a caller of any Locker waits for its key (see the package
// documentation, "The wanted signal").
func (l *Locker) SignalsWanted() bool { return true }
