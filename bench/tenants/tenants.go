// Package tenants is `lockgate-bench tenants`: one tenant floods a raftlock
// cluster's gateway (sessions, leases, waiters, watches, request rate,
// forbidden keys) while another runs its workload, and the victim's
// latency beside the attacker is compared with its latency alone.
package tenants

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/report"
	"github.com/lockgate/lockgate/internal/servers"
	"github.com/lockgate/lockgate/lock"
)

// `lockgate-bench tenants`: the noisy-neighbour benchmark. Three `lockgate
// node` processes run with two identities in their tokens file, victim and
// attacker, and a policy file that gives the attacker small quotas and a
// rate. In the first phase (alone) the victim's workload runs by itself:
// workers acquiring and releasing keys of their own, workers contending
// for one key, and a prefix watch over the victim's keys. In the second
// (beside) the same workload runs while the attacker floods at and beyond
// every quota — sessions (WebSocket and REST, over several connections,
// reconnecting), leases (WebSocket and REST), waiting acquires, prefix
// watches — and hammers try-acquires as fast as it can. The goal: the
// victim loses nothing (every acquire granted, no lease, session or watch
// lost) and its p99 acquire latency beside the attacker is at most
// TenantsGoalRatio times its p99 alone.

// The identities of the benchmark, as its tokens and policy files name
// them, and the prefixes of their keys.
const (
	TenantVictim   = "victim"
	TenantAttacker = "attacker"
	victimPrefix   = TenantVictim + "/"
	attackerPrefix = TenantAttacker + "/"
)

// The phases, as the report names them.
const (
	PhaseAlone  = "alone"
	PhaseBeside = "beside"
)

// The attacker's floods, as the report names them.
const (
	FloodSessionsWS   = "sessions-ws"
	FloodSessionsREST = "sessions-rest"
	FloodLeasesWS     = "leases-ws"
	FloodLeasesREST   = "leases-rest"
	FloodWaiters      = "waiters-rest"
	FloodWatches      = "watches"
	FloodHammer       = "hammer"
	FloodForbidden    = "forbidden"
)

// The quotas of an identity, as the policy and quota_exceeded name them.
const (
	QuotaSessions = "sessions"
	QuotaLeases   = "leases"
	QuotaWaiters  = "waiters"
	QuotaWatches  = "watches"
)

// Defaults of TenantsConfig.
const (
	DefaultTenantsDuration    = 60 * time.Second
	DefaultTenantsSeqWorkers  = 4
	DefaultTenantsHotWorkers  = 4
	DefaultTenantsHold        = time.Millisecond
	DefaultTenantsAttackConns = 4
	// TenantsGoalRatio bounds the victim's p99 acquire latency beside the
	// attacker, as a multiple of its p99 alone.
	TenantsGoalRatio = 2.0
)

// Bounds and paces of the benchmark.
const (
	tenantsMinDuration = 4 * time.Second
	// tenantsOpTimeout bounds one victim acquire or release: one that
	// takes longer is a failure.
	tenantsOpTimeout = 10 * time.Second
	// tenantsWarmupTimeout bounds the victim's first cycle of a phase
	// (connections, sessions), which is not measured.
	tenantsWarmupTimeout = 30 * time.Second
	// tenantsBeyondPause is how long a flood's worker waits after a
	// refusal for its quota (or at its cap) before it asks again: the
	// pressure beyond the quota. tenantsRatePause is the wait after
	// rate_limited, tenantsErrorPause after any other error. (The
	// hammer waits for nothing: it is the flood beyond the rate.)
	tenantsBeyondPause = 100 * time.Millisecond
	tenantsRatePause   = 20 * time.Millisecond
	tenantsErrorPause  = 50 * time.Millisecond
	// A flood goes at most this many times past its quota (at least
	// tenantsMinCap): without a quota in force the attacker stops there.
	tenantsCapFactor = 2
	tenantsMinCap    = 16
	// tenantsSessionsPerConn is how many sessions a WebSocket worker opens
	// on one connection before it closes the client and connects anew
	// (the sessions stay open: a keeper client keeps them alive).
	tenantsSessionsPerConn = 16
	// tenantsRESTReconnect: a REST worker drops its connections after
	// this many requests.
	tenantsRESTReconnect = 25
	// tenantsWaiterWorkersPerConn: a REST waiting acquire answers only
	// after the gateway's synchronous window (2 s), so the waiters flood
	// runs this many requests at once per attack connection.
	tenantsWaiterWorkersPerConn = 25
	// tenantsMaxRESTWaiters stays below the gateway's 1024 tickets per
	// client, which would refuse before the quota does.
	tenantsMaxRESTWaiters = 1000
	// tenantsHammerAfter is the fraction of the beside phase after which
	// the hammer starts even if a quota flood has not been refused yet.
	tenantsHammerAfter    = 0.4
	tenantsForbiddenEvery = 50 * time.Millisecond
	tenantsStatusEvery    = 5 * time.Second
	tenantsAttackTTL      = lock.DefaultSessionTTL
)

// TenantsConfig configures RunTenants.
type TenantsConfig struct {
	// Binary is the lockgate binary the nodes run.
	Binary string
	// Duration is both phases' (half each; default
	// DefaultTenantsDuration, at least 4 s).
	Duration time.Duration
	// SeqWorkers acquire and release keys of their own
	// (victim/seq-N); HotWorkers contend for victim/hot and hold it Hold.
	// Each runs on a Go SDK client of its own, with its session.
	SeqWorkers, HotWorkers int
	Hold                   time.Duration
	// AttackConns is how many connections (SDK clients, REST
	// connection pools) each of the attacker's floods spreads over.
	AttackConns int
	// HammerRate, when above 0, paces the hammer to that many requests/s
	// in all; 0: as fast as its workers get answers.
	HammerRate float64
	// WatchPrefix is the prefix the attacker's watches watch (default
	// the attacker's own keys, whose churn they all receive).
	WatchPrefix string
	// Policy is the nodes' policy (nil: DefaultTenantsPolicy()). It must
	// let the victim lock victim/ and the attacker attacker/.
	Policy *TenantsPolicy
	// NoPolicy is the control run: the nodes get no --policy-file and a
	// tokens file of bare tokens, so nothing limits the attacker (its
	// floods stop at their caps, twice the policy's quotas).
	NoPolicy bool
	// Command is the command line, kept in the report.
	Command string
	// Dir holds the tokens and policy files (default: a temporary
	// directory).
	Dir string
	// Log receives the nodes' output; Progress a line per step.
	Log, Progress io.Writer
}

func (c *TenantsConfig) fill() error {
	if c.Binary == "" {
		return errors.New("bench tenants: no lockgate binary for the nodes")
	}
	if fi, err := os.Stat(c.Binary); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("bench tenants: lockgate binary %q: not a file (%v)", c.Binary, err)
	}
	if c.Duration == 0 {
		c.Duration = DefaultTenantsDuration
	}
	if c.Duration < tenantsMinDuration || c.Duration > 24*time.Hour {
		return fmt.Errorf("bench tenants: duration %v: want %v to 24h", c.Duration, tenantsMinDuration)
	}
	if c.SeqWorkers == 0 {
		c.SeqWorkers = DefaultTenantsSeqWorkers
	}
	if c.HotWorkers == 0 {
		c.HotWorkers = DefaultTenantsHotWorkers
	}
	if c.Hold == 0 {
		c.Hold = DefaultTenantsHold
	}
	if c.AttackConns == 0 {
		c.AttackConns = DefaultTenantsAttackConns
	}
	if c.SeqWorkers < 0 || c.HotWorkers < 0 || c.SeqWorkers+c.HotWorkers < 1 || c.SeqWorkers > 64 || c.HotWorkers > 64 ||
		c.Hold < 0 || c.Hold > time.Second || c.AttackConns < 1 || c.AttackConns > 32 || c.HammerRate < 0 {
		return fmt.Errorf("bench tenants: %d sequential and %d contended workers, hold %v, %d attack connections, hammer rate %g: "+
			"want 0–64 workers of each kind (at least one in all), a hold of 0 to 1s, 1–32 connections, a rate of at least 0",
			c.SeqWorkers, c.HotWorkers, c.Hold, c.AttackConns, c.HammerRate)
	}
	if c.WatchPrefix == "" {
		c.WatchPrefix = attackerPrefix
	}
	if c.Policy == nil {
		p := DefaultTenantsPolicy()
		c.Policy = &p
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return nil
}

// RunTenants starts the cluster with the identities and the policy, runs
// the victim alone and then beside the attacker, each for half of
// cfg.Duration, and judges the goal. The error is for what kept the
// benchmark from running (nodes that do not start, a victim that cannot
// acquire at all); a goal not met is in the report.
func RunTenants(ctx context.Context, cfg TenantsConfig) (*TenantsReport, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	dir, cleanup, err := provision.WorkDir(cfg.Dir, "lockgate-tenants-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	files, err := writeTenantsFiles(dir, *cfg.Policy, !cfg.NoPolicy)
	if err != nil {
		return nil, fmt.Errorf("bench tenants: writing the tokens and policy files: %w", err)
	}
	aq := cfg.Policy.QuotaOf(TenantAttacker)
	fmt.Fprintf(cfg.Progress, "bench tenants: 2 phases of %v; starting %d lockgate nodes (%s)\n",
		cfg.Duration/2, provision.RaftNodes, strings.Join(files.nodeArgs(), " "))
	c, err := servers.StartRaftlock(ctx, cfg.Binary, provision.RaftNodes, servers.RaftlockOptions{
		Log:  servers.WriterLogger(cfg.Log),
		Args: func(int, []*servers.RaftNode) []string { return files.nodeArgs() },
	})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	rep := &TenantsReport{Nodes: provision.RaftNodes, PhaseS: (cfg.Duration / 2).Seconds(), SeqWorkers: cfg.SeqWorkers, HotWorkers: cfg.HotWorkers,
		HoldMS: report.Millis(cfg.Hold), AttackConns: cfg.AttackConns, HammerRate: cfg.HammerRate, WatchPrefix: cfg.WatchPrefix,
		PolicyFile: !cfg.NoPolicy, Policy: *cfg.Policy, Attacker: aq, Command: cfg.Command}
	r := &tenantsRun{cfg: cfg, c: c, files: files}
	for _, name := range []string{PhaseAlone, PhaseBeside} {
		p, err := r.phase(ctx, name, cfg.Duration/2)
		if err != nil {
			return nil, err
		}
		rep.Phases = append(rep.Phases, p)
		for _, nd := range c.Nodes {
			if nd.PID() == 0 {
				rep.NodeExits = append(rep.NodeExits, fmt.Sprintf("after phase %s: node %s is not running: %s", name, nd.ID, nd.ExitStatus()))
			}
		}
	}
	rep.evaluate()
	return rep, nil
}

// tenantsRun is one benchmark in progress.
type tenantsRun struct {
	cfg   TenantsConfig
	c     *servers.Raftlock
	files tenantsFiles
}

func (r *tenantsRun) progress(format string, args ...any) {
	fmt.Fprintf(r.cfg.Progress, format+"\n", args...)
}

// phase runs one phase: the victim's clients warm up (unmeasured), then
// the victim's workload — and, beside, the attacker — for d.
func (r *tenantsRun) phase(ctx context.Context, name string, d time.Duration) (TenantsPhase, error) {
	p := TenantsPhase{Name: name}
	if name == PhaseAlone {
		p.What = "the victim's workload alone"
	} else {
		p.What = "the victim's workload beside the attacker flooding at and beyond its quotas"
	}
	v := newTenantsVictim(r)
	defer v.close()
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	if err := v.warmUp(ctx, pctx); err != nil {
		return p, fmt.Errorf("bench tenants: phase %s: %w", name, err)
	}
	r.progress("phase %s: %s, %v", name, p.What, d)
	var a *tenantsAttacker
	start := time.Now()
	timer := time.AfterFunc(d, stop)
	defer timer.Stop()
	var wg sync.WaitGroup
	if name == PhaseBeside {
		a = newTenantsAttacker(r, start, d)
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.run(pctx)
		}()
	}
	v.run(ctx, pctx)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return p, err
	}
	p.DurationS = time.Since(start).Seconds()
	p.Victim = v.result()
	if a != nil {
		a.close()
		res := a.result()
		p.Attacker = &res
	}
	r.progress("phase %s: victim %d of %d acquires granted; p99 sequential %.2f ms, contended %.2f ms; %d watch events",
		name, p.Victim.Granted, p.Victim.Attempts, p.Victim.Sequential.P99US/1000, p.Victim.Contended.P99US/1000, p.Victim.WatchEvents)
	return p, nil
}
