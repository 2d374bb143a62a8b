package campaign

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/check"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/election"
)

// The election campaign (--mode election): the clients campaign
// (election.Campaign, auto-renewed at the campaign's TTL) on Keys election
// keys; a leader leads for a short random time writing to the fenced and
// unfenced stores with its term's token, as a mutex holder does, then
// resigns (Resign) or crashes (its Locker closed: renewal stops, the
// lease runs out at its deadline), and campaigns again on a new client.
// Observers (election.Observe, Observers per key, each on a client of its
// own) record every leader they report, and the watches Observe opened.
//
// Checks: a term is an OK Acquire op of its key, recorded with the
// leader's last deadline (renewals move it), so the overlap checker
// judges one leader at a time by each leader's own clock, the store
// checkers its writes, and the token checker its terms; check.Elections
// judges the observers (order, reality, completeness).

// DefaultObservers is how many observers watch each election key.
const DefaultObservers = 2

// electionKey names election key i.
func electionKey(i int) string { return fmt.Sprintf("election/%d", i) }

// ChaosElectionReport is what an election chaos campaign's observers saw and its
// leaders did; the checker's counts are check.ElectionResult's.
type ChaosElectionReport struct {
	Keys            int `json:"keys"`
	ObserversPerKey int `json:"observers_per_key"`
	// Terms is the OK grants of the election keys (the leaders); Resigned,
	// Crashed and Paused how the leaders of this run ended (the rest lost
	// their lease, or the campaign ended under them).
	Terms    int `json:"terms"`
	Resigned int `json:"resigned"`
	Crashed  int `json:"crashed"`
	Paused   int `json:"paused"`
	// The observers: reports of a leader and of none, the watches
	// Observe opened and how many broke.
	Reports   int `json:"observer_reports"`
	Vacant    int `json:"vacant_reports"`
	Watches   int `json:"watches"`
	Rewatches int `json:"rewatches"`
	// Per (term, observer of its key): see check.ElectionResult.
	Seen                int `json:"seen"`
	MissedDuringRewatch int `json:"missed_during_rewatch"`
	BeforeSync          int `json:"before_sync"`
	// Violations: Unseen, OrderViolations, and PhantomTokens less
	// PhantomsExplained must be 0.
	Unseen            int      `json:"unseen"`
	OrderViolations   int      `json:"order_violations"`
	PhantomTokens     int      `json:"phantom_tokens"`
	PhantomsExplained int      `json:"phantoms_explained"`
	PhantomsInFlight  int      `json:"phantoms_in_flight"`
	Violations        int      `json:"violations"`
	Examples          []string `json:"examples,omitempty"`
}

// electionRun is one campaign's elections: its campaigners' and
// observers' state beside the workload's.
type electionRun struct {
	w  *Workload
	tg *Target

	mu           sync.Mutex
	observations []check.Observation
	sessions     []check.WatchSession
	resigned     int
	reopened     atomic.Int64
	crashed      int
	paused       int

	pending   sync.WaitGroup // crashed terms waiting for their lease's end
	observers sync.WaitGroup
	stopObs   context.CancelFunc
	obsClose  []lock.Locker
}

// startElection starts Observers observers per key (on clients numbered
// after the campaigners) and waits until each has reported once (its
// watch in sync), then the campaigners on lockers, which end with ctx.
// finish stops the observers.
func (w *Workload) startElection(ctx, runCtx context.Context, tg *Target, lockers []lock.Locker, links []provision.ClientLinks, wg *sync.WaitGroup) (*electionRun, error) {
	e := &electionRun{w: w, tg: tg}
	obsCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	e.stopObs = stop
	n := w.cfg.Keys * w.cfg.Observers
	first := make(chan int, n)
	for j := range n {
		l, _, err := tg.newClient(w.cfg.Clients + j)
		if err != nil {
			e.finish()
			return nil, fmt.Errorf("observer %d: %w", j, err)
		}
		e.obsClose = append(e.obsClose, l)
		ch, err := election.Observe(obsCtx, &watchRecorder{Locker: l, e: e, observer: j, key: electionKey(j % w.cfg.Keys)}, electionKey(j%w.cfg.Keys))
		if err != nil {
			e.finish()
			return nil, fmt.Errorf("observer %d: %w", j, err)
		}
		e.observers.Add(1)
		go func() {
			defer e.observers.Done()
			reported := false
			for ld := range ch {
				o := check.Observation{Observer: j, Key: ld.Key, At: w.Now(), Present: ld.Present, Token: uint64(ld.Token), Value: string(ld.Value)}
				e.mu.Lock()
				e.observations = append(e.observations, o)
				e.mu.Unlock()
				if !reported {
					reported = true
					first <- j
				}
			}
		}()
	}
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for range n {
		select {
		case <-first:
		case <-timeout.C:
			e.finish()
			return nil, errors.New("an observer's watch was not in sync within 30 s")
		case <-ctx.Done():
			e.finish()
			return nil, ctx.Err()
		}
	}
	for i, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.campaigner(runCtx, i, l, links[i], rand.New(rand.NewPCG(w.cfg.Seed, uint64(i)+1)))
		}()
	}
	return e, nil
}

// finish waits for the crashed terms' records, gives the observers up to
// TTL + 2 s to report the last term of each key (the campaigners have
// stopped), then stops them.
func (e *electionRun) finish() {
	e.pending.Wait()
	w := e.w
	last := map[string]uint64{}
	for _, o := range w.History() {
		if o.Kind == check.Acquire && o.OK {
			last[o.Key] = max(last[o.Key], o.Token)
		}
	}
	until := time.Now().Add(w.cfg.TTL + 2*time.Second)
	for time.Now().Before(until) && len(e.obsClose) == w.cfg.Keys*w.cfg.Observers {
		top := make([]uint64, len(e.obsClose))
		e.mu.Lock()
		for _, o := range e.observations {
			top[o.Observer] = max(top[o.Observer], o.Token)
		}
		e.mu.Unlock()
		behind := false
		for j, t := range top {
			behind = behind || t < last[electionKey(j%w.cfg.Keys)]
		}
		if !behind {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.stopObs()
	e.observers.Wait()
	for _, l := range e.obsClose {
		l.Close()
	}
	end := w.Now()
	e.mu.Lock()
	for i := range e.sessions {
		if e.sessions[i].End == 0 {
			e.sessions[i].End = end
		}
	}
	e.mu.Unlock()
}

// records returns what the observers recorded.
func (e *electionRun) records() ([]check.Observation, []check.WatchSession) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]check.Observation(nil), e.observations...), append([]check.WatchSession(nil), e.sessions...)
}

// campaigner campaigns, leads, and resigns or crashes until ctx ends.
func (e *electionRun) campaigner(ctx context.Context, id int, l lock.Locker, links provision.ClientLinks, rng *rand.Rand) {
	w := e.w
	ttl := w.cfg.TTL
	defer func() { l.Close() }()
	for term := 0; ctx.Err() == nil; term++ {
		key := electionKey(rng.IntN(w.cfg.Keys))
		acq := check.Op{Client: id, Key: key, Kind: check.Acquire, TTL: ttl, Start: w.Now()}
		cctx, cancel := context.WithTimeout(ctx, 10*ttl)
		ld, err := election.Campaign(cctx, l, key, []byte(strconv.Itoa(id)), election.WithTTL(ttl))
		cancel()
		if !w.acquired(ctx, rng, &acq, "campaign", err) {
			continue
		}
		token := ld.Token()
		acq.OK, acq.Token, acq.Session = true, uint64(token), w.session

		if w.takePause() {
			// A paused process: its renewals stop with it (the Locker
			// is closed, its session links cut), and it wakes past its
			// deadline to write with its old term.
			links.Cut()
			l.Close()
			time.Sleep(max(ttl+ttl/2, time.Until(ld.Lease.Deadline())+ttl/2))
			if err := links.Heal(); err != nil {
				w.fail("heal", err)
			}
			w.write(ctx, id, key, token)
			e.count(&e.paused)
			e.recordAtEnd(acq, ld)
			l, links = e.reopen(ctx, id, l, rng)
			continue
		}

		// Lead: write with the term's token while the lease is ours by
		// our own clock, for [0, TTL/4), one term in eight [TTL/2,
		// 3 TTL/2) (renewed at TTL/3 meanwhile).
		lead := provision.Between(rng, 0, ttl/4)
		if rng.IntN(8) == 0 {
			lead = provision.Between(rng, ttl/2, 3*ttl/2)
		}
		until := time.Now().Add(lead)
		every := max(w.cfg.Hold, time.Millisecond)
		for ld.Err() == nil && time.Now().Before(ld.Lease.Deadline()) && ctx.Err() == nil {
			w.write(ctx, id, key, token)
			if !time.Now().Before(until) {
				break
			}
			select {
			case <-ld.Done():
			case <-ctx.Done():
			case <-time.After(provision.Between(rng, every/2, every)):
			}
		}

		// One term in six crashes, and every campaigner's second term:
		// a short campaign (15 terms) would otherwise have no crash
		// one time in fifteen.
		if rng.IntN(6) == 0 || term == 1 {
			// Crash: renewal stops; the lease runs out at its deadline.
			l.Close()
			e.count(&e.crashed)
			e.recordAtEnd(acq, ld)
			l, links = e.reopen(ctx, id, l, rng)
			continue
		}
		acq.Deadline = ld.Lease.Deadline().Sub(w.Base)
		w.Record(acq)
		rel := check.Op{Client: id, Key: key, Kind: check.Release, Token: uint64(token), Start: w.Now()}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*ttl)
		err = ld.Resign(rctx)
		cancel()
		rel.End = w.Now()
		switch {
		case err == nil:
			rel.OK = true
			e.count(&e.resigned)
		case errors.Is(err, lock.ErrNotHeld):
		default:
			rel.Unknown = true
			w.fail("resign", err)
		}
		w.Record(rel)
		if rel.Unknown {
			// Still the leader, for all it knows, and still renewing:
			// crash, so that the lease runs out (the term's belief
			// ends at the resign's start).
			l.Close()
			e.count(&e.crashed)
			l, links = e.reopen(ctx, id, l, rng)
		}
	}
}

func (e *electionRun) count(n *int) {
	e.mu.Lock()
	*n++
	e.mu.Unlock()
}

// recordAtEnd records a crashed leader's term once its lease has run out
// (Done closes at the deadline), with the deadline it ended at: a renewal
// in flight at the crash may still have moved it.
func (e *electionRun) recordAtEnd(acq check.Op, ld *election.Leadership) {
	e.pending.Add(1)
	go func() {
		defer e.pending.Done()
		t := time.NewTimer(3 * e.w.cfg.TTL)
		defer t.Stop()
		select {
		case <-ld.Done():
		case <-t.C:
		}
		acq.Deadline = ld.Lease.Deadline().Sub(e.w.Base)
		e.w.Record(acq)
	}()
}

// reopen opens a new client for campaigner id after a crash, under a
// fresh client number (a session backend's client has proxies of its own,
// named by it), retrying until ctx ends (then it returns old, closed).
func (e *electionRun) reopen(ctx context.Context, id int, old lock.Locker, rng *rand.Rand) (lock.Locker, provision.ClientLinks) {
	for {
		n := int(e.reopened.Add(1)) + e.w.cfg.Clients + e.w.cfg.Keys*e.w.cfg.Observers - 1
		l, links, err := e.tg.newClient(n)
		if err == nil {
			return l, links
		}
		e.w.fail("reopen", err)
		if !provision.SleepCtx(ctx, provision.Between(rng, 100*time.Millisecond, 300*time.Millisecond)) {
			return old, nil
		}
	}
}

// watchRecorder passes an observer's Locker through, recording each watch
// Observe opens on it: when it was in sync, when and how it ended.
type watchRecorder struct {
	lock.Locker
	e        *electionRun
	observer int
	key      string
}

func (r *watchRecorder) Features() lock.Features { return lock.FeaturesOf(r.Locker) }

func (r *watchRecorder) Watch(ctx context.Context, key string) (<-chan lock.Event, error) {
	e, w := r.e, r.e.w
	start := w.Now()
	src, err := lock.Watch(ctx, r.Locker, key)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	i := len(e.sessions)
	e.sessions = append(e.sessions, check.WatchSession{Observer: r.observer, Key: key, Start: start})
	e.mu.Unlock()
	end := func(broken bool) {
		e.mu.Lock()
		if e.sessions[i].End == 0 {
			e.sessions[i].End, e.sessions[i].Broken = w.Now(), broken
		}
		e.mu.Unlock()
	}
	out := make(chan lock.Event)
	go func() {
		defer close(out)
		for ev := range src {
			switch ev.Type {
			case lock.EventSynced:
				e.mu.Lock()
				e.sessions[i].Synced = w.Now()
				e.mu.Unlock()
			case lock.EventError:
				end(true)
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				end(false)
				return
			}
		}
		// Closed without an error: by the observer's end, or under it
		// (its Locker closed).
		end(ctx.Err() == nil)
	}()
	return out, nil
}

// electionCheck runs check.Elections over the report's history and
// observers' records, keeping the campaign's own counts.
func (rep *ChaosReport) electionCheck() {
	if rep.Election == nil {
		rep.Election = &ChaosElectionReport{}
	}
	r := check.Elections(rep.history, rep.observations, rep.watches, 5)
	el := *rep.Election
	el.Terms, el.Reports, el.Vacant, el.Watches, el.Rewatches = r.Terms, r.Reports, r.Vacant, r.Watches, r.Rewatches
	el.Seen, el.MissedDuringRewatch, el.BeforeSync, el.Unseen = r.Seen, r.MissedDuringRewatch, r.BeforeSync, r.Unseen
	el.OrderViolations, el.PhantomTokens, el.PhantomsExplained, el.PhantomsInFlight = r.OrderViolations, r.PhantomTokens, r.PhantomsExplained, r.PhantomsInFlight
	el.Violations, el.Examples = r.Violations(), r.Examples
	rep.Election = &el
}

// electionFailures are the observers' broken promises.
func (rep *ChaosReport) electionFailures() []string {
	el := rep.Election
	if el == nil {
		return nil
	}
	var out []string
	if el.OrderViolations > 0 {
		out = append(out, fmt.Sprintf("observer order: %d leader reports whose token was not above their observer's earlier reports", el.OrderViolations))
	}
	if n := el.PhantomTokens - el.PhantomsExplained; n > 0 {
		out = append(out, fmt.Sprintf("observer reality: %d leader tokens reported that no grant carried (%d named a client whose campaign was in flight: a ghost term)", n, el.PhantomsInFlight))
	}
	if el.Unseen > 0 {
		out = append(out, fmt.Sprintf("observer completeness: %d terms an observer with a watch in sync and unbroken never reported", el.Unseen))
	}
	return out
}
