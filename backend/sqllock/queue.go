package sqllock

import (
	"context"
	"time"
)

// One FIFO order of waiters per key, across modes and Lockers (the queue
// table, schema.sql). A caller at the database whose attempt is refused
// joins the key's queue with a ticket drawn from the token sequence
// (waiters.sql for exclusive callers, the shared path for shared ones),
// and passes the ticket with each later attempt: an attempt is granted only
// when no live waiter with a smaller ticket is queued for the key (a caller
// without a ticket: when nobody is queued), and the grant removes its
// ticket. So a waiting writer is not overtaken by readers that came after
// it, nor readers by later writers. The local gate still queues a Locker's
// own exclusive callers in process; only its first goes to the database,
// and a lease is handed to the next of them only while nobody is queued at
// the database. Multi-key callers do not queue (they would hold one key's
// place while waiting for another): they wait until every key is free of
// holders and queued waiters.
//
// A queued waiter refreshes its ticket's expiry at every attempt and
// attempts at least every queueRefresh; a waiter that stopped (crashed,
// partitioned) stops counting after queueTTL, and one that gave up removes
// its ticket (dequeue.sql) and wakes the waiters behind it.

const (
	holdersSuffix = "_holders"
	queueSuffix   = "_queue"

	// queueTTL is how long a ticket counts without being refreshed.
	queueTTL = 3 * time.Second
	// queueRefresh is the longest a queued waiter sleeps between attempts.
	queueRefresh = time.Second
)

// ticketState is the ticket of the caller of one key at the database
// through the local gate, shared by the gate's attempts for that key.
type ticketState struct {
	ticket int64
	refs   int
}

// ticket returns the gate's ticket for key (0: none yet).
func (l *Locker) ticket(key string) int64 {
	l.tmu.Lock()
	defer l.tmu.Unlock()
	if s := l.tickets[key]; s != nil {
		return s.ticket
	}
	return 0
}

// setTicket records the gate's ticket for key (0 after a grant removed it).
func (l *Locker) setTicket(key string, t int64) {
	l.tmu.Lock()
	defer l.tmu.Unlock()
	if s := l.tickets[key]; s != nil {
		s.ticket = t
	}
}

// holdTicket counts a wait of the gate for key; the returned function ends
// it, and the last one to end removes a ticket still queued.
func (l *Locker) holdTicket(key string) (release func()) {
	l.tmu.Lock()
	s := l.tickets[key]
	if s == nil {
		s = &ticketState{}
		l.tickets[key] = s
	}
	s.refs++
	l.tmu.Unlock()
	return func() {
		l.tmu.Lock()
		s.refs--
		t := int64(0)
		if s.refs == 0 {
			t = s.ticket
			delete(l.tickets, key)
		}
		l.tmu.Unlock()
		if t != 0 {
			l.dequeue(key, t)
		}
	}
}

// dequeue removes a ticket, before the call that gave up returns (also
// when the Locker is closing: the call still holds the pool open), within
// QueryTimeout; if it fails, the ticket stops counting after queueTTL.
func (l *Locker) dequeue(key string, ticket int64) {
	c, cancel := l.roundTrip(context.WithoutCancel(l.ctx))
	defer cancel()
	if _, err := l.pool.Exec(c, l.q.dequeue, key, ticket, l.names.channel); err != nil {
		l.cfg.Logger.Warn("sqllock: leaving a key's queue", "key", key, "err", err)
	}
}
