package raftlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/internal/audit"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Session is one client of a Node: a lock.Locker with its own client id,
// auto-renewals and Close. Lock calls succeed only on the leader; a
// follower answers with a *lock.NotLeaderError naming the leader. The gateway
// opens one per connection; the Node's own Locker methods use a default one.
type Session struct {
	n        *Node
	clientID string
	ctx      context.Context // ends at Close: stops waits and keep-alives
	cancel   context.CancelFunc

	mu      sync.Mutex
	closed  bool
	watches map[*watch]struct{} // open watches, ended by Close
}

var (
	_ lock.Locker          = (*Session)(nil)
	_ lock.MultiLocker     = (*Session)(nil)
	_ lock.Watcher         = (*Session)(nil)
	_ lock.FeatureReporter = (*Session)(nil)
)

// The state machine's group bound is the lock package's key-set bound
// (each constant below is negative, and so does not compile, if not).
const (
	_ = uint(fsm.MaxGroup - lock.MaxMultiKeys)
	_ = uint(lock.MaxMultiKeys - fsm.MaxGroup)
	_ = uint(fsm.MaxPermits - lock.MaxPermits)
	_ = uint(fsm.MaxLockDelay - lock.MaxLockDelay)
)

// Features implements lock.FeatureReporter: raftlock offers every
// primitive, in its state machine (docs/raftlock.md).
func (s *Session) Features() lock.Features { return s.n.Features() }

// addWatch records w as s's, unless s is closed.
func (s *Session) addWatch(w *watch) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.watches == nil {
		s.watches = make(map[*watch]struct{})
	}
	s.watches[w] = struct{}{}
	return true
}

func (s *Session) removeWatch(w *watch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.watches, w)
}

// Watch implements lock.Watcher: it streams key's holders from this node's
// applied state (docs/raftlock.md, "Watch"). Only the leader opens a watch
// (a follower answers with a *lock.NotLeaderError, as for Inspect), after
// confirming with a quorum that it still leads: its applied state holds
// every grant it has answered, so a client that acquired a key and then
// watches it sees its own grant among the first holders. A follower's
// state may not have caught up yet (its watch would start without that
// grant). Once open, a watch survives a leader change: every node applies
// the same entries, so its events go on, in order. At most Config.MaxWatchers watches are open per node; a watch
// that falls Config.WatchBuffer events behind ends with
// lock.ErrWatchOverflow; Close of the session, and the node's shutdown
// (with an EventError), end it too.
func (s *Session) Watch(ctx context.Context, key string) (<-chan lock.Event, error) {
	if s.ctx.Err() != nil {
		return nil, lock.ErrClosed
	}
	if err := kit.ValidateKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.n.verifyLeader(); err != nil {
		return nil, err
	}
	return s.n.watches.watch(ctx, s, key)
}

// NewSession returns a new client of n.
func (n *Node) NewSession() *Session {
	ctx, cancel := context.WithCancel(context.Background())
	return &Session{n: n, clientID: "raftlock-" + n.cfg.ID + "-" + lock.NewHandle()[:12], ctx: ctx, cancel: cancel}
}

// Acquire implements lock.Locker: the caller joins the key's FIFO queue on
// the leader and is granted the key when everyone before it is done.
func (s *Session) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return s.acquire(ctx, key, opts, false)
}

// TryAcquire implements lock.Locker: it fails at once when the key is held
// or others already wait for it.
func (s *Session) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return s.acquire(ctx, key, opts, true)
}

func (s *Session) acquire(ctx context.Context, key string, opts lock.AcquireOptions, try bool) (*lock.Lease, error) {
	if s.ctx.Err() != nil {
		return nil, lock.ErrClosed
	}
	opts, err := kit.Normalize(opts, key, s.clientID)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	handle := opts.Handle // a client's own handle makes a re-sent acquire idempotent
	if handle == "" {
		handle = lock.NewHandle()
	}
	w := &waiter{key: key, opts: opts, handle: handle, try: try, res: make(chan result, 1), since: time.Now()}
	leases, err := s.wait(ctx, w)
	if err != nil {
		return nil, err
	}
	return leases[0], nil
}

// AcquireAll implements lock.MultiLocker: the caller joins the queue of
// every key at once and is granted all of them in one entry, all or
// nothing, when it heads every queue and every key is free for it.
func (s *Session) AcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	return s.acquireAll(ctx, keys, opts, false)
}

// TryAcquireAll implements lock.MultiLocker: every key now, or none.
func (s *Session) TryAcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	return s.acquireAll(ctx, keys, opts, true)
}

func (s *Session) acquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions, try bool) ([]*lock.Lease, error) {
	if s.ctx.Err() != nil {
		return nil, lock.ErrClosed
	}
	if err := kit.ValidateKeys(keys); err != nil {
		return nil, err
	}
	opts, err := kit.Normalize(opts, keys[0], s.clientID)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	handle := opts.Handle
	if handle == "" {
		handle = lock.NewHandle()
	}
	w := &waiter{key: keys[0], keys: slices.Clone(keys), opts: opts, handle: handle, try: try, res: make(chan result, 1), since: time.Now()}
	if len(keys) == 1 {
		w.keys = nil
	}
	return s.wait(ctx, w)
}

// wait queues w and waits for its grants, one lease per key.
func (s *Session) wait(ctx context.Context, w *waiter) ([]*lock.Lease, error) {
	// Checked before it queues: a waiter whose grant the state machine
	// would refuse must not sit at the head of a key's queue.
	for _, k := range w.allKeys() {
		if err := s.n.batch.admit(acquireOp(w, k)); err != nil {
			return nil, err
		}
	}
	if err := s.n.sched.enqueue(w); err != nil {
		return nil, err
	}
	select {
	case r := <-w.res:
		if span := recording(ctx); span != nil {
			traceAcquire(ctx, span, w, r.grants, r.err)
		}
		if r.err != nil {
			return nil, r.err
		}
		leases := make([]*lock.Lease, len(r.grants))
		for i, g := range r.grants {
			leases[i] = kit.NewLease(*g)
			s.n.sched.attach(leases[i])
			if w.opts.AutoRenew {
				go lock.KeepAlive(s.ctx, s, leases[i])
			}
		}
		return leases, nil
	case <-ctx.Done():
		s.n.sched.abandon(w)
		return nil, fmt.Errorf("raftlock: waiting for %q: %w", w.key, ctx.Err())
	case <-s.ctx.Done():
		s.n.sched.abandon(w)
		return nil, lock.ErrClosed
	}
}

// Renew implements lock.Locker.
func (s *Session) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	if s.ctx.Err() != nil {
		return lock.ErrClosed
	}
	ttl, err := kit.ValidateRenew(lease, ttl)
	if err != nil {
		return err
	}
	sent := time.Now()
	res, err := s.n.applyCtx(ctx, fsm.Op{Type: fsm.OpRenew, Key: lease.Key, Handle: lease.Handle, Token: uint64(lease.Token), TTL: ttl})
	if err != nil {
		return err
	}
	ok := res.Results[0].Status == fsm.StatusOK
	if sess := lease.Session(); sess != nil && ok {
		// A session lease: the state machine renewed its session, and so
		// every lease of it.
		kit.ExtendSession(sess, sent)
	} else if err := kit.Renewed(lease, sent, ttl, ok); err != nil {
		return err
	}
	s.n.sched.attach(lease)
	return nil
}

// SignalsWanted implements lock.WantedSignaler: the leader tells a lease
// it handed out (or renewed) when a caller queues for its key.
func (s *Session) SignalsWanted() bool { return true }

// Release implements lock.Locker. When others wait for the key, the release
// and the grant to the next waiter commit in one entry.
func (s *Session) Release(ctx context.Context, lease *lock.Lease) error {
	if s.ctx.Err() != nil {
		return lock.ErrClosed
	}
	if err := kit.ValidateLease(lease); err != nil {
		return err
	}
	// The release may share its entry with the grant to the key's next
	// waiter: it must be valid before it is proposed, or it would fail
	// that grant too.
	op := releaseOp(lease.Key, lease.Handle, uint64(lease.Token))
	if err := s.n.batch.checkOps(op); err != nil {
		return err
	}
	sc := s.n.sched
	done := make(chan applied, 1)
	sc.mu.Lock()
	if !sc.ready {
		sc.mu.Unlock()
		return s.n.notLeader()
	}
	sc.releaseLocked(lease.Key, lease.Handle, uint64(lease.Token), done)
	sc.unlockAndRun(true) // commits the release on this goroutine
	a, err := awaitApplied(ctx, done)
	if err != nil {
		return fmt.Errorf("raftlock: release %q: outcome unknown: %w", lease.Key, err)
	}
	if a.err != nil {
		return a.err
	}
	return kit.Released(lease, a.res.Results[0].Status == fsm.StatusOK)
}

// awaitApplied waits for a commit's outcome, or for ctx. An outcome that
// is already there wins over an ended ctx: the commit usually runs on the
// caller's goroutine, and then its outcome is known, whatever ctx says.
func awaitApplied(ctx context.Context, done chan applied) (applied, error) {
	select {
	case a := <-done:
		return a, nil
	default:
	}
	select {
	case a := <-done:
		return a, nil
	case <-ctx.Done():
		return applied{}, ctx.Err()
	}
}

// ReleaseAll releases leases in one entry (with the grants to each key's
// next waiters), e.g. those of one AcquireAll. It returns the errors
// joined, each naming its key, as lock.ReleaseAll does.
func (s *Session) ReleaseAll(ctx context.Context, leases []*lock.Lease) error {
	if s.ctx.Err() != nil {
		return lock.ErrClosed
	}
	for _, lease := range leases {
		if err := kit.ValidateLease(lease); err != nil {
			return err
		}
		if err := s.n.batch.checkOps(releaseOp(lease.Key, lease.Handle, uint64(lease.Token))); err != nil {
			return err
		}
	}
	if len(leases) == 0 {
		return nil
	}
	sc := s.n.sched
	done := make(chan applied, 1)
	sc.mu.Lock()
	if !sc.ready {
		sc.mu.Unlock()
		return s.n.notLeader()
	}
	entry := fsm.Entry{}
	freed := map[uint64]bool{}
	for _, lease := range leases {
		entry.Ops = append(entry.Ops, releaseOp(lease.Key, lease.Handle, uint64(lease.Token)))
		freed[uint64(lease.Token)] = true
	}
	var grants []pending
	for _, lease := range leases {
		sc.roundLocked(lease.Key, freed, &entry, &grants)
	}
	sc.proposeLocked(entry, grants, done)
	sc.unlockAndRun(true)
	a, err := awaitApplied(ctx, done)
	if err != nil {
		return fmt.Errorf("raftlock: release of %d leases: outcome unknown: %w", len(leases), err)
	}
	if a.err != nil {
		return a.err
	}
	var errs []error
	for i, lease := range leases {
		if err := kit.Released(lease, a.res.Results[i].Status == fsm.StatusOK); err != nil {
			errs = append(errs, fmt.Errorf("release %q: %w", lease.Key, err))
		}
	}
	return errors.Join(errs...)
}

// Inspect implements lock.Locker, linearizably: only the leader answers,
// after confirming with a quorum that it still leads.
func (s *Session) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	if s.ctx.Err() != nil {
		return nil, lock.ErrClosed
	}
	if err := kit.ValidateKey(key); err != nil {
		return nil, err
	}
	// The table and the clock are read as one view before leadership is
	// confirmed: the confirmation shows this node still led, in the same
	// term, after that instant, so the view is the lock table at an
	// instant within the call. Judged the other way round, a leader
	// stopped between the two (a paused process, a long GC) would read
	// its table of then by a clock of after its successor took over and
	// extended every live lease: it would show a held key free.
	epoch, ok := s.n.sched.readyEpoch()
	if !ok {
		return nil, s.n.notLeader()
	}
	now := s.n.cfg.Clock.Now()
	all, _ := s.n.fsm.Holders(key)
	if testHookInspectRead != nil {
		testHookInspectRead()
	}
	if err := s.n.verifyLeader(); err != nil {
		return nil, err
	}
	if e, ok := s.n.sched.readyEpoch(); !ok || e != epoch {
		return nil, s.n.notLeader()
	}
	var live []fsm.Lock
	for _, l := range all {
		if l.Expires > now {
			live = append(live, l)
		}
	}
	if len(live) == 0 {
		return nil, fmt.Errorf("%w: %q", lock.ErrNotFound, key)
	}
	l := live[0]
	sc := s.n.sched
	sc.mu.Lock()
	waiters := 0
	if q := sc.queues[key]; q != nil {
		for _, w := range q.waiters {
			if !w.gone && !w.inflight {
				waiters++
			}
		}
	}
	sc.mu.Unlock()
	info := &lock.LockInfo{
		Key: key, Owner: plainOwner(l.Owner), Token: lock.Token(l.Token), Value: l.Value,
		Expires: time.Now().Add(time.Duration(l.Expires - now)), Waiters: waiters,
		Mode: lock.Mode(l.Mode), Permits: int(l.Permits),
	}
	for _, h := range live {
		info.Holders = append(info.Holders, lock.HolderInfo{Owner: plainOwner(h.Owner), Token: lock.Token(h.Token), Value: h.Value,
			Expires: time.Now().Add(time.Duration(h.Expires - now))})
	}
	return info, nil
}

// Close implements lock.Locker: waiting calls return lock.ErrClosed and
// auto-renewals stop. The node keeps running.
func (s *Session) Close() error {
	s.cancel()
	s.mu.Lock()
	s.closed = true
	ws := make([]*watch, 0, len(s.watches))
	for w := range s.watches {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	for _, w := range ws {
		s.n.watches.end(w, nil)
	}
	return nil
}

// The Node's own lock.Locker methods use its default session; Close shuts
// the node down.

// Acquire implements lock.Locker.
func (n *Node) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return n.session.Acquire(ctx, key, opts)
}

// TryAcquire implements lock.Locker.
func (n *Node) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return n.session.TryAcquire(ctx, key, opts)
}

// Renew implements lock.Locker.
func (n *Node) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	return n.session.Renew(ctx, lease, ttl)
}

// AcquireAll implements lock.MultiLocker.
func (n *Node) AcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	return n.session.AcquireAll(ctx, keys, opts)
}

// TryAcquireAll implements lock.MultiLocker.
func (n *Node) TryAcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	return n.session.TryAcquireAll(ctx, keys, opts)
}

// ReleaseAll releases leases in one entry (Session.ReleaseAll).
func (n *Node) ReleaseAll(ctx context.Context, leases []*lock.Lease) error {
	return n.session.ReleaseAll(ctx, leases)
}

// Watch implements lock.Watcher (Session.Watch).
func (n *Node) Watch(ctx context.Context, key string) (<-chan lock.Event, error) {
	return n.session.Watch(ctx, key)
}

// Features implements lock.FeatureReporter.
//
// The features depend on the cluster's format gate: sessions, and the
// primitives beyond the exclusive lock, switch on when every voter reads
// their format (gate.go).
func (n *Node) Features() lock.Features { return featuresAt(n.fsm.Gate().Offer) }

// Release implements lock.Locker.
func (n *Node) Release(ctx context.Context, lease *lock.Lease) error {
	return n.session.Release(ctx, lease)
}

// Inspect implements lock.Locker.
func (n *Node) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	return n.session.Inspect(ctx, key)
}

// SignalsWanted implements lock.WantedSignaler.
func (n *Node) SignalsWanted() bool { return true }

// Close implements lock.Locker by shutting the node down.
func (n *Node) Close() error { return n.Shutdown() }

// ForceRelease frees key whoever holds it (a forced release: an
// operator's tool for a holder known to be dead). The next waiter is granted
// in the same entry. The holder learns of it on its next renewal
// (ErrNotHeld); fencing tokens protect the resource meanwhile. A key nobody
// holds gives lock.ErrNotFound.
func (n *Node) ForceRelease(ctx context.Context, key string) error {
	if err := kit.ValidateKey(key); err != nil {
		return err
	}
	sc := n.sched
	sc.mu.Lock()
	if !sc.ready {
		sc.mu.Unlock()
		return n.notLeader()
	}
	ls, _ := n.fsm.Holders(key)
	if len(ls) == 0 {
		sc.mu.Unlock()
		return fmt.Errorf("%w: %q", lock.ErrNotFound, key)
	}
	// Every holder of a shared key goes, in one entry, with the grants
	// to the next waiters. A forced release ends no lock-delay: the
	// operator declares the holders dead.
	entry := fsm.Entry{}
	freed := map[uint64]bool{}
	for _, l := range ls {
		entry.Ops = append(entry.Ops, releaseOp(key, l.Handle, l.Token))
		freed[l.Token] = true
	}
	var grants []pending
	sc.roundLocked(key, freed, &entry, &grants)
	done := make(chan applied, 1)
	sc.proposeLocked(entry, grants, done)
	sc.unlockAndRun(true)
	a := <-done
	if a.err != nil {
		return a.err
	}
	for i := range ls {
		if a.res.Results[i].Status != fsm.StatusOK {
			return fmt.Errorf("%w: %q changed hands while being released", lock.ErrNotHeld, key)
		}
	}
	n.log.Warn("lock force-released", "key", key, "holders", len(ls), "owner", plainOwner(ls[0].Owner), "token", ls[0].Token)
	who := audit.CallerOf(ctx)
	for _, l := range ls {
		holder, _ := fsm.SplitOwner(l.Owner)
		n.audit(audit.Event{Op: audit.OpForceRelease, Identity: who.Identity, Remote: who.Remote, Keys: []string{key},
			FencingToken: l.Token, Detail: "holder identity " + holder})
	}
	return nil
}
