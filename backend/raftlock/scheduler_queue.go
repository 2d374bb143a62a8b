package raftlock

// The waiters' side of the scheduler: queueing a waiter or refusing it,
// attaching a granted lease, re-sending an acquire, and abandoning a
// waiter that gives up.

import (
	"fmt"
	"slices"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// enqueue queues w (the scheduler serves it in FIFO order) or refuses it.
func (s *scheduler) enqueue(w *waiter) error {
	s.mu.Lock()
	if !s.ready {
		s.mu.Unlock()
		return s.n.notLeader()
	}
	// The caller's goroutine commits its own grant: no hand-off to another
	// goroutine on the common path.
	defer s.unlockAndRun(true)
	now := s.n.cfg.Clock.Now()
	if w.keys == nil {
		if l, ok := s.ownLiveLocked(w.key, w.handle, now); ok && s.decideLocked(w.key, l.Token, fateResent) {
			s.resendLocked(w, l.Token)
			return nil
		}
		// (A grant that an abandoned copy is releasing is not handed
		// out: w queues for the key like any acquire.)
	}
	keys := w.allKeys()
	for _, k := range keys {
		q := s.queues[k]
		if q != nil && len(q.waiters) >= s.n.cfg.MaxWaitersPerKey {
			return fmt.Errorf("raftlock: %d callers already wait for %q: %w", len(q.waiters), k, lock.ErrUnavailable)
		}
		st := s.stateLocked(k, nil, w.handle, now)
		v := s.compat(&st, w)
		if v == mismatch || (w.try && v != grantable) {
			return s.refusal(k, v, &st, w.opts.Permits)
		}
		if w.try && q != nil && waiting(q) > 0 {
			return s.heldErr(k, st.oldest)
		}
		if !w.try && (v != grantable || (q != nil && waiting(q) > 0)) {
			w.queued = true
			s.wantedLocked(k)
		}
	}
	for _, k := range keys {
		q := s.queues[k]
		if q == nil {
			q = &keyQueue{}
			s.queues[k] = q
		}
		q.waiters = append(q.waiters, w)
	}
	s.waiters++
	for _, k := range keys {
		s.kickLocked(k)
	}
	return nil
}

// ownLiveLocked returns key's live holder with handle, if any.
func (s *scheduler) ownLiveLocked(key, handle string, now int64) (own fsm.HolderRef, found bool) {
	s.n.fsm.EachHolder(key, func(l fsm.HolderRef) bool {
		if l.Expires > now && l.HandleIs(handle) {
			own, found = l, true
			return false
		}
		return true
	})
	return own, found
}

// waiting counts q's waiters that still wait: not granted yet (in flight),
// not given up.
func waiting(q *keyQueue) int {
	n := 0
	for _, w := range q.waiters {
		if !w.gone && !w.inflight {
			n++
		}
	}
	return n
}

// wantedLocked arranges for every lease that holds key, if this node knows
// it, to hear that a caller waits (once mu is released).
func (s *scheduler) wantedLocked(key string) {
	live := func(lease *lock.Lease) (found bool) {
		s.n.fsm.EachHolder(key, func(l fsm.HolderRef) bool {
			found = l.Token == uint64(lease.Token) && l.HandleIs(lease.Handle)
			return !found
		})
		return found
	}
	if lease := s.holders[key]; lease != nil && live(lease) {
		s.tell = append(s.tell, lease)
	}
	for _, lease := range s.shared[key] {
		if live(lease) {
			s.tell = append(s.tell, lease)
		}
	}
	if len(s.sessions) == 0 {
		return
	}
	s.n.fsm.EachHolder(key, func(l fsm.HolderRef) bool {
		id := l.SessionID()
		if id == "" {
			return true
		}
		for _, sess := range s.sessions[id] {
			for _, lease := range kit.SessionLeases(sess, lock.Token(l.Token)) {
				if lease.Key == key && l.HandleIs(lease.Handle) {
					s.tell = append(s.tell, lease)
				}
			}
		}
		return true
	})
}

// keepSessionLocked records sess as the session of a session lease this
// node handed out or renewed (so that its leases hear of waiters).
func (s *scheduler) keepSessionLocked(sess *lock.Session) {
	ss := s.sessions[sess.ID]
	if slices.Contains(ss, sess) {
		return
	}
	ss = slices.DeleteFunc(ss, func(o *lock.Session) bool { return o.Err() != nil })
	s.sessions[sess.ID] = append(ss, sess)
	if len(s.sessions) < 2*max(s.sessSweep, 64) {
		return
	}
	for id, ss := range s.sessions {
		if ss = slices.DeleteFunc(ss, func(o *lock.Session) bool { return o.Err() != nil }); len(ss) == 0 {
			delete(s.sessions, id)
		} else {
			s.sessions[id] = ss
		}
	}
	s.sessSweep = len(s.sessions)
}

// attach records lease as a holder of its key, to be told when a caller
// queues for it: every grant this node hands out, and every lease renewed
// here (a lease granted by an earlier leader, or a copy rebuilt from its
// identity, starts hearing it at its first renewal on this node). A lease
// granted or renewed while callers already wait is told at once.
//
// A session lease is found through its session instead, which keeps it
// until it ends: no entry, and no end callback, per lease.
func (s *scheduler) attach(lease *lock.Lease) {
	s.mu.Lock()
	if sess := lease.Session(); sess != nil {
		s.keepSessionLocked(sess)
		if q := s.queues[lease.Key]; q != nil && liveWaiters(q) > 0 {
			s.wantedLocked(lease.Key)
		}
		s.unlockAndRun(false)
		return
	}
	if lease.Mode == lock.ModeShared {
		if slices.Contains(s.shared[lease.Key], lease) {
			s.mu.Unlock()
			return
		}
		s.shared[lease.Key] = append(s.shared[lease.Key], lease)
	} else {
		if s.holders[lease.Key] == lease {
			s.mu.Unlock()
			return
		}
		s.holders[lease.Key] = lease
	}
	if q := s.queues[lease.Key]; q != nil && liveWaiters(q) > 0 {
		s.wantedLocked(lease.Key)
	}
	s.unlockAndRun(false)
	lease.AfterEnd(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if lease.Mode == lock.ModeShared {
			ls := slices.DeleteFunc(s.shared[lease.Key], func(l *lock.Lease) bool { return l == lease })
			if len(ls) == 0 {
				delete(s.shared, lease.Key)
			} else {
				s.shared[lease.Key] = ls
			}
			return
		}
		if s.holders[lease.Key] == lease {
			delete(s.holders, lease.Key)
		}
	})
}

// liveWaiters counts q's waiters whose callers still wait (not tries, not
// in flight).
func liveWaiters(q *keyQueue) int {
	n := 0
	for _, w := range q.waiters {
		if !w.gone && !w.try && !w.inflight {
			n++
		}
	}
	return n
}

// resendLocked answers an acquire re-sent for a grant that already
// committed (its reply was lost to a timeout or a leader change). It is not
// queued: the waiters it would join wait for this very grant to end. And
// it renews the lock in the answering commit: the caller counts its lease
// from this request, later than the original, so the lock must last a TTL
// from this entry's time, or the caller would believe it holds the key
// after the leader has expired it and granted it to the next in line.
// Should the lock end first (released, expired), w is queued as a new
// acquire.
func (s *scheduler) resendLocked(w *waiter, token uint64) {
	w.resend = true
	epoch := s.epoch
	op := fsm.Op{Type: fsm.OpRenew, Key: w.key, Handle: w.handle, Token: token, TTL: w.opts.TTL}
	s.proposals = append(s.proposals, func() {
		sent := time.Now()
		res, err := s.n.batch.submit([]fsm.Op{op}, s.n.cfg.ApplyTimeout)
		if s.settleResend(w, epoch, token, sent, res, err) {
			if err := s.enqueue(w); err != nil { // the grant ended meanwhile: wait like any acquire
				w.res <- result{err: err}
			}
		}
	})
}

// settleResend delivers the outcome of w's renewal; it reports whether w
// must be queued as a new acquire instead.
func (s *scheduler) settleResend(w *waiter, epoch, token uint64, sent time.Time, res *fsm.ApplyResult, err error) (requeue bool) {
	if testHookResendApplied != nil {
		testHookResendApplied()
	}
	s.mu.Lock()
	defer s.unlockAndRun(false)
	switch {
	case err != nil:
		w.res <- result{err: fmt.Errorf("raftlock: acquire %q: %w", w.key, err)}
	case s.epoch != epoch: // stepDown failed the queued waiters; w was not among them
		w.res <- result{err: fmt.Errorf("raftlock: leadership lost while waiting: %w", s.n.notLeader())}
	case res.Results[0].Status == fsm.StatusOK && w.gone:
		s.releaseLocked(w.key, w.handle, token, nil)
	case res.Results[0].Status == fsm.StatusOK:
		w.res <- result{grants: []*kit.Grant{grantOf(w, w.key, token, sent)}}
	case !w.gone:
		w.resend = false
		return true
	}
	return false
}

func grantOf(w *waiter, key string, token uint64, sent time.Time) *kit.Grant {
	return &kit.Grant{Key: key, Owner: w.opts.Owner, Token: lock.Token(token), Handle: w.handle,
		Value: w.opts.Value, TTL: w.opts.TTL, Mode: w.opts.Mode, Permits: w.opts.Permits, Sent: sent, Session: w.opts.Session}
}

// testHookResendApplied, when set by a test, runs when a re-sent
// acquire's renewal has committed, before its caller is answered.
var testHookResendApplied func()

// abandon is called when w's caller gave up. A waiter still queued is
// removed from every queue; one whose grant is being committed is marked
// gone and released when the grant lands; one already granted is released
// now. Nobody is left holding a lock its caller never saw.
func (s *scheduler) abandon(w *waiter) {
	s.mu.Lock()
	defer s.unlockAndRun(false)
	select {
	case r := <-w.res:
		if s.ready {
			for _, g := range r.grants {
				if s.abandonedGrantLocked(g.Key, uint64(g.Token)) {
					s.releaseLocked(g.Key, g.Handle, uint64(g.Token), nil)
				}
			}
		}
		return
	default:
	}
	w.gone = true
	if w.resend || w.inflight {
		return // its renewal or grant lands and releases it
	}
	if s.removeLocked(w) {
		for _, k := range w.allKeys() {
			s.kickLocked(k)
		}
	}
}

// removeLocked takes w out of every queue it is in; it reports whether it
// was in any.
func (s *scheduler) removeLocked(w *waiter) bool {
	found := false
	for _, k := range w.allKeys() {
		q := s.queues[k]
		if q == nil {
			continue
		}
		if i := slices.Index(q.waiters, w); i >= 0 {
			q.waiters = slices.Delete(q.waiters, i, i+1)
			found = true
		}
	}
	if found {
		s.waiters--
	}
	return found
}
