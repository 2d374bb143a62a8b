package raftlock

// Granting: how the scheduler builds the entries that grant a key's
// waiters (the rounds over a key's queue, single- and multi-key), proposes
// them, settles their outcome, and follows the state machine's events.

import (
	"fmt"
	"slices"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// pending is one waiter's grant in an entry being built: ops are the
// indexes of its acquire ops (in the order of its keys), marker that of its
// OpAcquireAll, or -1.
type pending struct {
	w      *waiter
	ops    []int
	marker int
}

// kickLocked proposes grants to the head of key's queue if they are
// compatible with its holders and no grant is in flight. Called whenever
// the key's state may have changed.
func (s *scheduler) kickLocked(key string) {
	var entry fsm.Entry
	var grants []pending
	s.roundLocked(key, nil, &entry, &grants)
	if len(entry.Ops) > 0 {
		s.proposeLocked(entry, grants, nil)
	}
}

// roundLocked appends to entry the grants of the longest compatible prefix
// of key's queue (or the all-or-nothing grant of a multi-key waiter at its
// head), given that the tokens in freed are released earlier in entry.
// Waiters whose grant is in flight count as holders. A waiter that can
// never be granted (another semaphore N) fails; a try that cannot be
// granted now fails too.
func (s *scheduler) roundLocked(key string, freed map[uint64]bool, entry *fsm.Entry, grants *[]pending) {
	q := s.queues[key]
	if !s.ready || q == nil {
		return
	}
	if len(q.waiters) == 0 {
		delete(s.queues, key)
		return
	}
	now := s.n.cfg.Clock.Now()
	st := s.stateLocked(key, freed, "", now)
	for i := 0; i < len(q.waiters); {
		w := q.waiters[i]
		if w.inflight {
			if w.keys != nil {
				return // a multi-key grant in flight: wait for its outcome
			}
			// Counted as a holder (if its grant has applied already,
			// twice: cautious, and settled at its outcome's kick).
			st.add(w)
			i++
			continue
		}
		if w.keys != nil {
			if q.inflight == 0 && i == 0 {
				if err := s.n.stillOffered(w, w.keys...); err != nil {
					s.removeLocked(w) // from this queue (at i) and its others
					w.res <- result{err: err}
					for _, k := range w.keys {
						if k != key {
							s.kickLocked(k)
						}
					}
					continue // this queue's next waiter, in this round
				}
				s.multiRoundLocked(w, freed, now, entry, grants)
			}
			return
		}
		if err := s.n.stillOffered(w, key); err != nil {
			q.waiters = slices.Delete(q.waiters, i, i+1)
			s.waiters--
			w.res <- result{err: err}
			continue
		}
		v := s.compat(&st, w)
		if v == grantable {
			st.add(w)
			w.inflight = true
			q.inflight++
			*grants = append(*grants, pending{w: w, ops: []int{len(entry.Ops)}, marker: -1})
			entry.Ops = append(entry.Ops, acquireOp(w, key))
			i++
			continue
		}
		if v == mismatch || w.try {
			q.waiters = slices.Delete(q.waiters, i, i+1)
			s.waiters--
			w.res <- result{err: s.refusal(key, v, &st, w.opts.Permits)}
			continue
		}
		if v == delayed {
			s.pushLocked(expiryItem{expires: st.until, key: key})
		}
		return
	}
}

// multiRoundLocked grants w, a multi-key waiter at the head of one of its
// queues, if it heads all of them and every key is free for it.
func (s *scheduler) multiRoundLocked(w *waiter, freed map[uint64]bool, now int64, entry *fsm.Entry, grants *[]pending) {
	for _, k := range w.keys {
		q := s.queues[k]
		if q == nil || q.inflight > 0 || len(q.waiters) == 0 || q.waiters[0] != w {
			return // another key's earlier waiters go first
		}
	}
	for _, k := range w.keys {
		st := s.stateLocked(k, freed, w.handle, now)
		switch v := s.compat(&st, w); {
		case v == grantable:
			continue
		case v == mismatch || w.try:
			s.removeLocked(w)
			w.res <- result{err: s.refusal(k, v, &st, w.opts.Permits)}
			for _, k2 := range w.keys {
				if k2 != k {
					s.kickLocked(k2)
				}
			}
			return
		case v == delayed:
			s.pushLocked(expiryItem{expires: st.until, key: k})
		}
		return
	}
	p := pending{w: w, marker: len(entry.Ops)}
	entry.Ops = append(entry.Ops, fsm.Op{Type: fsm.OpAcquireAll, Token: uint64(len(w.keys))})
	for _, k := range w.keys {
		p.ops = append(p.ops, len(entry.Ops))
		entry.Ops = append(entry.Ops, acquireOp(w, k))
		s.queues[k].inflight = 1
	}
	w.inflight = true
	*grants = append(*grants, p)
}

func acquireOp(w *waiter, key string) fsm.Op {
	op := fsm.Op{Type: fsm.OpAcquire, Key: key, Owner: fsm.TagOwner(w.opts.Identity, w.opts.Owner), Handle: w.handle, TTL: w.opts.TTL, Value: w.opts.Value,
		Mode: uint8(w.opts.Mode), Permits: uint32(w.opts.Permits), LockDelay: w.opts.LockDelay}
	if w.opts.Session != nil {
		op.Session = w.opts.Session.ID
	}
	return op
}

func releaseOp(key, handle string, token uint64) fsm.Op {
	return fsm.Op{Type: fsm.OpRelease, Key: key, Handle: handle, Token: token}
}

// releaseLocked proposes the release of (key, handle, token), handing the
// key to its next waiters in the same entry. done, if not nil, receives the
// outcome.
func (s *scheduler) releaseLocked(key, handle string, token uint64, done chan applied) {
	entry := fsm.Entry{Ops: []fsm.Op{releaseOp(key, handle, token)}}
	var grants []pending
	s.roundLocked(key, map[uint64]bool{token: true}, &entry, &grants)
	s.proposeLocked(entry, grants, done)
}

// applied is the outcome of a proposal.
type applied struct {
	res *fsm.ApplyResult
	err error
}

// unlockAndRun releases mu and runs the commits proposed under it: the
// first on this goroutine if inline, the others on goroutines of their own.
func (s *scheduler) unlockAndRun(inline bool) {
	ps, tell := s.proposals, s.tell
	s.proposals, s.tell = nil, nil
	s.mu.Unlock()
	for _, lease := range tell {
		kit.MarkWanted(lease)
	}
	for i, p := range ps {
		if inline && i == 0 {
			defer p()
			continue
		}
		go p()
	}
}

// proposeLocked queues the commit of entry, to run once mu is released.
// grants are the waiters its acquire ops are for; done (buffered), if not
// nil, gets the outcome.
func (s *scheduler) proposeLocked(entry fsm.Entry, grants []pending, done chan applied) {
	epoch := s.epoch
	s.proposals = append(s.proposals, func() {
		sent := time.Now() // before the entry is stamped: the leases' Sent
		res, err := s.n.batch.submit(entry.Ops, s.n.cfg.ApplyTimeout)
		if done != nil {
			done <- applied{res, err}
		}
		if len(grants) == 0 {
			return
		}
		s.mu.Lock()
		defer s.unlockAndRun(false)
		if s.epoch != epoch {
			return // leadership changed: stepDown failed these waiters
		}
		kick := map[string]bool{}
		for _, p := range grants {
			s.settleLocked(p, sent, res, err)
			for _, k := range p.w.allKeys() {
				kick[k] = true
			}
		}
		for k := range kick {
			s.kickLocked(k)
		}
	})
}

// settleLocked delivers the outcome of p's granting ops. The caller kicks
// the waiter's keys afterwards.
func (s *scheduler) settleLocked(p pending, sent time.Time, res *fsm.ApplyResult, err error) {
	w := p.w
	if !w.inflight {
		return
	}
	w.inflight = false
	for _, k := range w.allKeys() {
		if q := s.queues[k]; q != nil && q.inflight > 0 {
			q.inflight--
		}
	}
	finish := func(r result) {
		s.removeLocked(w)
		w.res <- r
	}
	if err != nil {
		// Outcome unknown (a timeout): the grant may still commit, and
		// then expires at its TTL. The caller may re-send.
		finish(result{err: fmt.Errorf("raftlock: acquire %q: %w", w.key, err)})
		return
	}
	r := res.Results[p.ops[0]]
	if p.marker >= 0 {
		r = res.Results[p.marker]
	}
	switch r.Status {
	case fsm.StatusOK:
		keys := w.allKeys()
		gs := make([]*kit.Grant, len(keys))
		for i, k := range keys {
			ri := res.Results[p.ops[i]]
			if ri.Key == k {
				k = ri.Key // the table's bytes: the lease shares them
			}
			gs[i] = grantOf(w, k, ri.Token, sent)
		}
		if w.gone {
			s.removeLocked(w)
			for _, g := range gs {
				if s.abandonedGrantLocked(g.Key, uint64(g.Token)) {
					s.releaseLocked(g.Key, g.Handle, uint64(g.Token), nil)
				}
			}
			return
		}
		finish(result{grants: gs})
	case fsm.StatusHeld, fsm.StatusDelayed:
		if w.try || w.gone {
			if r.Status == fsm.StatusDelayed {
				finish(result{err: &lock.DelayedError{Key: w.key, Until: time.Now().Add(time.Duration(r.Expires - s.n.cfg.Clock.Now()))}})
			} else {
				finish(result{err: &lock.HeldError{Key: w.key, Owner: plainOwner(r.Owner), Token: lock.Token(r.Token)}})
			}
			return
		}
		if r.Status == fsm.StatusDelayed {
			for _, k := range w.allKeys() {
				s.pushLocked(expiryItem{expires: r.Expires, key: k})
			}
		}
		// Otherwise w stays at the head until the holders go.
	case fsm.StatusPermitsMismatch:
		finish(result{err: fmt.Errorf("raftlock: %q is held with other permits than %d: %w", w.key, w.opts.Permits, lock.ErrPermitsMismatch)})
	case fsm.StatusNoSession:
		finish(result{err: sessionErr(w.key, w.opts.Session)})
	default:
		finish(result{err: fmt.Errorf("raftlock: acquire %q refused by the state machine (status %s)", w.key, r.Status)})
	}
}

// observe is the state machine's callback for every change of a key's
// holders, on every node; the leader uses it to track expiry and
// lock-delays and to serve the key's next waiters, and every node feeds
// its watches.
func (s *scheduler) observe(index uint64, ev fsm.Event) {
	s.n.watches.dispatch(index, ev)
	s.n.auditObserved(ev)
	s.mu.Lock()
	defer s.unlockAndRun(false) // never commit on the state machine's goroutine
	if !s.active {
		return
	}
	switch ev.Kind {
	case fsm.EventSession:
		s.pushLocked(expiryItem{expires: ev.Session.Expires, session: ev.Session.ID})
	case fsm.EventSessionEnded:
		// Its items are skipped when they surface.
	case fsm.EventGranted, fsm.EventRenewed:
		if ev.Lock.Session == "" { // a session's leases expire with it
			s.pushLocked(expiryItem{expires: ev.Lock.Expires, token: ev.Lock.Token, key: ev.Key})
		}
	default:
		if ev.DelayUntil > 0 {
			s.pushLocked(expiryItem{expires: ev.DelayUntil, key: ev.Key})
		}
		s.kickLocked(ev.Key)
	}
}
