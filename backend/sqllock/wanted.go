package sqllock

import (
	"strconv"
	"strings"
	"sync"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// The wanted signal (lock.Lease.Wanted). A holder is told that a caller
// waits for its key in one of two ways, neither of which costs a key that
// nobody waits for anything at the database:
//
//   - A waiter of another Locker (or of this one, at the database) marks
//     the row contended (waiters.sql) when its attempt finds the key held.
//     The first mark of a grant also sends a notification on the table's
//     channel, "token<TAB>key", inside the same statement; every Locker
//     already LISTENs there for releases, and the one that holds that
//     grant marks its lease. A grant made while the row is marked (a
//     handoff, a re-sent acquire) and every renewal read the mark back in
//     their own statement, so the new holder, a lease rebuilt with
//     kit.NewLease and passed to Renew, and a holder whose notification
//     was lost learn it too. After the listening connection is replaced,
//     one query (wanted.sql) reads the marks of every key this Locker
//     holds.
//   - A caller of this Locker that starts waiting for a key this Locker
//     holds (it queues in the local gate) marks the lease in process, with
//     no round trip; and a grant made while callers of this Locker wait
//     for its key is marked as it is made.
//
// The mark stays on the row until the grant ends (release, expiry takeover)
// even if the waiter gives up; a handoff inside this Locker keeps it, so a
// lease handed over after a waiter of another Locker gave up may be told
// it is wanted by nobody. Waiters that still wait mark every new grant
// again on their next attempt.
//
// Cost: per held lease, one map entry and one AfterEnd callback, removed
// when the lease ends; no goroutine. Per Acquire, a counter per key under
// a mutex. Per waiter at the database, nothing beyond the existing
// waiters.sql round trip: one notification per grant that someone waits
// for (the first mark), fanned out to every Locker of the table.

// wanted is the bookkeeping of one Locker: its live leases and the callers
// waiting for each key.
type wanted struct {
	mu sync.Mutex
	// held are this Locker's live leases by key: at most one grant per key
	// is live, but the Lease that granted it and copies rebuilt from its
	// fields (Renew) may both be here; tracked says which.
	held map[string][]tracked
	// waiting counts the Acquire calls (not TryAcquire) in progress per
	// key, the caller that is being granted included.
	waiting map[string]int
	// early are the latest notices that matched no tracked lease, a ring
	// of earlyNotices: a waiter's mark can reach the listener before the
	// grant's own statement has returned to its caller (the mark follows
	// the grant's commit, the answer to the grantee may be slower), so
	// granted looks here too. Notices for other Lockers' grants pass
	// through the ring and are overwritten.
	early     [earlyNotices]notice
	earlyNext int
}

// notice is one wanted notification: a waiter marked the grant (key, token).
type notice struct {
	key   string
	token lock.Token
}

// earlyNotices bounds the ring of unmatched notices. A notice is early by
// at most the time between a grant's commit and its answer reaching the
// grantee; the ring holds the last 256 notices of the table.
const earlyNotices = 256

// tracked is one lease told when its grant is wanted.
type tracked struct {
	lease *lock.Lease
	// rebuilt: first seen in a Renew, not granted here. Only the latest
	// rebuilt copy of a grant is kept: a REST client's every renewal
	// rebuilds one, and the older copies have been dropped by their caller.
	rebuilt bool
}

func newWanted() *wanted {
	return &wanted{held: make(map[string][]tracked), waiting: make(map[string]int)}
}

// SignalsWanted implements lock.WantedSignaler: a holder hears that a
// caller waits for its key, through the row mark and notification of
// waiters at the database and in process for callers of the same Locker.
func (l *Locker) SignalsWanted() bool { return true }

var _ lock.WantedSignaler = (*Locker)(nil)

// startWaiting counts a caller of Acquire for key and marks the leases of
// key this Locker holds: the caller will wait for them (in the local gate,
// or at the database behind a lease taken with TryAcquire). A lease with
// the caller's own handle is spared: that caller re-sends its grant's
// acquire and waits for nobody. The returned function uncounts it.
func (w *wanted) startWaiting(key, handle string) (done func()) {
	w.mu.Lock()
	w.waiting[key]++
	var marks []*lock.Lease
	for _, t := range w.held[key] {
		if handle == "" || t.lease.Handle != handle {
			marks = append(marks, t.lease)
		}
	}
	w.mu.Unlock()
	markAll(marks)
	return func() {
		w.mu.Lock()
		if w.waiting[key] <= 1 {
			delete(w.waiting, key)
		} else {
			w.waiting[key]--
		}
		w.mu.Unlock()
	}
}

// granted tracks a lease this Locker was granted and marks it at once when
// the row was marked (contended) or another caller of this Locker waits
// for its key. counted says whether the grantee is one of the callers
// startWaiting counted (an Acquire, not a TryAcquire).
func (w *wanted) granted(lease *lock.Lease, contended, counted bool) {
	w.mu.Lock()
	w.held[lease.Key] = append(w.held[lease.Key], tracked{lease: lease})
	for _, n := range w.early {
		if n.token == lease.Token && n.key == lease.Key {
			contended = true
		}
	}
	others := w.waiting[lease.Key]
	if counted {
		others--
	}
	w.mu.Unlock()
	lease.AfterEnd(func() { w.untrack(lease) })
	if contended || others > 0 {
		kit.MarkWanted(lease)
	}
}

// renewed tracks lease, if it is a copy rebuilt from its grant's fields
// that this Locker does not know yet, and marks it when the renewal found
// the row marked.
func (w *wanted) renewed(lease *lock.Lease, contended bool) {
	w.mu.Lock()
	ts := w.held[lease.Key]
	known := false
	for _, t := range ts {
		if t.lease == lease {
			known = true
			break
		}
	}
	if !known {
		// The copy replaces an older rebuilt copy of the same grant.
		kept := ts[:0:0]
		for _, t := range ts {
			if !t.rebuilt || t.lease.Handle != lease.Handle {
				kept = append(kept, t)
			}
		}
		w.held[lease.Key] = append(kept, tracked{lease: lease, rebuilt: true})
	}
	w.mu.Unlock()
	if !known {
		lease.AfterEnd(func() { w.untrack(lease) })
	}
	if contended {
		kit.MarkWanted(lease)
	}
}

// untrack forgets lease (its AfterEnd callback).
func (w *wanted) untrack(lease *lock.Lease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ts := w.held[lease.Key]
	for i, t := range ts {
		if t.lease == lease {
			ts = append(ts[:i:i], ts[i+1:]...)
			break
		}
	}
	if len(ts) == 0 {
		delete(w.held, lease.Key)
	} else {
		w.held[lease.Key] = ts
	}
}

// notice marks the leases of the grant (key, token): a waiter marked its
// row.
func (w *wanted) notice(key string, token lock.Token) {
	w.mu.Lock()
	var marks []*lock.Lease
	for _, t := range w.held[key] {
		if t.lease.Token == token {
			marks = append(marks, t.lease)
		}
	}
	if len(marks) == 0 {
		w.early[w.earlyNext] = notice{key: key, token: token}
		w.earlyNext = (w.earlyNext + 1) % earlyNotices
	}
	w.mu.Unlock()
	markAll(marks)
}

// markAll marks leases outside w.mu: kit.MarkWanted runs the leases'
// AfterWanted callbacks.
func markAll(ls []*lock.Lease) {
	for _, l := range ls {
		kit.MarkWanted(l)
	}
}

// unwantedKeys are the keys of tracked leases not yet wanted.
func (w *wanted) unwantedKeys() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var keys []string
	for k, ts := range w.held {
		for _, t := range ts {
			if !t.lease.IsWanted() {
				keys = append(keys, k)
				break
			}
		}
	}
	return keys
}

// parseWanted splits a wanted notification's payload, "token<TAB>key"; ok
// is false for a release notification (the bare key).
func parseWanted(payload string) (key string, token lock.Token, ok bool) {
	tok, key, found := strings.Cut(payload, "\t")
	if !found {
		return "", 0, false
	}
	n, err := strconv.ParseUint(tok, 10, 64)
	if err != nil {
		return "", 0, false
	}
	return key, lock.Token(n), true
}

// recheckBatch is how many keys one wanted.sql statement reads.
const recheckBatch = 1000

// startRecheck runs recheckWanted in the background, once more if the
// listening connection is replaced again while it runs, never twice at a
// time.
func (l *Locker) startRecheck() {
	if l.rechecks.Add(1) > 1 {
		return // the running recheck goes again
	}
	l.life.Go(func() {
		for {
			n := l.rechecks.Load()
			l.recheckWanted()
			if l.rechecks.Add(-n) == 0 {
				return
			}
		}
	})
}

// recheckWanted reads the marks of every key this Locker holds a lease on
// not yet wanted, in batches of recheckBatch keys: run after the listening
// connection was replaced, since wanted notifications sent meanwhile are
// lost. Errors are logged; the leases' next renewals read the mark too.
func (l *Locker) recheckWanted() {
	keys := l.wanted.unwantedKeys()
	for len(keys) > 0 && l.ctx.Err() == nil {
		batch := keys[:min(len(keys), recheckBatch)]
		keys = keys[len(batch):]
		c, cancel := l.roundTrip(l.ctx)
		rows, err := l.pool.Query(c, l.q.wanted, batch)
		if err == nil {
			var key string
			var token int64
			for rows.Next() {
				if err = rows.Scan(&key, &token); err != nil {
					break
				}
				l.wanted.notice(key, lock.Token(token))
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		cancel()
		if err != nil && l.ctx.Err() == nil {
			l.cfg.Logger.Warn("sqllock: reading wanted marks after the listening connection was replaced", "table", l.names.plain, "err", err)
			return
		}
	}
}
