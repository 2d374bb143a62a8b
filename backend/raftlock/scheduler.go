package raftlock

import (
	"container/heap"
	"fmt"
	"sync"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
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
	// sessions are the sessions of the session leases this node handed
	// out or renewed, by id: a session lease has no entry of its own
	// here. A caller that queues for a key held in a session finds the
	// holder's lease in its session's set (kit.SessionLeases), by the
	// token the state machine has. Ended sessions leave by a sweep each
	// time the table has doubled (keepSessionLocked).
	sessions  map[string][]*lock.Session
	sessSweep int
	// tell are the holders to mark wanted once mu is released (marking
	// runs the lease's callbacks, which must not run under mu).
	tell []*lock.Lease
	// fates records, for the grants two copies of one acquire (the same
	// handle: a reply lost, the request re-sent) could both decide, which
	// decided first: the re-sent copy handing it to its caller, or the
	// first copy, whose caller gave up, releasing it. The other copy
	// then yields (abandonedGrantLocked, resendLocked): a grant is never
	// handed to one copy's caller and released for the other's.
	fates map[grantID]grantFate
}

// grantID names one grant: its key and token.
type grantID struct {
	key   string
	token uint64
}

// grantFate is which copy of an acquire decided a grant's fate.
type grantFate uint8

const (
	fateResent  grantFate = iota + 1 // handed to a re-sent copy's caller: kept
	fateDropped                      // released for a copy whose caller gave up
)

// maxFates bounds fates: re-sent and abandoned acquires are a lost
// reply's retry and a caller's timeout, rare; past the bound the record
// starts again (the only cost: a decision older than that many others is
// forgotten, when its other copy has long had its answer).
const maxFates = 1 << 14

// decideLocked records fate for the grant (key, token) unless the other
// copy decided first; it reports whether fate holds.
func (s *scheduler) decideLocked(key string, token uint64, fate grantFate) bool {
	id := grantID{key, token}
	if f, ok := s.fates[id]; ok {
		return f == fate
	}
	if s.fates == nil || len(s.fates) >= maxFates {
		s.fates = make(map[grantID]grantFate)
	}
	s.fates[id] = fate
	return true
}

// abandonedGrantLocked reports whether a grant of a waiter whose caller
// gave up may be released: not when a re-sent copy of the same request
// is handing it out, or has.
func (s *scheduler) abandonedGrantLocked(key string, token uint64) bool {
	return s.decideLocked(key, token, fateDropped)
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
	queued   bool        // it found the key held or waited for: it queued behind another (traces say so)
}

// allKeys returns the keys w waits for.
func (w *waiter) allKeys() []string {
	if w.keys != nil {
		return w.keys
	}
	return []string{w.key}
}

type result struct {
	grants []*kit.Grant // one per key, in the order of the waiter's keys
	err    error
}

func newScheduler(n *Node) *scheduler {
	return &scheduler{n: n, queues: make(map[string]*keyQueue), holders: make(map[string]*lock.Lease), shared: make(map[string][]*lock.Lease),
		sessions: make(map[string][]*lock.Session)}
}

func (s *scheduler) isReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

// readyEpoch is isReady with the leadership epoch it holds in: two calls
// that return the same epoch saw one unbroken term of leading.
func (s *scheduler) readyEpoch() (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch, s.ready
}

// testHookInspectRead, when set by a test, runs in Inspect between the
// read of the lock table and the confirmation of leadership.
var testHookInspectRead func()

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
	s.fates = nil
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
