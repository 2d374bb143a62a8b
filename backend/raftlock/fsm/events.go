package fsm

// The observer's events: what Apply reports to SetObserver's fn.

import (
	"fmt"
)

// EventKind is what happened to a key's holder (an observer Event).
type EventKind uint8

// The event kinds.
const (
	EventGranted  EventKind = iota + 1 // a new grant (a new token)
	EventRenewed                       // a holder's expiry moved (renew, extend-all)
	EventReleased                      // a holder released its lease (or was force-released)
	EventExpired                       // a holder's lease ran out (expire, or taken over by an acquire)
	// EventSession: a session was opened or its expiry moved (renewal,
	// extend-all); Event.Session is the session now, Key is empty.
	EventSession
	// EventSessionEnded: a session ended (closed or expired), after the
	// events of its leases; Event.Session is the session as it was.
	EventSessionEnded
)

// String returns "granted", "renewed", "released" or "expired".
func (k EventKind) String() string {
	switch k {
	case EventGranted:
		return "granted"
	case EventRenewed:
		return "renewed"
	case EventReleased:
		return "released"
	case EventExpired:
		return "expired"
	case EventSession:
		return "session"
	case EventSessionEnded:
		return "session-ended"
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Event is one change of a key's holders, as the observer hears it.
type Event struct {
	Kind EventKind
	Key  string
	// Lock is the holder granted or renewed (as it is now), or the one
	// that left (as it was); Lock.Token is the token granted, renewed or
	// freed. Lock.Handle is set: the observer is the node's own.
	Lock Lock
	// DelayUntil, for an EventExpired of a lease with a LockDelay, is the
	// end of the key's lock-delay (FSM clock, unix ns) when it is still
	// ahead; 0 otherwise.
	DelayUntil int64
	// Session is the session of an EventSession or EventSessionEnded.
	Session SessionInfo
}

// SetObserver registers fn (nil removes it). Apply calls fn synchronously,
// after it has released the FSM's lock (so fn may call the read methods,
// which then see the state after the whole entry), once per change of a
// key's holders, in op order:
//   - acquire that granted a new token: EventGranted (preceded by an
//     EventExpired for each expired holder it took over);
//   - renew, and extend-all for each lock whose expiry it moved (those in
//     no particular order): EventRenewed;
//   - release: EventReleased; expire: EventExpired (with DelayUntil).
//
// An idempotent acquire (same handle, still live) and ops that failed call
// nothing. index is the raft log index of the entry. fn runs on raft's FSM
// goroutine, so it must be cheap, must not block, and must not call Apply,
// Snapshot or Restore. Restore does not call fn: after a restore, rebuild
// derived state with ForEachLock and ForEachDelay.
func (f *FSM) SetObserver(fn func(index uint64, ev Event)) {
	f.mu.Lock()
	f.observer = fn
	f.mu.Unlock()
}

// event is a (key, record) pair: a snapshot's record, a ForEachLock item.
type event struct {
	key string
	rec *record
}

// change is one observer event, converted to an Event after the lock is
// released.
type change struct {
	kind    EventKind
	key     string
	rec     *record
	mode    uint8
	permits uint32
	until   int64
	sess    SessionInfo // EventSession, EventSessionEnded
}

func addChange(ev *[]change, c change) {
	if ev != nil {
		*ev = append(*ev, c)
	}
}
