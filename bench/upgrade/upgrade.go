// Package upgrade is `lockgate-bench upgrade`: a rolling upgrade and
// downgrade drill of a raftlock cluster from an older binary to this one
// and back, under a lock workload whose history is checked.
package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/bench/campaign"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/fencedstore"
	"github.com/lockgate/lockgate/internal/servers"
)

// `lockgate-bench upgrade`: the rolling upgrade and downgrade drill of
// docs/operations.md, timed and checked. Three `lockgate node` processes
// start on the older binary; while SDK clients run a lock workload, the
// nodes are replaced one at a time by the newer binary (followers first,
// the leader last, each caught up before the next), the format gate rises
// and the newer features switch on; then the operator's downgrade lowers
// the gate, and the nodes are replaced one at a time by the older binary
// again. The history is checked as a chaos campaign's is: no overlap, no
// fencing token granted twice, no stale write accepted, linearizable.

// Defaults of UpgradeConfig.
const (
	DefaultUpgradeDuration = 2 * time.Minute
	DefaultUpgradeWorkers  = 8
	// DefaultClientLife is how long a worker keeps one SDK client before
	// it closes it and opens another: what a new client is offered shows
	// the gate's changes within about that long.
	DefaultClientLife = time.Second
	// DefaultUpgradeHold is the longest a worker holds a lock after its
	// writes.
	DefaultUpgradeHold = 20 * time.Millisecond
	// DefaultDowngradeTo is the format a downgrade lowers the gate to: a
	// binary that predates the format gate reads format 1.
	DefaultDowngradeTo = 1
)

// The drill's rhythm, as fractions of UpgradeConfig.Duration: when each
// phase may start at the earliest (a phase that runs late starts the next
// late). Node replacements are upgradeSwapStep apart.
const (
	upgradeSwapsAt     = 0.10 // the first node on the newer binary
	upgradeNewUntil    = 0.45 // the newer binary's features in use until the downgrade
	downgradeSwapsAt   = 0.55 // the first node back on the older binary
	upgradeSwapStep    = 0.07
	upgradeMinDuration = 30 * time.Second
)

// Bounds of the drill's steps: a step that takes longer fails the drill.
const (
	catchUpTimeout   = 60 * time.Second
	gateRiseTimeout  = 60 * time.Second
	downgradeTimeout = 3 * time.Minute
	featuresTimeout  = 30 * time.Second
	// downgradeWait is how long one downgrade request lets the leader
	// wait for the state to drain before it answers (asked again until
	// done).
	downgradeWait = 10 * time.Second
)

// UpgradeConfig configures RunUpgrade.
type UpgradeConfig struct {
	// From is the older lockgate binary: the cluster starts on it and
	// returns to it. To is the newer one.
	From, To string
	// FromName and ToName name the binaries in the report (a revision, a
	// version); default their paths.
	FromName, ToName string
	// Duration is the whole drill's, shared by its phases (default
	// DefaultUpgradeDuration, at least 30 s); slow steps make it longer.
	Duration time.Duration
	// Workers run the workload, each on SDK clients of its own, replaced
	// every ClientLife (defaults DefaultUpgradeWorkers and
	// DefaultClientLife); Hold bounds each hold (DefaultUpgradeHold).
	Workers    int
	ClientLife time.Duration
	Hold       time.Duration
	// DowngradeTo is the highest format From reads (DefaultDowngradeTo).
	DowngradeTo uint8
	// Seed seeds the workers' choices (default 1).
	Seed uint64
	// Command is the command line, kept in the report.
	Command string
	// Dir holds the fenced store's file (default: a temporary directory).
	Dir string
	// Log receives the nodes' output; Progress one line per step.
	Log, Progress io.Writer
}

func (c *UpgradeConfig) fill() error {
	if c.From == "" || c.To == "" {
		return errors.New("bench upgrade: want both an older (From) and a newer (To) lockgate binary")
	}
	for _, p := range []string{c.From, c.To} {
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("bench upgrade: lockgate binary %q: not a file (%v)", p, err)
		}
	}
	if c.FromName == "" {
		c.FromName = c.From
	}
	if c.ToName == "" {
		c.ToName = c.To
	}
	if c.Duration == 0 {
		c.Duration = DefaultUpgradeDuration
	}
	if c.Duration < upgradeMinDuration || c.Duration > 24*time.Hour {
		return fmt.Errorf("bench upgrade: duration %v: want %v to 24h", c.Duration, upgradeMinDuration)
	}
	if c.Workers == 0 {
		c.Workers = DefaultUpgradeWorkers
	}
	if c.ClientLife == 0 {
		c.ClientLife = DefaultClientLife
	}
	if c.Hold == 0 {
		c.Hold = DefaultUpgradeHold
	}
	if c.DowngradeTo == 0 {
		c.DowngradeTo = DefaultDowngradeTo
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Workers < 1 || c.Workers > 256 || c.ClientLife < 0 || c.Hold < 0 || c.DowngradeTo > fsm.MaxFormat {
		return fmt.Errorf("bench upgrade: workers %d, client life %v, hold %v, downgrade to %d: want 1–256 workers, no negative time, a format of 1 to %d",
			c.Workers, c.ClientLife, c.Hold, c.DowngradeTo, fsm.MaxFormat)
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return nil
}

// upgradeRun is one drill in progress.
type upgradeRun struct {
	cfg  UpgradeConfig
	c    *servers.Raftlock
	u    *upgradeWorkload
	rep  *UpgradeReport
	mc   *raftlock.MembershipClient // the downgrade's requests
	poll *raftlock.MembershipClient // the gate's status, polled

	mu   sync.Mutex
	gate []GateChange
}

// RunUpgrade runs the drill: three nodes of cfg.From, the workload, the
// rolling upgrade to cfg.To, the gate's rise, the downgrade, the rolling
// downgrade to cfg.From; then it checks the history. A step that fails
// (a node that does not catch up, a gate that does not move) ends the
// drill early: the report says so among its failures, and the history
// recorded until then is checked all the same. The error is for what
// kept the drill from running at all.
func RunUpgrade(ctx context.Context, cfg UpgradeConfig) (*UpgradeReport, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	dir, cleanup, err := provision.WorkDir(cfg.Dir, "lockgate-upgrade-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	store, err := fencedstore.Open(filepath.Join(dir, "fenced.log"), fencedstore.Options{})
	if err != nil {
		return nil, err
	}
	defer store.Close()
	fmt.Fprintf(cfg.Progress, "bench upgrade: %d workers, %v; starting %d lockgate nodes on %s\n", cfg.Workers, cfg.Duration, provision.RaftNodes, cfg.FromName)
	c, err := servers.StartRaftlock(ctx, cfg.From, provision.RaftNodes, servers.RaftlockOptions{Log: servers.WriterLogger(cfg.Log)})
	if err != nil {
		return nil, err
	}
	defer c.Close()

	r := &upgradeRun{cfg: cfg, c: c,
		mc:   &raftlock.MembershipClient{Timeout: downgradeWait + 20*time.Second},
		poll: &raftlock.MembershipClient{Timeout: 3 * time.Second},
		rep: &UpgradeReport{From: cfg.FromName, To: cfg.ToName, Workers: cfg.Workers, ClientLifeS: cfg.ClientLife.Seconds(),
			DowngradeTo: cfg.DowngradeTo, Command: cfg.Command, Errors: map[string]int{}}}
	r.u = &upgradeWorkload{Workload: &campaign.Workload{Store: store, Unfenced: campaign.NewUnfenced(), Base: time.Now(), Fencing: true},
		endpoints: c.APIAddrs, life: cfg.ClientLife, hold: max(cfg.Hold, time.Millisecond)}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for i := range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.u.worker(runCtx, rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1)))
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.watchGate(runCtx)
	}()
	drillErr := r.drill(runCtx)
	stop()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if drillErr != nil {
		r.rep.DrillError = drillErr.Error()
		fmt.Fprintf(cfg.Progress, "%6.1fs  drill failed: %v\n", r.u.Now().Seconds(), drillErr)
	}
	r.rep.DurationS = r.u.Now().Seconds()
	fmt.Fprintf(cfg.Progress, "checking %d operations\n", len(r.u.History()))
	t0 := time.Now()
	r.finish()
	fmt.Fprintf(cfg.Progress, "checked in %v\n", time.Since(t0).Round(time.Millisecond))
	return r.rep, nil
}

// at is the instant a fraction of the drill's duration after its start.
func (r *upgradeRun) at(frac float64) time.Time {
	return r.u.Base.Add(time.Duration(frac * float64(r.cfg.Duration)))
}

func (r *upgradeRun) progress(format string, args ...any) {
	fmt.Fprintf(r.cfg.Progress, "%6.1fs  %s\n", r.u.Now().Seconds(), fmt.Sprintf(format, args...))
}

// drill runs the phases in order; the first that fails ends it.
func (r *upgradeRun) drill(ctx context.Context) error {
	until := func(t time.Time) func() error {
		return func() error {
			provision.SleepCtx(ctx, time.Until(t))
			return ctx.Err()
		}
	}
	phases := []struct {
		name, what string
		run        func() error
	}{
		{PhaseOld, "every node on " + r.cfg.FromName, until(r.at(upgradeSwapsAt))},
		{PhaseUpgrade, "nodes replaced one at a time by " + r.cfg.ToName + ", the leader last", func() error {
			return r.replaceAll(ctx, r.cfg.To, upgradeSwapsAt)
		}},
		{PhaseGateRise, "the leader raises the format gate once every voter reads more", func() error { return r.awaitGateRise(ctx) }},
		{PhaseNew, "the newer features in use", func() error {
			if err := until(r.at(upgradeNewUntil))(); err != nil {
				return err
			}
			return r.awaitFeatures(ctx)
		}},
		{PhaseDowngrade, fmt.Sprintf("POST %s downgradeTo %d until done", raftlock.PathFormat, r.cfg.DowngradeTo), func() error { return r.downgrade(ctx) }},
		{PhaseDowngradeNodes, "nodes replaced one at a time by " + r.cfg.FromName + ", the leader last", func() error {
			return r.replaceAll(ctx, r.cfg.From, downgradeSwapsAt)
		}},
		{PhaseOldAgain, "every node on " + r.cfg.FromName + " again", until(r.at(1))},
	}
	for _, ph := range phases {
		p := UpgradePhase{Name: ph.name, What: ph.what, StartS: r.u.Now().Seconds()}
		r.progress("phase %s: %s", ph.name, ph.what)
		err := ph.run()
		if err == nil {
			err = r.nodesRunning()
		}
		p.EndS = r.u.Now().Seconds()
		r.rep.Phases = append(r.rep.Phases, p)
		if err != nil {
			return fmt.Errorf("phase %s: %w", ph.name, err)
		}
	}
	return nil
}

// nodesRunning fails when a node has exited on its own (a node that met
// a format it does not read halts and exits).
func (r *upgradeRun) nodesRunning() error {
	var errs []error
	for _, nd := range r.c.Nodes {
		if nd.PID() == 0 {
			e := fmt.Sprintf("node %s (%s) is not running: %s", nd.ID, r.nameOf(nd.Binary()), nd.ExitStatus())
			r.rep.NodeExits = append(r.rep.NodeExits, e)
			errs = append(errs, fmt.Errorf("%s; last output:\n%s", e, nd.LogTail()))
		}
	}
	return errors.Join(errs...)
}

func (r *upgradeRun) nameOf(bin string) string {
	switch bin {
	case r.cfg.From:
		return r.cfg.FromName
	case r.cfg.To:
		return r.cfg.ToName
	}
	return bin
}

// replaceAll replaces every node by bin, one at a time, the first at the
// fraction first of the drill and each next upgradeSwapStep later at the
// earliest: followers first, the leader last; each caught up with the
// leader's commit index before the next.
func (r *upgradeRun) replaceAll(ctx context.Context, bin string, first float64) error {
	done := map[string]bool{}
	for i := range r.c.Nodes {
		provision.SleepCtx(ctx, time.Until(r.at(first+float64(i)*upgradeSwapStep)))
		if err := ctx.Err(); err != nil {
			return err
		}
		nd, leader := r.nextToReplace(done)
		sw := NodeSwap{Node: nd.ID, From: r.nameOf(nd.Binary()), To: r.nameOf(bin), WasLeader: leader, StartS: r.u.Now().Seconds()}
		role := "a follower"
		if leader {
			role = "the leader"
		}
		r.progress("node %s (%s): %s → %s", nd.ID, role, sw.From, sw.To)
		if err := nd.RestartWith(bin); err != nil {
			return err
		}
		sw.ReadyS = r.u.Now().Seconds()
		if err := r.c.WaitCaughtUp(ctx, nd, catchUpTimeout); err != nil {
			return err
		}
		sw.CaughtUpS = r.u.Now().Seconds()
		r.rep.Swaps = append(r.rep.Swaps, sw)
		r.progress("node %s: ready after %.1fs, caught up after %.1fs", nd.ID, sw.ReadyS-sw.StartS, sw.CaughtUpS-sw.StartS)
		done[nd.ID] = true
	}
	return nil
}

// nextToReplace returns a node not yet done that does not lead, else the
// leader (leader true).
func (r *upgradeRun) nextToReplace(done map[string]bool) (*servers.RaftNode, bool) {
	l := r.c.Leader()
	var last *servers.RaftNode
	for _, nd := range r.c.Nodes {
		if done[nd.ID] {
			continue
		}
		if nd != l {
			return nd, false
		}
		last = nd
	}
	return last, true
}

// formatStatus asks the running nodes, the leader first, for the format
// gate; nodes whose binary predates it do not answer. nil when none did.
func (r *upgradeRun) formatStatus(ctx context.Context) (*raftlock.FormatStatus, string) {
	nodes := r.c.Nodes
	if l := r.c.Leader(); l != nil {
		nodes = append([]*servers.RaftNode{l}, nodes...)
	}
	for _, nd := range nodes {
		if nd.PID() == 0 {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st, err := r.poll.FormatStatus(pctx, nd.APIAddr)
		cancel()
		if err == nil {
			return st, nd.ID
		}
	}
	return nil, ""
}

// watchGate records every change of the gate, as the nodes report it,
// until ctx ends.
func (r *upgradeRun) watchGate(ctx context.Context) {
	for {
		if st, node := r.formatStatus(ctx); st != nil {
			r.noteGate(st.Gate, node)
		}
		if !provision.SleepCtx(ctx, 250*time.Millisecond) {
			return
		}
	}
}

func (r *upgradeRun) noteGate(g fsm.Gate, node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.gate); n > 0 && r.gate[n-1].Format == g.Format && r.gate[n-1].Offer == g.Offer && r.gate[n-1].Ceiling == g.Ceiling {
		return
	}
	r.gate = append(r.gate, GateChange{AtS: r.u.Now().Seconds(), Gate: g.String(), Format: g.Format, Offer: g.Offer, Ceiling: g.Ceiling, Node: node})
}

// awaitGateRise waits until the gate is at the lowest format every voter
// reads (every voter answering), and that is above the format a
// downgrade returns to.
func (r *upgradeRun) awaitGateRise(ctx context.Context) error {
	deadline := time.Now().Add(gateRiseTimeout)
	last := "no node answered " + raftlock.PathFormat
	for {
		if st, node := r.formatStatus(ctx); st != nil {
			r.noteGate(st.Gate, node)
			want, known := uint8(fsm.MaxFormat), len(st.Voters) == len(r.c.Nodes)
			for _, v := range st.Voters {
				known = known && v.Reads != 0
				want = min(want, v.Reads)
			}
			last = fmt.Sprintf("gate %s, voters %+v", st.Gate, st.Voters)
			if known && want <= r.cfg.DowngradeTo {
				// An answer of before the last replacement (a node
				// answers GET /v1/cluster/format at most once a
				// second), or a newer binary that reads no more.
				last = fmt.Sprintf("every voter reads format %d at most: %s offers nothing a downgrade to %d would take away (gate %s, voters %+v)",
					want, r.cfg.ToName, r.cfg.DowngradeTo, st.Gate, st.Voters)
			} else if known && st.Gate.Format == want && st.Gate.Offer == want {
				r.rep.GateRoseTo = want
				r.progress("gate at %s (node %s)", st.Gate, node)
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the format gate did not rise within %v: %s", gateRiseTimeout, last)
		}
		if !provision.SleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// awaitFeatures waits until a client has been offered sessions.
func (r *upgradeRun) awaitFeatures(ctx context.Context) error {
	deadline := time.Now().Add(featuresTimeout)
	for {
		r.u.umu.Lock()
		on := r.u.on
		r.u.umu.Unlock()
		if on {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no client was offered sessions within %v of the gate's rise", featuresTimeout)
		}
		if !provision.SleepCtx(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// downgrade runs the operator's downgrade: POST downgradeTo until the
// leader answers done (the gate lowered, every voter's snapshot past it).
func (r *upgradeRun) downgrade(ctx context.Context) error {
	r.u.downgrade.Store(int64(r.u.Now()) + 1)
	d := &r.rep.Downgrade
	d.AskedS = r.u.Now().Seconds()
	deadline := time.Now().Add(downgradeTimeout)
	for {
		var addr string
		for _, nd := range r.c.Nodes {
			if nd.PID() != 0 {
				addr = nd.APIAddr
				break
			}
		}
		rep, err := r.mc.ChangeFormat(ctx, addr, raftlock.FormatArgs{DowngradeTo: r.cfg.DowngradeTo, WaitMs: downgradeWait.Milliseconds()})
		d.Asks++
		switch {
		case err == nil && rep.Done:
			// The leader's answer is the gate's fall: the nodes that
			// could show it may be replaced by the older binary (which
			// has no format endpoint) before the watcher asks again.
			r.noteGate(rep.Gate, rep.LeaderID)
			d.DoneS, d.Index, d.Message = r.u.Now().Seconds(), rep.Index, rep.Message
			r.progress("downgrade done after %d request(s): %s", d.Asks, rep.Message)
			return nil
		case err == nil:
			r.progress("downgrade: %s (gate %s; sessions %d with %d leases, shared %d)", rep.Message, rep.Gate, rep.Drain.Sessions, rep.Drain.SessionLeases, rep.Drain.Shared)
		default:
			r.progress("downgrade: %v", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the downgrade was not done within %v (%d requests)", downgradeTimeout, d.Asks)
		}
		if err != nil && !provision.SleepCtx(ctx, 500*time.Millisecond) {
			return ctx.Err()
		}
	}
}
