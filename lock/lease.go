package lock

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"
	"unsafe"
)

// Drift allowance: the part of a TTL the holder gives up to cover the rate
// difference between its clock and the backend's (the Redlock paper's
// CLOCK_DRIFT_FACTOR, plus a floor for timer granularity).
const (
	DefaultDriftFactor = 0.01
	DriftFloor         = 2 * time.Millisecond
)

// Drift returns the drift allowance for ttl with the given factor
// (factor ≤ 0 means DefaultDriftFactor): ttl·factor + DriftFloor.
func Drift(ttl time.Duration, factor float64) time.Duration {
	if factor <= 0 {
		factor = DefaultDriftFactor
	}
	return time.Duration(float64(ttl)*factor) + DriftFloor
}

// deadlineFor returns the latest instant at which a holder may still
// believe it holds a lease granted for ttl by a request sent at sent:
//
//	sent + ttl − Drift(ttl, factor)
//
// sent must carry a monotonic clock reading (time.Now does), so that the
// deadline is immune to wall-clock jumps on the holder. A ttl smaller than its
// drift gives sent itself: such a lease is over as soon as it is granted.
// lock/kit offers it to backends as DeadlineFor.
func deadlineFor(sent time.Time, ttl time.Duration, factor float64) time.Time {
	valid := ttl - Drift(ttl, factor)
	if valid < 0 {
		valid = 0
	}
	return sent.Add(valid)
}

// Lease is one grant of a key to one owner. Its exported fields identify the
// grant and never change; the deadline moves with each successful renewal.
// A Lease is safe for concurrent use.
type Lease struct {
	Key   string
	Owner string
	// Token is the fencing token of this grant.
	Token Token
	// Handle is the backend's secret identity of this grant (a random value
	// of at least 128 bits, or a backend-native id). Renew and Release check
	// it; it is never shown by Inspect. Treat it like a password.
	Handle string
	Value  []byte
	// Mode and Permits are how the lease holds its key: ModeExclusive, or
	// ModeShared as a reader (Permits 0) or one of Permits semaphore
	// holders. Informational: (Key, Token, Handle) identify the lease.
	Mode Mode
	// wanted (markWanted was called while the lease lived) and ended (Err
	// is not nil) sit beside Mode, in the same word.
	wanted, ended bool
	Permits       int

	// The lease's lock is not a field: mu picks one of a fixed set of
	// mutexes by the lease's address, which leaves a session lease held
	// by a gateway 112 bytes with two pointers of its own.

	// end is the first AfterEnd callback (a gateway registers one per
	// lease): kept here, it costs no state of its own.
	end func()
	// st is the rest of the lease's state, made when first needed: at
	// once for a lease with a deadline of its own. A session lease
	// (whose deadline is its session's) points at its session's
	// noState, which names the session and is never written, until
	// something beyond one end callback is asked of it (stateLocked).
	// Written only under mu.
	st *leaseState
}

// leaseMus are the leases' locks: a lease takes the one its address picks
// (mu). Lease code never holds two leases' locks at once, so leases that
// share one only ever wait for each other briefly. Each sits on a cache
// line of its own.
var leaseMus [1024]struct {
	sync.Mutex
	_ [56]byte
}

// mu returns l's lock. A caller keeps the pointer for its Unlock: a Lease
// on a goroutine's stack (never shared, so never contended) may move
// between the two.
func (l *Lease) mu() *sync.Mutex {
	p := uint64(uintptr(unsafe.Pointer(l)))
	return &leaseMus[(p*0x9E3779B97F4A7C15)>>54].Mutex
}

// leaseState is the part of a Lease that a session lease rarely needs.
type leaseState struct {
	session     *Session // the lease's session, or nil
	driftFactor float64
	ttl         time.Duration
	deadline    time.Time
	timer       *time.Timer
	done        chan struct{} // made by the first Done call
	err         error
	afterEnd    []func() // the AfterEnd callbacks after the first (Lease.end)

	wantedCh    chan struct{} // made by the first Wanted call; closed once wanted
	afterWanted []func()
}

// stateLocked returns l's own state, made if it has none yet (l.mu held).
func (l *Lease) stateLocked() *leaseState {
	if l.st == nil {
		l.st = &leaseState{}
	} else if s := l.st.session; s != nil && l.st == &s.noState {
		l.st = &leaseState{session: s}
	}
	return l.st
}

// ownStateLocked returns l's own state, or nil if it has none yet (l.mu
// held): never its session's shared noState.
func (l *Lease) ownStateLocked() *leaseState {
	if st := l.st; st != nil && (st.session == nil || st != &st.session.noState) {
		return st
	}
	return nil
}

// sessionLocked returns l's session, or nil (l.mu held).
func (l *Lease) sessionLocked() *Session {
	if l.st == nil {
		return nil
	}
	return l.st.session
}

// errLocked is l's Err (l.mu held).
func (l *Lease) errLocked() error {
	if !l.ended {
		return nil
	}
	return l.st.err
}

// initLease completes a Lease whose exported fields are set and arms its
// deadline: Done closes with ErrExpired when the deadline passes unless the
// lease is extended first. A lease in a session follows the session's
// deadline instead. lock/kit's NewLease calls it.
func initLease(l *Lease, ttl time.Duration, sent time.Time, driftFactor float64, s *Session) *Lease {
	if s != nil {
		if !s.add(l) { // l.st is now s's noState
			mu := l.mu()
			mu.Lock()
			l.endLocked(s.Err()) // no callbacks yet: nothing to run
			mu.Unlock()
		}
		return l
	}
	st := l.stateLocked()
	st.driftFactor = driftFactor
	st.ttl = ttl
	st.deadline = deadlineFor(sent, ttl, driftFactor)
	mu := l.mu()
	mu.Lock()
	l.armLocked() // no callbacks yet: nothing to run
	mu.Unlock()
	return l
}

// Session returns the session the lease belongs to, or nil.
func (l *Lease) Session() *Session {
	mu := l.mu()
	mu.Lock()
	defer mu.Unlock()
	return l.sessionLocked()
}

// armLocked (re)starts the timer that ends the lease at its deadline. If
// the deadline has passed it ends the lease now and returns the AfterEnd
// callbacks, for the caller to run once it has released mu.
func (l *Lease) armLocked() (after []func()) {
	if l.sessionLocked() != nil {
		return nil // the session's deadline timer ends it
	}
	st := l.st
	if st.timer != nil {
		st.timer.Stop()
	}
	d := time.Until(st.deadline)
	if d <= 0 {
		return l.endLocked(ErrExpired)
	}
	deadline := st.deadline
	st.timer = time.AfterFunc(d, func() {
		var fs []func()
		mu := l.mu()
		mu.Lock()
		// A renewal may have moved the deadline after this timer fired.
		if st.deadline.Equal(deadline) {
			fs = l.endLocked(ErrExpired)
		}
		mu.Unlock()
		runAll(fs)
	})
	return nil
}

// TTL is the lease's current TTL (the last one granted or renewed).
func (l *Lease) TTL() time.Duration {
	mu := l.mu()
	mu.Lock()
	s, ttl := l.sessionLocked(), l.st.ttl
	mu.Unlock()
	if s != nil {
		return s.TTL()
	}
	return ttl
}

// Deadline is the latest instant at which the holder may still act as the
// lock's holder: sent + TTL − Drift(TTL) of the last grant or renewal, sent
// being when its request was sent (see the package's doc). Past it the
// holder must stop.
func (l *Lease) Deadline() time.Time {
	mu := l.mu()
	mu.Lock()
	s, deadline := l.sessionLocked(), l.st.deadline
	mu.Unlock()
	if s != nil {
		return s.Deadline() // a session lease's deadline is its session's
	}
	return deadline
}

// Done is closed when the lease ends: its deadline passed, a renewal was
// refused, or it was released. Err says which.
//
// The channel is made by the first call (a lease whose holder never asks
// for it costs no channel: a gateway holding a million leases uses
// AfterEnd instead).
func (l *Lease) Done() <-chan struct{} {
	mu := l.mu()
	mu.Lock()
	defer mu.Unlock()
	if l.ended {
		if l.st.done != nil {
			return l.st.done
		}
		return closedChan
	}
	st := l.stateLocked()
	if st.done == nil {
		st.done = make(chan struct{})
	}
	return st.done
}

// closedChan is the Done of a lease that ended before anyone asked.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// AfterEnd arranges for f to run once the lease ends: on the goroutine that
// ends it (a Release, a refused renewal, the deadline's timer), after the
// lease's own lock is released; or at once, on the caller's goroutine, if
// it has already ended. f must be quick and must not block — it runs on the
// path of every release — nor end leases while holding a lock that another
// callback takes. Unlike a goroutine waiting on Done, it costs nothing
// while the lease lives, and nothing is started when it ends: a backend
// that tracks many held leases registers one callback each. (Callbacks ran
// on goroutines of their own before; starting one per release was the
// largest Go-side cost of sqllock's release path.)
func (l *Lease) AfterEnd(f func()) {
	mu := l.mu()
	mu.Lock()
	ended := l.ended
	switch {
	case ended:
	case l.end == nil:
		l.end = f
	default:
		st := l.stateLocked()
		st.afterEnd = append(st.afterEnd, f)
	}
	mu.Unlock()
	if ended {
		f()
	}
}

// runAll runs the callbacks endLocked returned.
func runAll(fs []func()) {
	for _, f := range fs {
		f()
	}
}

// Err is nil while the lease lives, then the reason it ended: ErrExpired,
// ErrReleased, an error matching ErrNotHeld (a renewal was refused), or
// another error of the keep-alive.
func (l *Lease) Err() error {
	mu := l.mu()
	mu.Lock()
	defer mu.Unlock()
	return l.errLocked()
}

// extend records a successful renewal for ttl whose request was sent at
// sent: the deadline becomes sent + ttl − Drift(ttl) — earlier than before
// if the renewal asked for a shorter TTL, since the backend's expiry moved
// there too. It
// reports false, changing nothing, when the lease has already ended: a lease
// whose Done is closed stays closed.
func (l *Lease) extend(sent time.Time, ttl time.Duration) bool {
	mu := l.mu()
	mu.Lock()
	if l.ended {
		mu.Unlock()
		return false
	}
	if l.sessionLocked() != nil {
		mu.Unlock()
		return true // its deadline and TTL are its session's
	}
	st := l.st
	st.ttl = ttl
	st.deadline = deadlineFor(sent, ttl, st.driftFactor)
	after := l.armLocked()
	mu.Unlock()
	runAll(after)
	return true
}

// End closes Done with cause (ErrReleased after a release, a wrapped
// ErrNotHeld after a refused renewal) and runs the AfterEnd callbacks.
// Only the first call has an effect.
func (l *Lease) End(cause error) {
	mu := l.mu()
	mu.Lock()
	ended := !l.ended
	s := l.sessionLocked()
	after := l.endLocked(cause)
	mu.Unlock()
	if ended && s != nil {
		s.remove(l)
	}
	runAll(after)
}

// endLocked ends the lease and returns its AfterEnd callbacks, which the
// caller must run after releasing mu.
func (l *Lease) endLocked(cause error) (after []func()) {
	if l.ended {
		return nil
	}
	if cause == nil {
		cause = ErrReleased
	}
	st := l.stateLocked()
	l.ended = true
	st.err = cause
	if st.timer != nil {
		st.timer.Stop()
	}
	if st.done != nil {
		close(st.done)
	}
	if l.end != nil {
		after = append(make([]func(), 0, 1+len(st.afterEnd)), l.end)
		after = append(after, st.afterEnd...)
	}
	l.end, st.afterEnd = nil, nil
	st.afterWanted = nil
	return after
}

// Wanted is closed once the backend has told the holder that another
// contender waits for this lease's key: a caller queued behind it (a
// TryAcquire that found the key held does not count, it did not wait). The
// holder decides what to do: finish and release early, or carry on. It never
// reopens, even if the waiter gives up; it is never closed for a lease that
// ended before anyone waited. Backends that cannot know (see
// SignalsWanted) never close it.
func (l *Lease) Wanted() <-chan struct{} {
	mu := l.mu()
	mu.Lock()
	defer mu.Unlock()
	st := l.stateLocked()
	if st.wantedCh == nil {
		st.wantedCh = make(chan struct{})
		if l.wanted {
			close(st.wantedCh)
		}
	}
	return st.wantedCh
}

// IsWanted reports whether Wanted is closed.
func (l *Lease) IsWanted() bool {
	mu := l.mu()
	mu.Lock()
	defer mu.Unlock()
	return l.wanted
}

// markWanted records that another contender waits for the key: Wanted
// closes and the AfterWanted callbacks run, on the caller's goroutine,
// after the lease's lock is released. Backends call it (lock/kit's
// MarkWanted); only the first call on a live lease has an effect, and a
// call on an ended lease has none.
func (l *Lease) markWanted() {
	mu := l.mu()
	mu.Lock()
	if l.wanted || l.ended {
		mu.Unlock()
		return
	}
	l.wanted = true
	var fs []func()
	if st := l.ownStateLocked(); st != nil {
		if st.wantedCh != nil {
			close(st.wantedCh)
		}
		fs = st.afterWanted
		st.afterWanted = nil
	}
	mu.Unlock()
	runAll(fs)
}

// AfterWanted arranges for f to run once the lease is marked wanted (its
// backend learnt of a waiter), or at once, on the caller's goroutine, if it already is. f
// is dropped, never run, if the lease ends first. As for AfterEnd, f must
// be quick and must not block: it runs on the backend's path that learnt of
// the waiter. The gateway uses it to push a "wanted" message to the holder.
func (l *Lease) AfterWanted(f func()) {
	mu := l.mu()
	mu.Lock()
	switch {
	case l.wanted:
		mu.Unlock()
		f()
		return
	case !l.ended:
		st := l.stateLocked()
		st.afterWanted = append(st.afterWanted, f)
	}
	mu.Unlock()
}

// NewHandle returns a fresh random lease handle: 128 bits from crypto/rand,
// hex encoded. Backends that mint their own handles use it.
func NewHandle() string {
	var b [16]byte
	rand.Read(b[:]) // never fails on Linux (see crypto/rand docs)
	return hex.EncodeToString(b[:])
}
