package raftlock

import (
	"container/heap"
	"fmt"
	"time"

	"sync"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/lock"
)

// scheduler is the leader's side of locking (the design's pending-lock queue
// and its release monitors, docs/raftlock.md): a FIFO queue of waiters per key, at most one
// granting entry in flight per key, and one timer for the expiry of every
// held lock (a min-heap, not a goroutine per lock). It is active only while
// the node leads; on a follower every call is redirected to the leader.
//
// Grants are delivered only after their entry commits, so a leader that is
// cut off from the majority cannot hand out a lock it does not own.
type scheduler struct {
	n *Node

	mu      sync.Mutex
	epoch   uint64 // bumped at every leadership change; stale outcomes are dropped
	active  bool   // this node is the Raft leader
	ready   bool   // ... and has taken over: earlier entries applied, leases extended, timers rebuilt
	queues  map[string]*keyQueue
	expiry  expiryHeap
	timer   *time.Timer
	waiters int // total queued, for metrics

	// proposals are commits queued under mu, run by unlockAndRun once mu
	// is released (a commit must never wait while holding mu).
	proposals []func()

	// holders are the leases of held keys that this node handed out or
	// renewed, by key: the holders to tell when a caller queues for their
	// key (Lease.Wanted). An entry leaves when its lease ends.
	holders map[string]*lock.Lease
	// tell are the holders to mark wanted once mu is released (marking
	// runs the lease's callbacks, which must not run under mu).
	tell []*lock.Lease
}

// keyQueue is one key's waiters, oldest first. inflight is the waiter whose
// grant is being committed, if any: it stays at the head until the outcome.
type keyQueue struct {
	waiters  []*waiter
	inflight *waiter
}

// waiter is one blocked (or trying) Acquire.
type waiter struct {
	key    string
	opts   lock.AcquireOptions
	handle string
	try    bool        // TryAcquire: give up instead of waiting for a holder
	res    chan result // buffered: the scheduler never blocks on delivery
	gone   bool        // the caller gave up; a grant that lands is released
	resend bool        // re-sent acquire of its live grant: answered outside the queue
	sent   time.Time   // when its granting entry was proposed (the lease's Sent)
}

type result struct {
	grant *lock.Grant
	err   error
}

func newScheduler(n *Node) *scheduler {
	return &scheduler{n: n, queues: make(map[string]*keyQueue), holders: make(map[string]*lock.Lease)}
}

func (s *scheduler) isReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

// becomeLeader takes over after an election (graceful recovery):
// apply everything earlier leaders committed, extend every lease by its full
// TTL on this leader's clock, record this node's API address, and rebuild
// the expiry timers from the replicated lock table. Waiters of the old
// leader re-send their requests to this one.
func (s *scheduler) becomeLeader() {
	s.mu.Lock()
	s.epoch++
	epoch := s.epoch
	s.active = true
	s.mu.Unlock()

	n := s.n
	if err := n.await(n.raft.Barrier(n.cfg.ApplyTimeout), 0); err != nil {
		n.log.Warn("leader takeover: barrier failed", "err", err)
		return
	}
	// The new leader cannot know how much of each TTL ran on the old
	// leader's clock, or how far apart the two clocks are. Extending every
	// live lease to a full TTL on this leader's clock is always safe
	// (holders judge their own deadline) and costs at most one TTL of
	// availability for locks whose holders crashed with the old leader.
	// Leases already expired by the state machine's clock stay expired and
	// are released by the rebuilt timers.
	res, err := n.apply(fsm.Entry{Ops: []fsm.Op{
		{Type: fsm.OpExtendAll},
		{Type: fsm.OpSetMember, Key: n.cfg.ID, Value: []byte(n.cfg.APIAddr)},
	}}, n.cfg.ApplyTimeout)
	if err != nil {
		n.log.Warn("leader takeover: extending leases failed", "err", err)
		return
	}
	_ = res

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch != epoch {
		return
	}
	s.expiry = s.expiry[:0]
	n.fsm.ForEachLock(func(l fsm.Lock) bool {
		s.expiry = append(s.expiry, expiryItem{expires: l.Expires, token: l.Token, key: l.Key})
		return true
	})
	heap.Init(&s.expiry)
	s.ready = true
	s.armLocked()
	n.log.Info("leader ready", "held_locks", len(s.expiry), "last_token", n.fsm.LastToken())
}

// stepDown ends this node's leadership duties: it stops granting at once and
// fails every waiter with a redirect to the new leader (once known, within
// two election timeouts), so that clients re-send their requests there.
func (s *scheduler) stepDown() {
	s.mu.Lock()
	s.epoch++
	s.active, s.ready = false, false
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.expiry = nil
	var stranded []*waiter
	for _, q := range s.queues {
		stranded = append(stranded, q.waiters...)
	}
	s.queues = make(map[string]*keyQueue)
	s.waiters = 0
	s.mu.Unlock()
	if len(stranded) == 0 {
		return
	}
	go func() {
		deadline := time.Now().Add(2 * s.n.cfg.ElectionTimeout)
		for time.Now().Before(deadline) {
			if id, _ := s.n.Leader(); id != "" && id != s.n.cfg.ID {
				break
			}
			select {
			case <-s.n.shutdown:
				deadline = time.Now()
			case <-time.After(10 * time.Millisecond):
			}
		}
		err := fmt.Errorf("raftlock: leadership lost while waiting: %w", s.n.notLeader())
		for _, w := range stranded {
			w.res <- result{err: err}
		}
	}()
}

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
	if l, ok := s.n.fsm.Lock(w.key); ok && l.Expires > s.n.cfg.Clock.Now() && fsm.EqualHandles(l.Handle, w.handle) {
		s.resendLocked(w, l.Token)
		return nil
	}
	q := s.queues[w.key]
	if q == nil {
		q = &keyQueue{}
		s.queues[w.key] = q
	}
	if w.try && (len(q.waiters) > 0 || s.heldByOtherLocked(w.key, w.handle)) {
		return s.heldErrLocked(w.key)
	}
	if len(q.waiters) >= s.n.cfg.MaxWaitersPerKey {
		return fmt.Errorf("raftlock: %d callers already wait for %q: %w", len(q.waiters), w.key, lock.ErrUnavailable)
	}
	q.waiters = append(q.waiters, w)
	s.waiters++
	if !w.try {
		s.wantedLocked(w.key)
	}
	s.kickLocked(w.key, q)
	return nil
}

// wantedLocked arranges for the lease that holds key, if this node knows
// it, to hear that a caller waits (once mu is released).
func (s *scheduler) wantedLocked(key string) {
	lease := s.holders[key]
	if lease == nil {
		return
	}
	if l, ok := s.n.fsm.Lock(key); ok && l.Token == uint64(lease.Token) && fsm.EqualHandles(l.Handle, lease.Handle) {
		s.tell = append(s.tell, lease)
	}
}

// attach records lease as the holder of its key, to be told when a caller
// queues for it: every grant this node hands out, and every lease renewed
// here (a lease granted by an earlier leader, or a copy rebuilt from its
// identity, starts hearing it at its first renewal on this node). A lease
// granted or renewed while callers already wait is told at once.
func (s *scheduler) attach(lease *lock.Lease) {
	s.mu.Lock()
	if s.holders[lease.Key] == lease {
		s.mu.Unlock()
		return
	}
	s.holders[lease.Key] = lease
	if q := s.queues[lease.Key]; q != nil && liveWaiters(q) > 0 {
		s.wantedLocked(lease.Key)
	}
	s.unlockAndRun(false)
	lease.AfterEnd(func() {
		s.mu.Lock()
		if s.holders[lease.Key] == lease {
			delete(s.holders, lease.Key)
		}
		s.mu.Unlock()
	})
}

// liveWaiters counts q's waiters whose callers still wait.
func liveWaiters(q *keyQueue) int {
	n := 0
	for _, w := range q.waiters {
		if !w.gone && !w.try {
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
		w.res <- result{grant: &lock.Grant{Key: w.key, Owner: w.opts.Owner, Token: lock.Token(token), Handle: w.handle,
			Value: w.opts.Value, TTL: w.opts.TTL, Sent: sent}}
	case !w.gone:
		w.resend = false
		return true
	}
	return false
}

// abandon is called when w's caller gave up. A waiter still queued is
// removed; one whose grant is being committed is marked gone and released
// when the grant lands; one already granted is released now. Nobody is left
// holding a lock its caller never saw.
func (s *scheduler) abandon(w *waiter) {
	s.mu.Lock()
	defer s.unlockAndRun(false)
	select {
	case r := <-w.res:
		if r.grant != nil && s.ready {
			s.releaseLocked(w.key, r.grant.Handle, uint64(r.grant.Token), nil)
		}
		return
	default:
	}
	if w.resend {
		w.gone = true // its renewal lands and releases the grant
		return
	}
	q := s.queues[w.key]
	if q == nil {
		return
	}
	if q.inflight == w {
		w.gone = true
		return
	}
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			s.waiters--
			break
		}
	}
	s.kickLocked(w.key, q)
}

// heldByOtherLocked reports whether key has a live holder, by this leader's
// clock, other than the grant with handle (a re-sent acquire of a grant
// that already committed is answered with that grant).
func (s *scheduler) heldByOtherLocked(key, handle string) bool {
	l, ok := s.n.fsm.Lock(key)
	return ok && l.Expires > s.n.cfg.Clock.Now() && !fsm.EqualHandles(l.Handle, handle)
}

func (s *scheduler) heldErrLocked(key string) error {
	if l, ok := s.n.fsm.Lock(key); ok {
		return &lock.HeldError{Key: key, Owner: l.Owner, Token: lock.Token(l.Token),
			Expires: time.Now().Add(time.Duration(l.Expires - s.n.cfg.Clock.Now()))}
	}
	return &lock.HeldError{Key: key}
}

// kickLocked proposes a grant to the head of q if the key is free and no
// grant is in flight. Called whenever the key's state may have changed.
func (s *scheduler) kickLocked(key string, q *keyQueue) {
	if !s.ready || q.inflight != nil {
		return
	}
	for len(q.waiters) > 0 && q.waiters[0].gone {
		q.waiters = q.waiters[1:]
		s.waiters--
	}
	if len(q.waiters) == 0 {
		delete(s.queues, key)
		return
	}
	w := q.waiters[0]
	if s.heldByOtherLocked(key, w.handle) {
		return // the holder's release or expiry kicks again
	}
	q.inflight = w
	s.proposeLocked(fsm.Entry{Ops: []fsm.Op{acquireOp(w)}}, map[int]*waiter{0: w}, nil)
}

func acquireOp(w *waiter) fsm.Op {
	return fsm.Op{Type: fsm.OpAcquire, Key: w.key, Owner: w.opts.Owner, Handle: w.handle, TTL: w.opts.TTL, Value: w.opts.Value}
}

func releaseOp(key, handle string, token uint64) fsm.Op {
	return fsm.Op{Type: fsm.OpRelease, Key: key, Handle: handle, Token: token}
}

// handoffLocked appends to entry a grant of key to its next waiter, so that
// a release and the next grant commit together: one commit per handoff.
func (s *scheduler) handoffLocked(key string, entry *fsm.Entry, grants map[int]*waiter) {
	q := s.queues[key]
	if q == nil || q.inflight != nil {
		return
	}
	for len(q.waiters) > 0 && q.waiters[0].gone {
		q.waiters = q.waiters[1:]
		s.waiters--
	}
	if len(q.waiters) == 0 {
		return
	}
	w := q.waiters[0]
	q.inflight = w
	grants[len(entry.Ops)] = w
	entry.Ops = append(entry.Ops, acquireOp(w))
}

// releaseLocked proposes the release of (key, handle, token), handing the
// key to its next waiter in the same entry. done, if not nil, receives the
// outcome.
func (s *scheduler) releaseLocked(key, handle string, token uint64, done chan applied) {
	entry := fsm.Entry{Ops: []fsm.Op{releaseOp(key, handle, token)}}
	grants := map[int]*waiter{}
	s.handoffLocked(key, &entry, grants)
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
		lease.MarkWanted()
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
// grants maps op indexes to the waiters those acquire ops are for; done
// (buffered), if not nil, gets the outcome.
func (s *scheduler) proposeLocked(entry fsm.Entry, grants map[int]*waiter, done chan applied) {
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
		for i, w := range grants {
			s.settleLocked(w, sent, res, i, err)
		}
	})
}

// settleLocked delivers the outcome of w's granting op.
func (s *scheduler) settleLocked(w *waiter, sent time.Time, res *fsm.ApplyResult, i int, err error) {
	q := s.queues[w.key]
	if q == nil || q.inflight != w {
		return
	}
	q.inflight = nil
	pop := func() {
		q.waiters = q.waiters[1:]
		s.waiters--
	}
	switch {
	case err != nil:
		// Outcome unknown (a timeout): the grant may still commit, and
		// then expires at its TTL. The caller may re-send.
		pop()
		w.res <- result{err: fmt.Errorf("raftlock: acquire %q: %w", w.key, err)}
	case res.Results[i].Status == fsm.StatusOK:
		pop()
		r := res.Results[i]
		g := &lock.Grant{Key: w.key, Owner: w.opts.Owner, Token: lock.Token(r.Token), Handle: w.handle,
			Value: w.opts.Value, TTL: w.opts.TTL, Sent: sent}
		if w.gone {
			s.releaseLocked(w.key, w.handle, r.Token, nil)
			return
		}
		w.res <- result{grant: g}
	case res.Results[i].Status == fsm.StatusHeld:
		if w.try || w.gone {
			pop()
			w.res <- result{err: &lock.HeldError{Key: w.key, Owner: res.Results[i].Owner, Token: lock.Token(res.Results[i].Token)}}
		}
		// Otherwise w stays at the head until the holder goes.
	default:
		pop()
		w.res <- result{err: fmt.Errorf("raftlock: acquire %q refused by the state machine (status %d)", w.key, res.Results[i].Status)}
	}
	s.kickLocked(w.key, q)
}

// observe is the state machine's callback for every change of a key's
// holder, on every node; the leader uses it to track expiry and to serve
// the key's next waiter.
func (s *scheduler) observe(index uint64, key string, l *fsm.Lock) {
	s.mu.Lock()
	defer s.unlockAndRun(false) // never commit on the state machine's goroutine
	if !s.active {
		return
	}
	if l != nil {
		s.pushLocked(expiryItem{expires: l.Expires, token: l.Token, key: key})
		return
	}
	if q := s.queues[key]; q != nil {
		s.kickLocked(key, q)
	}
}
