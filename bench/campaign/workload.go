package campaign

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/bench/faults"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/check"
	"github.com/lockgate/lockgate/fencedstore"
	"github.com/lockgate/lockgate/lock"
)

// Workload is the campaign's clients and fault schedule, and what they
// recorded.
type Workload struct {
	cfg     ChaosConfig
	Fencing bool // the backend gives fencing tokens: write to the fenced store too
	session bool // its locks live on a client session (Caps.Session)
	// synthetic numbers the grants of a backend without fencing tokens.
	synthetic atomic.Uint64
	Store     fencedWriter
	Unfenced  *unfenced
	Base      time.Time // the campaign clock's zero

	Mu     sync.Mutex
	ops    check.History
	faults []check.Fault
	events []FaultEvent
	Errs   map[string]int

	// pauses is how many client pauses are armed: the next client to
	// pass its deadline check stalls past its TTL, then writes.
	pauses atomic.Int32
	// Cycles counts the grants so far, for the progress lines.
	Cycles atomic.Int64

	reads readState  // reads.go
	cache cacheState // cache.go
}

// takePause claims an armed client pause, if there is one.
func (w *Workload) takePause() bool {
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

func (w *Workload) Now() time.Duration { return time.Since(w.Base) }

func (w *Workload) Record(o check.Op) {
	w.Mu.Lock()
	w.ops = append(w.ops, o)
	w.Mu.Unlock()
}

func (w *Workload) fail(kind string, err error) {
	w.Mu.Lock()
	if w.Errs == nil {
		w.Errs = map[string]int{}
	}
	w.Errs[kind+": "+provision.ErrorKind(err)]++
	w.Mu.Unlock()
}

// acquired ends acq, an acquire (named what in the failure counts) that
// returned err. A failed one is recorded now — of unknown outcome unless
// err is lock.ErrNotAcquired: the contract releases a grant that raced the
// caller's cancellation, but the checker cannot know it did not exist — and,
// unless ctx has ended, counted and followed by a short random back-off. A
// successful one counts a cycle; the caller records it once it knows the
// token.
func (w *Workload) acquired(ctx context.Context, rng *rand.Rand, acq *check.Op, what string, err error) bool {
	acq.End = w.Now()
	if err != nil {
		acq.Unknown = !errors.Is(err, lock.ErrNotAcquired)
		w.Record(*acq)
		if ctx.Err() == nil {
			w.fail(what, err)
			provision.SleepCtx(ctx, provision.Between(rng, 20*time.Millisecond, 100*time.Millisecond))
		}
		return false
	}
	w.Cycles.Add(1)
	return true
}

func (w *Workload) History() check.History {
	w.Mu.Lock()
	defer w.Mu.Unlock()
	return slices.Clone(w.ops)
}

// client runs acquire → fenced and unfenced write → hold → release until
// ctx ends. It never renews: a lease lives its TTL.
func (w *Workload) client(ctx context.Context, id int, l lock.Locker, links provision.ClientLinks, rng *rand.Rand) {
	ttl := w.cfg.TTL
	cc := w.newClientCache(id)
	defer w.settleAll(cc)
	for ctx.Err() == nil {
		key := fmt.Sprintf("chaos/%d", rng.IntN(w.cfg.Keys))
		if rng.IntN(4) == 0 {
			w.inspect(ctx, id, l, key)
		}
		opts := w.acquireOptions(rng, ttl)
		acq := check.Op{Client: id, Key: key, Kind: check.Acquire, TTL: ttl, Start: w.Now(),
			Shared: opts.Mode == lock.ModeShared, Permits: opts.Permits}
		actx, cancel := context.WithTimeout(ctx, 2*ttl)
		lease, err := l.Acquire(actx, key, opts)
		cancel()
		if !w.acquired(ctx, rng, &acq, "acquire", err) {
			continue
		}
		token := lease.Token
		if !w.Fencing {
			// No fencing token: the history still needs each grant's
			// identity, and the linearizability model tokens that grow
			// with the grants. A counter taken as the grant returns
			// grows with them: a grant of a key returns only after the
			// previous holder's release (or expiry), which follows that
			// holder's own return.
			token = lock.Token(w.synthetic.Add(1))
		}
		acq.OK, acq.Token, acq.Deadline, acq.Session = true, uint64(token), lease.Deadline().Sub(w.Base), w.session
		if !w.resumed(cc, key, lease) {
			w.Record(acq)
		}

		// A correct client checks its deadline before it writes; a paused
		// one checked, then stalled (a GC pause) and writes late.
		paused := w.takePause()
		if paused {
			// Past the lease's deadline by half a TTL at least: a
			// session's TTL (ZooKeeper's negotiated timeout) may exceed
			// the campaign's. Its own links are cut meanwhile, so its
			// session's keep-alive stalls with it.
			links.Cut()
			time.Sleep(max(ttl+ttl/2, time.Until(lease.Deadline())+ttl/2))
			if err := links.Heal(); err != nil {
				w.fail("heal", err)
			}
		}
		switch {
		case !paused && !time.Now().Before(lease.Deadline()):
		case acq.Shared:
			w.Read(id, key, token)
		default:
			w.write(ctx, id, key, token)
		}
		if rng.IntN(3) == 0 {
			w.inspect(ctx, id, l, key)
		}
		hold := w.cfg.Hold
		if rng.IntN(LongHoldEvery) == 0 {
			hold = max(hold, min(LongHold*hold, ttl/2))
		}
		provision.SleepCtx(ctx, provision.Between(rng, 0, hold))

		rel := check.Op{Client: id, Key: key, Kind: check.Release, Token: uint64(token), Start: w.Now()}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*ttl)
		err = l.Release(rctx, lease)
		cancel()
		rel.End = w.Now()
		if !w.kept(ctx, cc, rel, lease, err) {
			if SettleRelease(&rel, err) {
				w.fail("release", err)
			}
			w.Record(rel)
		}
		if rng.IntN(4) == 0 {
			w.inspect(ctx, id, l, fmt.Sprintf("chaos/%d", rng.IntN(w.cfg.Keys)))
		}
		if w.cfg.Think > 0 {
			provision.SleepCtx(ctx, provision.Between(rng, 0, w.cfg.Think))
		}
	}
}

// write writes the same data to the fenced store (with the token) and to
// the unfenced store, recording both.
func (w *Workload) write(ctx context.Context, id int, key string, token lock.Token) {
	data := fmt.Sprintf("client %d token %d", id, token)
	if w.Fencing {
		w.FencedWrite(ctx, id, key, token, data)
	}
	uw := check.Op{Client: id, Key: key, Kind: check.Write, Token: uint64(token), Start: w.Now()}
	uw.StoreSeq = w.Unfenced.write(key, data)
	uw.End, uw.OK = w.Now(), true
	w.Record(uw)
}

// FencedWrite writes data to the fenced store with the token.
func (w *Workload) FencedWrite(ctx context.Context, id int, key string, token lock.Token, data string) {
	fw := check.Op{Client: id, Key: key, Kind: check.Write, Fenced: true, Token: uint64(token), Start: w.Now()}
	res, err := w.Store.Write(context.WithoutCancel(ctx), fencedstore.WriteRequest{
		ClientID: fmt.Sprint(id), Token: fencedstore.FencingToken{Key: key, Value: uint64(token)}, Data: data})
	fw.End = w.Now()
	switch {
	case err == nil:
		fw.OK, fw.StoreSeq = true, res.Seq
	case errors.Is(err, fencedstore.ErrStaleToken):
	default:
		fw.Unknown = true
	}
	w.Record(fw)
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
func (w *Workload) schedule(ctx context.Context, tg *Target, rng *rand.Rand) error {
	ttl := w.cfg.TTL
	end := w.Base.Add(w.cfg.Duration - 3*time.Second)
	calm := func() time.Duration { return provision.Between(rng, 2*time.Second, 4*time.Second) }
	if w.cfg.calm > 0 {
		end = w.Base.Add(w.cfg.Duration - w.cfg.calm)
		calm = func() time.Duration { return w.cfg.calm }
	}
	if len(w.cfg.kinds) == 0 {
		return nil
	}
	for {
		if !provision.SleepCtx(ctx, calm()) || time.Now().After(end) {
			return nil
		}
		f := provision.Pick(rng, w.cfg.kinds)
		name := f.Name
		start := w.Now()
		heal, what, hold, err := f.Inject(tg.backend, faults.Env{S: tg.s, Pauses: &w.pauses}, rng, ttl)
		if err != nil {
			return fmt.Errorf("injecting %s: %w", name, err)
		}
		w.notePause(tg, name, what, false)
		fmt.Fprintf(w.cfg.Progress, "%6.1fs  %-12s %s  (%d cycles so far)\n", start.Seconds(), name, what, w.Cycles.Load())
		time.Sleep(hold) // a fault is held even past the end: it must be healed
		if err := heal(); err != nil {
			return fmt.Errorf("healing %s (%s): %w", name, what, err)
		}
		w.notePause(tg, name, what, true)
		healed := w.Now()
		w.Mu.Lock()
		w.faults = append(w.faults, check.Fault{Name: name, Start: start, Heal: healed})
		w.events = append(w.events, FaultEvent{Fault: name, What: what, StartS: start.Seconds(), HealS: healed.Seconds()})
		w.Mu.Unlock()
	}
}

// unfenced is the data store without a fence: it applies every write in
// arrival order, as most stores do.
type unfenced struct {
	mu   sync.Mutex
	seq  uint64
	data map[string]string
}

func NewUnfenced() *unfenced { return &unfenced{data: map[string]string{}} }

func (u *unfenced) write(key, data string) uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.seq++
	u.data[key] = data
	return u.seq
}

// SettleRelease sets a recorded release's outcome from its error: done,
// not held (the lease was gone already: it changed nothing), or unknown
// (true: it may have taken effect or not, and is a failure to report).
func SettleRelease(rel *check.Op, err error) (unknown bool) {
	switch {
	case err == nil:
		rel.OK = true
	case errors.Is(err, lock.ErrNotHeld):
	default:
		rel.Unknown = true
	}
	return rel.Unknown
}
