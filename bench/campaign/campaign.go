// Package campaign is `lockgate-bench chaos`: a Jepsen-style campaign
// against one backend. Clients acquire locks, write to a fenced and an
// unfenced store, hold and release, while faults (package faults) strike
// on a seeded schedule; the history is then checked (package check and
// check/linearize) and judged against what the backend promises. Modes:
// exclusive, read-write, semaphore and leader election.
package campaign

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lockgate/lockgate/bench/faults"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/report"
	"github.com/lockgate/lockgate/check"
	"github.com/lockgate/lockgate/check/linearize"
	"github.com/lockgate/lockgate/fencedstore"
	"github.com/lockgate/lockgate/internal/backends"
	"github.com/lockgate/lockgate/lock"
)

// ChaosConfig configures RunChaos.
type ChaosConfig struct {
	Backend  string
	Faults   []string
	Duration time.Duration
	Seed     uint64
	// Clients acquire locks on Keys keys (defaults 32 and 16; on
	// PostgreSQL 16 and 8, whose 100 connections the clients' pools must
	// share).
	Clients, Keys int
	// TTL of every lease (default 2 s, etcd's smallest, and longer than a
	// Raft election).
	TTL time.Duration
	// Hold is the longest a client holds a lock after its writes: each
	// hold is drawn uniformly from [0, Hold) (default 20 ms: short holds
	// keep the servers busy), except one in LongHoldEvery, drawn below
	// LongHold × Hold (at most TTL/2): a lock freed early under its
	// holder (a clock jump) is then seen as an overlap, not only by the
	// linearizability check.
	Hold time.Duration
	// Think is the longest pause of a client between a release and its
	// next acquire, drawn uniformly from [0, Think) (default 0: none).
	// After a failed acquire a client always pauses 20–100 ms.
	Think time.Duration
	// Mode is how the clients hold their keys: ChaosExclusive
	// (the zero value: a mutex), ChaosRW (each acquire shared with
	// probability SharedFraction, else exclusive) or ChaosSemaphore
	// (every acquire one of Permits permits). Shared holders read: they
	// write nothing, and record their read as a write no store applied
	// (it marks how long they believed they held the key). The checkers
	// judge the modes: an exclusive holder alone, or shared holders
	// only, at most Permits of them.
	Mode string
	// SharedFraction is ChaosRW's probability of a shared acquire
	// (default 0.5).
	SharedFraction float64
	// Permits is ChaosSemaphore's N (default 3).
	Permits int
	// CacheShare is the share of the clients that run with the SDK's
	// lease cache (raftlock; default 0.25, negative: none; see cache.go).
	// RunChaosLockers takes the Lockers of that share to cache.
	CacheShare float64
	// Observers is ChaosElection's observers per election key (default
	// DefaultObservers); ChaosElection's Clients default to 8 and its
	// Keys to 2.
	Observers int
	// Command is the command line that reproduces the campaign; it is
	// printed when the campaign starts and kept in its report.
	Command string
	// Lockgate is the lockgate binary (raftlock nodes run as processes).
	Lockgate string
	// Dir holds the fenced store's file (default: a temporary directory).
	Dir string
	// Budget bounds the checkers and says how many keys may go unchecked
	// (see CheckBudget); History is where the history is written before
	// the checkers run (default: history.json in Dir, kept when they fail).
	Budget  CheckBudget
	History string
	// Log receives the servers' output; Progress one line per fault.
	Log, Progress io.Writer

	kinds []*faults.Fault // Faults, resolved by fill

	// The campaign's own tests shorten its rhythm and swap its store:
	// calm is the pause before each fault (zero: 2–4 s), grace the time
	// the clients run on after the last heal (zero: RecoveryGrace), and
	// newStore opens the fenced store (nil: fencedstore.Open).
	calm, grace time.Duration
	newStore    func(path string) (fencedWriter, error)
}

// fencedWriter is the fenced store as the workload writes to it.
type fencedWriter interface {
	Write(ctx context.Context, req fencedstore.WriteRequest) (fencedstore.WriteResult, error)
	Close() error
}

func (c *ChaosConfig) Fill() error {
	if err := provision.CheckBackends([]string{c.Backend}); err != nil {
		return err
	}
	if len(c.Faults) == 0 {
		return errors.New("no faults: want one or more of " + strings.Join(faults.Names, ","))
	}
	expanded, err := faults.Expand(c.Backend, c.Faults) // "all": every fault that applies
	if err != nil {
		return err
	}
	c.Faults = expanded
	c.kinds = nil
	for _, name := range c.Faults {
		f, err := faults.ByName(name)
		if err != nil {
			return err
		}
		if err := f.Check(c.Backend); err != nil {
			return err
		}
		c.kinds = append(c.kinds, f)
	}
	if c.Duration < 5*time.Second || c.Duration > 24*time.Hour {
		return fmt.Errorf("duration %v: want 5s to 24h", c.Duration)
	}
	if c.CacheShare == 0 {
		c.CacheShare = DefaultCacheShare
	}
	return c.defaults()
}

// defaults fills in the workload's defaults and checks its sizes.
func (c *ChaosConfig) defaults() error {
	switch c.Mode {
	case "", ChaosExclusive:
		c.Mode = ChaosExclusive
	case ChaosRW:
		if c.SharedFraction == 0 {
			c.SharedFraction = 0.5
		}
		if !(c.SharedFraction > 0 && c.SharedFraction <= 1) {
			return fmt.Errorf("shared fraction %v: want above 0, at most 1", c.SharedFraction)
		}
	case ChaosSemaphore:
		if c.Permits == 0 {
			c.Permits = 3
		}
		if c.Permits < 1 || c.Permits > lock.MaxPermits {
			return fmt.Errorf("permits %d: want 1 to %d", c.Permits, lock.MaxPermits)
		}
		if c.Keys == 0 && c.Clients != 0 {
			c.Keys = max(1, c.Clients/8) // enough holders per key to fill its permits
		}
	case ChaosMulti:
		c.multiDefaults()
	case ChaosElection:
		if c.Observers == 0 {
			c.Observers = DefaultObservers
		}
		if c.Clients == 0 {
			c.Clients = 8
		}
		if c.Keys == 0 {
			c.Keys = 2
		}
		if c.Observers < 1 || c.Observers > 16 {
			return fmt.Errorf("observers %d: want 1 to 16 per key", c.Observers)
		}
	default:
		return fmt.Errorf("mode %q: want %s", c.Mode, strings.Join(ChaosModes, ", "))
	}
	if c.Clients == 0 {
		c.Clients = 32
		if provision.KindOf(c.Backend) == backends.KindPostgres {
			c.Clients = 16
		}
	}
	if c.Keys == 0 && c.Mode == ChaosSemaphore {
		c.Keys = max(1, c.Clients/8)
	}
	if c.Keys == 0 {
		c.Keys = max(1, c.Clients/2)
	}
	if c.Clients < 2 || c.Clients > 256 || c.Keys < 1 || c.Keys > c.Clients {
		return fmt.Errorf("clients %d, keys %d: want 2–256 clients and 1 to clients keys", c.Clients, c.Keys)
	}
	if c.TTL == 0 {
		c.TTL = 2 * time.Second
	}
	if c.Hold == 0 {
		c.Hold = 20 * time.Millisecond
	}
	if c.TTL < 100*time.Millisecond || c.Hold < 0 || c.Think < 0 {
		return fmt.Errorf("ttl %v, hold %v, think %v: want a TTL of 100ms or more, and no negative hold or think", c.TTL, c.Hold, c.Think)
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return nil
}

// ChaosReport is the outcome of a campaign; its JSON form is the schema of
// `lockgate-bench chaos --json`.
type ChaosReport struct {
	Backend string `json:"backend"`
	// Variant and Mode say which mode of the backend ran, Caps what it
	// guarantees: without fencing there are no fenced writes, and
	// stale_writes_accepted is 0 because nothing was fenced
	// (unfenced_conflicts then counts what the overlaps corrupted).
	Variant             string         `json:"variant"`
	Mode                string         `json:"mode"`
	Caps                provision.Caps `json:"caps"`
	Faults              []string       `json:"faults"`
	Seed                uint64         `json:"seed"`
	DurationS           float64        `json:"duration_s"`
	Cycles              int            `json:"cycles"`
	CyclesPerS          float64        `json:"cycles_per_s"`
	Overlaps            int            `json:"overlaps"`
	StaleWritesAccepted int            `json:"stale_writes_accepted"`
	StaleWritesRejected int            `json:"stale_writes_rejected"`
	UnfencedConflicts   int            `json:"unfenced_conflicts"`
	Linearizable        bool           `json:"linearizable"`
	// LinearizabilityKeys is how many keys porcupine searched, each on its
	// own and for a bounded time; LinearizabilityUnknownKeys how many of
	// them ran out of time (Linearizable is then false).
	LinearizabilityKeys        int `json:"linearizability_keys"`
	LinearizabilityUnknownKeys int `json:"linearizability_unknown_keys"`
	// Unchecked names the keys whose search was given up, and why.
	Unchecked
	// Holds is the workload's mode (ChaosConfig.Mode: ChaosExclusive,
	// ChaosRW, ChaosSemaphore), with its SharedFraction or Permits.
	Holds          string  `json:"holds"`
	SharedFraction float64 `json:"shared_fraction,omitempty"`
	Permits        int     `json:"permits,omitempty"`
	// PermitExcess counts the grants of a semaphore's permit while its
	// permits were all held (included in Overlaps); ModeTokenViolations
	// the grants whose token was not above every grant of the other mode
	// received before (included in TokenRegressions); SharedKeys the keys
	// with shared holds, left out of the per-key search (its model is a
	// mutex's) and searched by the joint model (Joint).
	PermitExcess        int `json:"permit_excess,omitempty"`
	ModeTokenViolations int `json:"mode_token_violations,omitempty"`
	SharedKeys          int `json:"shared_keys,omitempty"`
	// Joint is the joint search's verdict (nil without AcquireAlls).
	Joint *JointReport `json:"joint,omitempty"`
	// Election is ChaosElection's leaders and observers (nil otherwise).
	Election *ChaosElectionReport `json:"election,omitempty"`
	CampaignReads
	// TokenCheck is "checked", or why the fencing tokens were not checked
	// (a backend without them: the campaign numbers its grants itself).
	// TokensReused counts grants of a key whose token an earlier grant
	// of the key carried, TokenRegressions grants whose token is lower
	// than one granted before they were requested. Both must be 0.
	TokenCheck       string  `json:"token_check"`
	TokensReused     int     `json:"tokens_reused"`
	TokenRegressions int     `json:"token_regressions"`
	UnavailableS     float64 `json:"unavailable_s"`
	MaxRecoveryS     float64 `json:"max_recovery_s"`
	// Availability is, per fault kind, how long clients waited for a lock
	// from the fault's start (the holder's death, for a kill or pause)
	// and from its heal.
	Availability []KindAvailability `json:"availability"`
	// Valid is false when a fault expected to break mutual exclusion on
	// the backend (Fault.BreaksSafety: client-pause on any backend, clock
	// on redlock) was injected and produced no overlap: the campaign then
	// tested nothing.
	Valid bool `json:"valid"`

	Linearizability string `json:"linearizability"` // Ok, Illegal or Unknown (timed out)
	// NotLinearizableKeys names the keys whose search was not Ok.
	NotLinearizableKeys []string       `json:"not_linearizable_keys,omitempty"`
	OverlapExamples     []string       `json:"overlap_examples,omitempty"`
	TokenExamples       []string       `json:"token_examples,omitempty"`
	Injected            []FaultEvent   `json:"injected"`
	Notes               []string       `json:"notes,omitempty"`
	Clients             int            `json:"clients"`
	Keys                int            `json:"keys"`
	TTLMs               int64          `json:"ttl_ms"`
	HoldMs              float64        `json:"hold_ms"`
	ThinkMs             float64        `json:"think_ms"`
	Errors              map[string]int `json:"errors,omitempty"`
	Command             string         `json:"command,omitempty"`

	history check.History
	result  linearize.Result
	budget  CheckBudget
	faults  []check.Fault
	// ChaosElection's observers' reports and watches.
	observations []check.Observation
	watches      []check.WatchSession
}

// RunChaos starts the backend's servers behind proxies, runs the workload
// under a seeded schedule of faults, and checks the history.
func RunChaos(ctx context.Context, cfg ChaosConfig) (*ChaosReport, error) {
	if err := cfg.Fill(); err != nil {
		return nil, err
	}
	dir, cleanup, err := provision.WorkDir(cfg.Dir, "lockgate-chaos-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	fmt.Fprintf(cfg.Progress, "campaign: %s under %s, seed %d, %v; %d clients on %d keys, TTL %v, hold < %v, think < %v\n",
		cfg.Backend, strings.Join(cfg.Faults, ","), cfg.Seed, cfg.Duration, cfg.Clients, cfg.Keys, cfg.TTL, cfg.Hold, cfg.Think)
	if cfg.Command != "" {
		fmt.Fprintf(cfg.Progress, "reproduce with: %s\n", cfg.Command)
	}
	fmt.Fprintf(cfg.Progress, "starting %s servers behind proxies\n", cfg.Backend)
	tg, err := StartTarget(ctx, cfg.Backend, cfg.Lockgate, cfg.Log)
	if err != nil {
		return nil, err
	}
	defer tg.Close()
	return RunCampaign(ctx, tg, cfg, dir)
}

// RunChaosLockers runs a campaign's workload and checkers against the
// Lockers that newLocker opens (client i), with no servers: what the
// campaign's own tests use to show that each checker catches a lock that
// breaks its promise, and what a Locker under development can be run
// through. cfg.Backend names whose capabilities the report assumes (with
// Caps.Fencing the tokens are checked and written to the fenced store);
// the only fault that needs no servers, client-pause, may be injected (or
// none). Faults come every 2 × TTL, and the clients run on 2 × TTL after
// the last; Duration may be as short as a second.
func RunChaosLockers(ctx context.Context, cfg ChaosConfig, newLocker func(i int) (lock.Locker, error)) (*ChaosReport, error) {
	if err := provision.CheckBackends([]string{cfg.Backend}); err != nil {
		return nil, err
	}
	cfg.kinds = nil
	for _, name := range cfg.Faults {
		if name != faults.ClientPause {
			return nil, fmt.Errorf("%w: %s needs servers: a campaign without them takes client-pause only", faults.ErrUnavailable, name)
		}
		f, err := faults.ByName(name)
		if err != nil {
			return nil, err
		}
		cfg.kinds = append(cfg.kinds, f)
	}
	if cfg.Duration < time.Second || cfg.Duration > 24*time.Hour {
		return nil, fmt.Errorf("duration %v: want 1s to 24h", cfg.Duration)
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if cfg.calm == 0 {
		cfg.calm = 2 * cfg.TTL
	}
	if cfg.grace == 0 {
		cfg.grace = 2 * cfg.TTL
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "lockgate-chaos-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	tg := &Target{backend: cfg.Backend, newClient: func(i int) (lock.Locker, provision.ClientLinks, error) {
		l, err := newLocker(i)
		return l, nil, err
	}}
	return RunCampaign(ctx, tg, cfg, dir)
}

// RunCampaign runs one campaign on tg's servers, which it leaves running
// (healed) for the next: the matrix runs one campaign per fault on one
// backend's servers. cfg is filled.
func RunCampaign(ctx context.Context, tg *Target, cfg ChaosConfig, dir string) (*ChaosReport, error) {
	open := cfg.newStore
	if open == nil {
		open = func(path string) (fencedWriter, error) { return fencedstore.Open(path, fencedstore.Options{}) }
	}
	store, err := open(filepath.Join(dir, "fenced.log"))
	if err != nil {
		return nil, err
	}
	defer store.Close()

	info := provision.InfoOf(cfg.Backend)
	rep := &ChaosReport{Backend: cfg.Backend, Variant: info.Variant, Mode: info.Mode, Caps: info.Caps,
		Faults: cfg.Faults, Seed: cfg.Seed, Clients: cfg.Clients, Keys: cfg.Keys,
		TTLMs: cfg.TTL.Milliseconds(), HoldMs: report.Millis(cfg.Hold), ThinkMs: report.Millis(cfg.Think), Errors: map[string]int{}, Command: cfg.Command,
		Holds: cfg.Mode}
	switch cfg.Mode {
	case ChaosRW:
		rep.SharedFraction = cfg.SharedFraction
	case ChaosSemaphore:
		rep.Permits = cfg.Permits
	case ChaosElection:
		rep.Election = &ChaosElectionReport{Keys: cfg.Keys, ObserversPerKey: cfg.Observers}
	}
	if !info.Caps.Fencing {
		rep.Notes = append(rep.Notes, cfg.Backend+" gives no fencing token: its writes go to the unfenced store only")
	}
	for _, f := range cfg.kinds {
		if n := f.Note(cfg.Backend); n != "" {
			rep.Notes = append(rep.Notes, f.Name+": "+n)
		}
	}
	rep.Notes = append(rep.Notes, rep.modeNotes()...)
	w := &Workload{cfg: cfg, Store: store, Unfenced: NewUnfenced(), Fencing: info.Caps.Fencing, session: info.Caps.Session}
	w.setReadsAndCache(tg)
	lockers := make([]lock.Locker, cfg.Clients)
	links := make([]provision.ClientLinks, cfg.Clients)
	for i := range lockers {
		if lockers[i], links[i], err = tg.newClient(i); err != nil {
			return nil, fmt.Errorf("client %d: %w", i, err)
		}
		defer lockers[i].Close()
	}
	if err := chaosNeeds(ctx, cfg, lockers[0]); err != nil {
		return nil, err
	}

	w.Base = time.Now()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var elect *electionRun
	if cfg.Mode == ChaosElection {
		if elect, err = w.startElection(ctx, runCtx, tg, lockers, links, &wg); err != nil {
			return nil, err
		}
	}
	for i, l := range lockers {
		if elect != nil {
			break
		}
		run := w.clientOf(cfg.Mode)
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(runCtx, i, l, links[i], rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1)))
		}()
	}
	closeReaders, err := w.startReaders(runCtx, tg, &wg)
	if err != nil {
		return nil, err
	}
	defer closeReaders()
	faultErr := w.schedule(runCtx, tg, rand.New(rand.NewPCG(cfg.Seed, 0)))
	// The clients run for the whole Duration and then on until
	// RecoveryGrace after the last heal: a fault healed near the end
	// (a pause is held up to 2 × TTL) must leave time to see the
	// backend recover, or it would be reported as never recovered.
	grace := cfg.grace
	if grace == 0 {
		grace = RecoveryGrace
	}
	until := w.Base.Add(cfg.Duration)
	w.Mu.Lock()
	if n := len(w.faults); n > 0 {
		if t := w.Base.Add(w.faults[n-1].Heal + grace); t.After(until) {
			until = t
		}
	}
	w.Mu.Unlock()
	if faultErr == nil {
		provision.SleepCtx(runCtx, time.Until(until))
	}
	stop()
	wg.Wait()
	if elect != nil {
		elect.finish()
		rep.observations, rep.watches = elect.records()
		rep.Election.Resigned, rep.Election.Crashed, rep.Election.Paused = elect.resigned, elect.crashed, elect.paused
	}
	if faultErr != nil {
		return nil, faultErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	rep.history, rep.faults = w.History(), w.faults
	rep.DurationS = time.Since(w.Base).Seconds()
	rep.Injected = w.events
	rep.readsFrom(w)
	for k, n := range w.Errs {
		rep.Errors[k] = n
	}
	rep.budget = cfg.Budget
	if err := rep.saveBeforeCheck(cfg, dir); err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Progress, "checking %d operations\n", len(rep.history))
	t0 := time.Now()
	rep.check()
	fmt.Fprintf(cfg.Progress, "checked in %v: %d cycles (%.0f/s)\n", time.Since(t0).Round(time.Millisecond), rep.Cycles, rep.CyclesPerS)
	return rep, nil
}

// check runs every checker over the report's history and fault timeline
// and sets its verdicts: a campaign's end, and `lockgate-bench check` on
// a history file.
func (rep *ChaosReport) check() {
	rep.result = linearize.Check(rep.history, rep.faults, rep.budget.options(!rep.Caps.Fencing))
	rep.setNotChecked()
	r := rep.result
	rep.Overlaps, rep.OverlapExamples = r.Overlaps, r.OverlapExamples
	rep.StaleWritesAccepted, rep.StaleWritesRejected, rep.UnfencedConflicts = r.StaleWritesAccepted, r.StaleWritesRejected, r.UnfencedConflicts
	rep.Linearizable, rep.Linearizability = r.Linearizable, string(r.LinearizabilityResult)
	rep.LinearizabilityKeys, rep.LinearizabilityUnknownKeys = len(r.LinearizabilityKeys), r.LinearizabilityUnknownKeys
	rep.NotLinearizableKeys = r.NotOkKeys()
	rep.TokenCheck = "checked"
	if !r.TokensChecked {
		rep.TokenCheck = "skipped: " + rep.Backend + " gives no fencing tokens (the campaign numbered its grants)"
	}
	rep.TokensReused, rep.TokenRegressions, rep.TokenExamples = r.TokensReused, r.TokenRegressions, r.TokenExamples
	rep.PermitExcess, rep.ModeTokenViolations, rep.SharedKeys = r.PermitExcess, r.ModeTokenViolations, r.SharedKeys
	rep.UnavailableS, rep.MaxRecoveryS = r.Unavailable.Seconds(), r.MaxRecovery.Seconds()
	rep.Cycles = 0
	for _, o := range rep.history {
		if o.Kind == check.Acquire && o.OK {
			rep.Cycles++
		}
	}
	rep.CyclesPerS = 0
	if rep.DurationS > 0 {
		rep.CyclesPerS = float64(rep.Cycles) / rep.DurationS
	}
	for i := range rep.Injected {
		rep.Injected[i].RecoveryS, rep.Injected[i].Recovered = r.Recoveries[i].Seconds(), r.Recovered[i]
	}
	rep.Availability = nil
	for _, a := range r.Availability {
		rep.Availability = append(rep.Availability, KindAvailability{Fault: a.Fault, Count: a.Count,
			ToGrantMedianS: a.ToGrantMedian.Seconds(), ToGrantMaxS: a.ToGrantMax.Seconds(),
			RecoveryMedianS: a.RecoveryMedian.Seconds(), RecoveryMaxS: a.RecoveryMax.Seconds(),
			Unserved: a.Unserved, Unrecovered: a.Unrecovered})
	}
	rep.Valid = !rep.breaks(false) || rep.Overlaps > 0
	rep.readsCheck()
	if rep.Holds == ChaosElection {
		rep.electionCheck()
	}
	rep.jointCheck()
}
