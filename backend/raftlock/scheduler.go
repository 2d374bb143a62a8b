package raftlock

import (
	"container/heap"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/lock"
)

// scheduler is the leader's side of locking (the design's pending-lock queue
// and its release monitors, docs/raftlock.md): a FIFO queue of waiters per
// key, shared by both modes, at most one granting entry in flight per key,
// and one timer for the expiry of every held lock and the end of every
// lock-delay (a min-heap, not a goroutine per lock). It is active only
// while the node leads; on a follower every call is redirected to the
// leader.
//
// A waiter is granted only when it is compatible with the key's holders
// and every waiter before it was granted: when a key frees, the longest
// compatible prefix of its queue (say, every reader up to the next writer)
// is granted in one entry. A multi-key waiter sits in the queue of each of
// its keys (joined at once, under mu: one arrival order across keys, so no
// two multi-key waiters wait for each other) and is granted, in one
// all-or-nothing entry, when it heads every queue and every key is free
// for it.
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
	// expiringSessions: a session-expiry entry is being committed; the
	// next waits for it (expireDue, maxSessionExpireLeases).
	expiringSessions bool

	// proposals are commits queued under mu, run by unlockAndRun once mu
	// is released (a commit must never wait while holding mu).
	proposals []func()

	// holders are the exclusive leases of held keys that this node handed
	// out or renewed, by key, and shared the shared ones: the holders to
	// tell when a caller queues for their key (Lease.Wanted). An entry
	// leaves when its lease ends.
	holders map[string]*lock.Lease
	shared  map[string][]*lock.Lease
	// tell are the holders to mark wanted once mu is released (marking
	// runs the lease's callbacks, which must not run under mu).
	tell []*lock.Lease
}

// keyQueue is one key's waiters, oldest first. Those whose grant is being
// committed (waiter.inflight; inflight counts them) stay in it until the
// outcome: the waiters behind them are judged as if they held already
// (a shared grant does not wait for the commit of the shared grants
// before it), and a multi-key waiter waits for them to settle.
type keyQueue struct {
	waiters  []*waiter
	inflight int
}

// waiter is one blocked (or trying) Acquire or AcquireAll.
type waiter struct {
	key      string   // the key (the first key of a multi-key waiter)
	keys     []string // a multi-key waiter's keys, in the caller's order; nil otherwise
	opts     lock.AcquireOptions
	handle   string
	try      bool        // TryAcquire: give up instead of waiting for a holder
	res      chan result // buffered: the scheduler never blocks on delivery
	gone     bool        // the caller gave up; a grant that lands is released
	resend   bool        // re-sent acquire of its live grant: answered outside the queue
	inflight bool        // its granting entry is being committed
	since    time.Time   // when it was queued (the console shows how long it waits)
}

// allKeys returns the keys w waits for.
func (w *waiter) allKeys() []string {
	if w.keys != nil {
		return w.keys
	}
	return []string{w.key}
}

type result struct {
	grants []*lock.Grant // one per key, in the order of the waiter's keys
	err    error
}

func newScheduler(n *Node) *scheduler {
	return &scheduler{n: n, queues: make(map[string]*keyQueue), holders: make(map[string]*lock.Lease), shared: make(map[string][]*lock.Lease)}
}

func (s *scheduler) isReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

// becomeLeader takes over after an election (graceful recovery):
// apply everything earlier leaders committed, extend every lease by its full
// TTL on this leader's clock, record this node's API address, and rebuild
// the expiry timers (and the lock-delays' ends) from the replicated lock
// table. Waiters of the old leader re-send their requests to this one.
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
	// are released by the rebuilt timers. Lock-delays are in the table:
	// their ends are kept, on the state machine's clock.
	takeover := []fsm.Op{
		{Type: fsm.OpExtendAll},
		{Type: fsm.OpSetMember, Key: n.cfg.ID, Value: []byte(n.cfg.APIAddr)},
	}
	if g, ok := n.soleVoterGate(); ok {
		takeover = append(takeover, fsm.Op{Type: fsm.OpAppendData, Key: fsm.GateKey, Value: g.Encode()})
	}
	if _, err := n.apply(fsm.Entry{Ops: takeover}, n.cfg.ApplyTimeout); err != nil {
		n.log.Warn("leader takeover: extending leases failed", "err", err)
		return
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch != epoch {
		return
	}
	s.expiry = s.expiry[:0]
	n.fsm.ForEachLock(func(l fsm.Lock) bool {
		if l.Session == "" { // a session's leases expire with it
			s.expiry = append(s.expiry, expiryItem{expires: l.Expires, token: l.Token, key: l.Key})
		}
		return true
	})
	sessions := 0
	n.fsm.ForEachSession(func(si fsm.SessionInfo) bool {
		s.expiry = append(s.expiry, expiryItem{expires: si.Expires, session: si.ID})
		sessions++
		return true
	})
	delays := 0
	n.fsm.ForEachDelay(func(key string, until int64) bool {
		s.expiry = append(s.expiry, expiryItem{expires: until, key: key})
		delays++
		return true
	})
	heap.Init(&s.expiry)
	s.ready = true
	s.armLocked()
	n.log.Info("leader ready", "locks", n.fsm.NumLocks(), "sessions", sessions, "lock_delays", delays, "last_token", n.fsm.LastToken())
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
	s.expiringSessions = false
	var stranded []*waiter
	seen := map[*waiter]bool{}
	for _, q := range s.queues {
		for _, w := range q.waiters {
			if !seen[w] {
				seen[w] = true
				stranded = append(stranded, w)
			}
		}
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

// keyState is a key's holders as the leader sees them: live by its clock,
// less those being released in the entry under construction, plus the
// grants of that entry.
type keyState struct {
	excl    bool   // an exclusive holder
	shared  int    // shared holders
	permits uint32 // their semaphore's N
	until   int64  // the end of a lock-delay, when ahead of now
	oldest  *fsm.HolderRef
}

// stateLocked reads key's state at now (leader clock). freed are tokens
// released earlier in the entry being built; own is a handle whose grants
// do not count (a re-sent acquire is answered with them).
func (s *scheduler) stateLocked(key string, freed map[uint64]bool, own string, now int64) keyState {
	var st keyState
	s.n.fsm.EachHolder(key, func(l fsm.HolderRef) bool {
		switch {
		case freed[l.Token]:
		case l.Expires <= now:
			// Expired: freed by the next expiry entry, or taken over,
			// after its lock-delay.
			if l.LockDelay > 0 {
				st.until = max(st.until, l.Expires+int64(l.LockDelay))
			}
		case own != "" && l.HandleIs(own):
		case l.Mode == fsm.ModeShared:
			st.shared++
			st.permits = l.Permits
			if st.oldest == nil {
				st.oldest = &l
			}
		default:
			st.excl = true
			st.oldest = &l
		}
		return true
	})
	if until := s.n.fsm.Delay(key); until > st.until {
		st.until = until
	}
	if st.until <= now {
		st.until = 0
	}
	return st
}

// verdict is whether a waiter may be granted given a key's state.
type verdict uint8

const (
	grantable verdict = iota
	blocked           // wait for the holders
	delayed           // wait for the lock-delay's end
	mismatch          // another semaphore N than the holders': fail at once
)

func (s *scheduler) compat(st *keyState, w *waiter) verdict {
	switch {
	case st.until != 0:
		return delayed
	case w.opts.Mode == lock.ModeExclusive:
		if st.excl || st.shared > 0 {
			return blocked
		}
	case st.excl:
		return blocked
	case st.shared > 0 && st.permits != uint32(w.opts.Permits):
		return mismatch
	case w.opts.Permits > 0 && st.shared >= w.opts.Permits, st.shared >= s.n.cfg.MaxSharedHolders:
		return blocked
	}
	return grantable
}

// add counts w's grant into st.
func (st *keyState) add(w *waiter) {
	if w.opts.Mode == lock.ModeExclusive {
		st.excl = true
		return
	}
	st.shared++
	st.permits = uint32(w.opts.Permits)
}

// refusal is the error for a waiter that may not be granted now.
func (s *scheduler) refusal(key string, v verdict, st *keyState, permits int) error {
	switch v {
	case delayed:
		return &lock.DelayedError{Key: key, Until: time.Now().Add(time.Duration(st.until - s.n.cfg.Clock.Now()))}
	case mismatch:
		return fmt.Errorf("raftlock: %q is held with %d permits, not %d: %w", key, st.permits, permits, lock.ErrPermitsMismatch)
	}
	return s.heldErr(key, st.oldest)
}

func (s *scheduler) heldErr(key string, l *fsm.HolderRef) error {
	if l == nil {
		return &lock.HeldError{Key: key}
	}
	return &lock.HeldError{Key: key, Owner: plainOwner(l.Owner), Token: lock.Token(l.Token),
		Expires: time.Now().Add(time.Duration(l.Expires - s.n.cfg.Clock.Now()))}
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
	now := s.n.cfg.Clock.Now()
	if w.keys == nil {
		if l, ok := s.ownLiveLocked(w.key, w.handle, now); ok {
			s.resendLocked(w, l.Token)
			return nil
		}
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
}

// attach records lease as a holder of its key, to be told when a caller
// queues for it: every grant this node hands out, and every lease renewed
// here (a lease granted by an earlier leader, or a copy rebuilt from its
// identity, starts hearing it at its first renewal on this node). A lease
// granted or renewed while callers already wait is told at once.
func (s *scheduler) attach(lease *lock.Lease) {
	s.mu.Lock()
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
		w.res <- result{grants: []*lock.Grant{grantOf(w, w.key, token, sent)}}
	case !w.gone:
		w.resend = false
		return true
	}
	return false
}

func grantOf(w *waiter, key string, token uint64, sent time.Time) *lock.Grant {
	return &lock.Grant{Key: key, Owner: w.opts.Owner, Token: lock.Token(token), Handle: w.handle,
		Value: w.opts.Value, TTL: w.opts.TTL, Mode: w.opts.Mode, Permits: w.opts.Permits, Sent: sent, Session: w.opts.Session}
}

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
				s.releaseLocked(g.Key, g.Handle, uint64(g.Token), nil)
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
		gs := make([]*lock.Grant, len(keys))
		for i, k := range keys {
			gs[i] = grantOf(w, k, res.Results[p.ops[i]].Token, sent)
		}
		if w.gone {
			s.removeLocked(w)
			for _, g := range gs {
				s.releaseLocked(g.Key, g.Handle, uint64(g.Token), nil)
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
