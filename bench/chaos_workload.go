package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/check"
	"github.com/lockgate/lockgate/fencedstore"
	"github.com/lockgate/lockgate/lock"
)

// workload is the campaign's clients and fault schedule, and what they
// recorded.
type workload struct {
	cfg     ChaosConfig
	fencing bool // the backend gives fencing tokens: write to the fenced store too
	session bool // its locks live on a client session (Caps.Session)
	// synthetic numbers the grants of a backend without fencing tokens.
	synthetic atomic.Uint64
	store     fencedWriter
	unfenced  *unfenced
	base      time.Time // the campaign clock's zero

	mu     sync.Mutex
	ops    check.History
	faults []check.Fault
	events []FaultEvent
	errs   map[string]int

	// pauses is how many client pauses are armed: the next client to
	// pass its deadline check stalls past its TTL, then writes.
	pauses atomic.Int32
	// cycles counts the grants so far, for the progress lines.
	cycles atomic.Int64
}

// takePause claims an armed client pause, if there is one.
func (w *workload) takePause() bool {
	for {
		n := w.pauses.Load()
		if n <= 0 {
			return false
		}
		if w.pauses.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

func (w *workload) now() time.Duration { return time.Since(w.base) }

func (w *workload) record(o check.Op) {
	w.mu.Lock()
	w.ops = append(w.ops, o)
	w.mu.Unlock()
}

func (w *workload) fail(kind string, err error) {
	w.mu.Lock()
	if w.errs == nil {
		w.errs = map[string]int{}
	}
	w.errs[kind+": "+ErrorKind(err)]++
	w.mu.Unlock()
}

// acquired ends acq, an acquire (named what in the failure counts) that
// returned err. A failed one is recorded now — of unknown outcome unless
// err is lock.ErrNotAcquired: the contract releases a grant that raced the
// caller's cancellation, but the checker cannot know it did not exist — and,
// unless ctx has ended, counted and followed by a short random back-off. A
// successful one counts a cycle; the caller records it once it knows the
// token.
func (w *workload) acquired(ctx context.Context, rng *rand.Rand, acq *check.Op, what string, err error) bool {
	acq.End = w.now()
	if err != nil {
		acq.Unknown = !errors.Is(err, lock.ErrNotAcquired)
		w.record(*acq)
		if ctx.Err() == nil {
			w.fail(what, err)
			sleepCtx(ctx, between(rng, 20*time.Millisecond, 100*time.Millisecond))
		}
		return false
	}
	w.cycles.Add(1)
	return true
}

func (w *workload) history() check.History {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.ops)
}

// client runs acquire → fenced and unfenced write → hold → release until
// ctx ends. It never renews: a lease lives its TTL.
func (w *workload) client(ctx context.Context, id int, l lock.Locker, links clientLinks, rng *rand.Rand) {
	ttl := w.cfg.TTL
	for ctx.Err() == nil {
		key := fmt.Sprintf("chaos/%d", rng.IntN(w.cfg.Keys))
		opts := w.acquireOptions(rng, ttl)
		acq := check.Op{Client: id, Key: key, Kind: check.Acquire, TTL: ttl, Start: w.now(),
			Shared: opts.Mode == lock.ModeShared, Permits: opts.Permits}
		actx, cancel := context.WithTimeout(ctx, 2*ttl)
		lease, err := l.Acquire(actx, key, opts)
		cancel()
		if !w.acquired(ctx, rng, &acq, "acquire", err) {
			continue
		}
		token := lease.Token
		if !w.fencing {
			// No fencing token: the history still needs each grant's
			// identity, and the linearizability model tokens that grow
			// with the grants. A counter taken as the grant returns
			// grows with them: a grant of a key returns only after the
			// previous holder's release (or expiry), which follows that
			// holder's own return.
			token = lock.Token(w.synthetic.Add(1))
		}
		acq.OK, acq.Token, acq.Deadline, acq.Session = true, uint64(token), lease.Deadline().Sub(w.base), w.session
		w.record(acq)

		// A correct client checks its deadline before it writes; a paused
		// one checked, then stalled (a GC pause) and writes late.
		paused := w.takePause()
		if paused {
			// Past the lease's deadline by half a TTL at least: a
			// session's TTL (ZooKeeper's negotiated timeout) may exceed
			// the campaign's. Its own links are cut meanwhile, so its
			// session's keep-alive stalls with it.
			links.cut()
			time.Sleep(max(ttl+ttl/2, time.Until(lease.Deadline())+ttl/2))
			if err := links.heal(); err != nil {
				w.fail("heal", err)
			}
		}
		switch {
		case !paused && !time.Now().Before(lease.Deadline()):
		case acq.Shared:
			w.read(id, key, token)
		default:
			w.write(ctx, id, key, token)
		}
		hold := w.cfg.Hold
		if rng.IntN(LongHoldEvery) == 0 {
			hold = max(hold, min(LongHold*hold, ttl/2))
		}
		sleepCtx(ctx, between(rng, 0, hold))

		rel := check.Op{Client: id, Key: key, Kind: check.Release, Token: uint64(token), Start: w.now()}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*ttl)
		err = l.Release(rctx, lease)
		cancel()
		rel.End = w.now()
		if settleRelease(&rel, err) {
			w.fail("release", err)
		}
		w.record(rel)
		if w.cfg.Think > 0 {
			sleepCtx(ctx, between(rng, 0, w.cfg.Think))
		}
	}
}

// write writes the same data to the fenced store (with the token) and to
// the unfenced store, recording both.
func (w *workload) write(ctx context.Context, id int, key string, token lock.Token) {
	data := fmt.Sprintf("client %d token %d", id, token)
	if w.fencing {
		w.fencedWrite(ctx, id, key, token, data)
	}
	uw := check.Op{Client: id, Key: key, Kind: check.Write, Token: uint64(token), Start: w.now()}
	uw.StoreSeq = w.unfenced.write(key, data)
	uw.End, uw.OK = w.now(), true
	w.record(uw)
}

// fencedWrite writes data to the fenced store with the token.
func (w *workload) fencedWrite(ctx context.Context, id int, key string, token lock.Token, data string) {
	fw := check.Op{Client: id, Key: key, Kind: check.Write, Fenced: true, Token: uint64(token), Start: w.now()}
	res, err := w.store.Write(context.WithoutCancel(ctx), fencedstore.WriteRequest{
		ClientID: fmt.Sprint(id), Token: fencedstore.FencingToken{Key: key, Value: uint64(token)}, Data: data})
	fw.End = w.now()
	switch {
	case err == nil:
		fw.OK, fw.StoreSeq = true, res.Seq
	case errors.Is(err, fencedstore.ErrStaleToken):
	default:
		fw.Unknown = true
	}
	w.record(fw)
}

// One hold in LongHoldEvery is drawn below LongHold × ChaosConfig.Hold (at
// most TTL/2).
const (
	LongHoldEvery = 16
	LongHold      = 10
)

// RecoveryGrace is how long a campaign's clients keep running after the
// last fault is healed, past Duration if need be, so that the recovery
// from it is observed (bench chaos reports a fault it never saw recover).
const RecoveryGrace = 5 * time.Second

// schedule injects one fault at a time: a few seconds of calm, the fault,
// its heal. It stops injecting once too little time is left to heal and
// recover.
func (w *workload) schedule(ctx context.Context, tg *target, rng *rand.Rand) error {
	ttl := w.cfg.TTL
	end := w.base.Add(w.cfg.Duration - 3*time.Second)
	calm := func() time.Duration { return between(rng, 2*time.Second, 4*time.Second) }
	if w.cfg.calm > 0 {
		end = w.base.Add(w.cfg.Duration - w.cfg.calm)
		calm = func() time.Duration { return w.cfg.calm }
	}
	if len(w.cfg.kinds) == 0 {
		return nil
	}
	for {
		if !sleepCtx(ctx, calm()) || time.Now().After(end) {
			return nil
		}
		f := pick(rng, w.cfg.kinds)
		name := f.Name
		start := w.now()
		heal, what, hold, err := f.Inject(tg.backend, faultEnv{s: tg.s, pauses: &w.pauses}, rng, ttl)
		if err != nil {
			return fmt.Errorf("injecting %s: %w", name, err)
		}
		fmt.Fprintf(w.cfg.Progress, "%6.1fs  %-12s %s  (%d cycles so far)\n", start.Seconds(), name, what, w.cycles.Load())
		time.Sleep(hold) // a fault is held even past the end: it must be healed
		if err := heal(); err != nil {
			return fmt.Errorf("healing %s (%s): %w", name, what, err)
		}
		healed := w.now()
		w.mu.Lock()
		w.faults = append(w.faults, check.Fault{Name: name, Start: start, Heal: healed})
		w.events = append(w.events, FaultEvent{Fault: name, What: what, StartS: start.Seconds(), HealS: healed.Seconds()})
		w.mu.Unlock()
	}
}

// unfenced is the data store without a fence: it applies every write in
// arrival order, as most stores do.
type unfenced struct {
	mu   sync.Mutex
	seq  uint64
	data map[string]string
}

func newUnfenced() *unfenced { return &unfenced{data: map[string]string{}} }

func (u *unfenced) write(key, data string) uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.seq++
	u.data[key] = data
	return u.seq
}

// settleRelease sets a recorded release's outcome from its error: done,
// not held (the lease was gone already: it changed nothing), or unknown
// (true: it may have taken effect or not, and is a failure to report).
func settleRelease(rel *check.Op, err error) (unknown bool) {
	switch {
	case err == nil:
		rel.OK = true
	case errors.Is(err, lock.ErrNotHeld):
	default:
		rel.Unknown = true
	}
	return rel.Unknown
}
