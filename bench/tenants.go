package bench

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/internal/servers"
	"github.com/lockgate/lockgate/lock"
)

// `lockgate bench tenants`: the noisy-neighbour benchmark. Three `lockgate
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

// The refusal codes the attacker counts (docs/protocol.md): the tenants'
// own and the per-connection limits a flood across connections may meet
// first.
const (
	CodeQuotaExceeded   = "quota_exceeded"
	CodeRateLimited     = "rate_limited"
	CodeTooManySessions = "too_many_sessions"
	CodeForbidden       = "forbidden"
	codeTooManyWaiters  = "too_many_waiters"
	codeTooManyWatches  = "too_many_watches"
	codeTooManyLocks    = "too_many_locks"
	codeTooManyTickets  = "too_many_tickets"
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

// TenantQuota is one identity's quotas as the policy file gives them:
// sessions open, leases held, waiting acquires and watches open (each
// cluster-wide), and a token bucket of Rate requests/s with Burst (0:
// unlimited). Keep-alives and renewals are never rate-limited.
type TenantQuota struct {
	Sessions int     `json:"sessions"`
	Leases   int     `json:"leases"`
	Waiters  int     `json:"waiters"`
	Watches  int     `json:"watches"`
	Rate     float64 `json:"rate"`
	Burst    int     `json:"burst"`
}

// TenantRule is one rule of the policy: identity ("*": every one) may do
// Allow (read, lock, admin) on keys starting with Prefix, or not (Deny).
type TenantRule struct {
	Identity string `json:"identity"`
	Prefix   string `json:"prefix"`
	Allow    string `json:"allow,omitempty"`
	Deny     bool   `json:"deny,omitempty"`
}

// TenantsPolicy is the policy file the benchmark gives the nodes
// (--policy-file).
type TenantsPolicy struct {
	Defaults   TenantQuota            `json:"defaults"`
	Identities map[string]TenantQuota `json:"identities"`
	Rules      []TenantRule           `json:"rules"`
}

// DefaultTenantsPolicy is the benchmark's policy: the gateway's default
// quotas for everyone, small ones and a rate for the attacker, each
// identity allowed to lock its own prefix and everyone to read.
func DefaultTenantsPolicy() TenantsPolicy {
	return TenantsPolicy{
		Defaults: TenantQuota{Sessions: 1000, Leases: 100000, Waiters: 10000, Watches: 1000},
		Identities: map[string]TenantQuota{
			TenantAttacker: {Sessions: 200, Leases: 2000, Waiters: 500, Watches: 100, Rate: 500, Burst: 1000},
		},
		Rules: []TenantRule{
			{Identity: TenantVictim, Prefix: victimPrefix, Allow: "lock"},
			{Identity: TenantAttacker, Prefix: attackerPrefix, Allow: "lock"},
			{Identity: "*", Prefix: "", Allow: "read"},
		},
	}
}

// QuotaOf returns identity's quotas: its own, else the defaults.
func (p TenantsPolicy) QuotaOf(identity string) TenantQuota {
	if q, ok := p.Identities[identity]; ok {
		return q
	}
	return p.Defaults
}

// ReadTenantsPolicy reads a policy file; unknown fields are errors.
func ReadTenantsPolicy(path string) (TenantsPolicy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return TenantsPolicy{}, err
	}
	var p TenantsPolicy
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return TenantsPolicy{}, fmt.Errorf("policy %s: %w", path, err)
	}
	return p, nil
}

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

// tenantsFiles are the files the nodes are started with, and the
// identities' tokens.
type tenantsFiles struct {
	Tokens, Admin, Policy string // paths; Policy "" without a policy
	VictimToken           string
	AttackerToken         string
}

// nodeArgs are the `lockgate node` flags that point at the files.
func (f tenantsFiles) nodeArgs() []string {
	args := []string{"--auth-tokens-file", f.Tokens, "--admin-tokens-file", f.Admin}
	if f.Policy != "" {
		args = append(args, "--policy-file", f.Policy)
	}
	return args
}

// newTenantToken returns 32 random bytes in hex.
func newTenantToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// writeTenantsFiles writes into dir the clients' tokens file — "NAME
// TOKEN" lines for victim and attacker, or bare tokens without a policy
// (named), a binary that predates identities reads them — an admin
// tokens file (client tokens close the open join of a loopback cluster),
// and, with named, the policy file.
func writeTenantsFiles(dir string, policy TenantsPolicy, named bool) (tenantsFiles, error) {
	var f tenantsFiles
	var err error
	if f.VictimToken, err = newTenantToken(); err != nil {
		return f, err
	}
	if f.AttackerToken, err = newTenantToken(); err != nil {
		return f, err
	}
	admin, err := newTenantToken()
	if err != nil {
		return f, err
	}
	var toks strings.Builder
	toks.WriteString("# lockgate bench tenants: the clients' identities and their bearer tokens\n")
	for _, id := range []struct{ name, token string }{{TenantVictim, f.VictimToken}, {TenantAttacker, f.AttackerToken}} {
		if named {
			fmt.Fprintf(&toks, "%s %s\n", id.name, id.token)
		} else {
			fmt.Fprintf(&toks, "# %s\n%s\n", id.name, id.token)
		}
	}
	f.Tokens, f.Admin = filepath.Join(dir, "tokens"), filepath.Join(dir, "admin-tokens")
	if err := os.WriteFile(f.Tokens, []byte(toks.String()), 0o600); err != nil {
		return f, err
	}
	if err := os.WriteFile(f.Admin, []byte("# lockgate bench tenants: the nodes' admin token (join)\n"+admin+"\n"), 0o600); err != nil {
		return f, err
	}
	if named {
		data, err := json.MarshalIndent(policy, "", "  ")
		if err != nil {
			return f, err
		}
		f.Policy = filepath.Join(dir, "policy.json")
		if err := os.WriteFile(f.Policy, append(data, '\n'), 0o600); err != nil {
			return f, err
		}
	}
	return f, nil
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
	dir, cleanup, err := workDir(cfg.Dir, "lockgate-tenants-")
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
		cfg.Duration/2, RaftNodes, strings.Join(files.nodeArgs(), " "))
	c, err := servers.StartRaftlock(ctx, cfg.Binary, RaftNodes, servers.RaftlockOptions{
		Log:  servers.WriterLogger(cfg.Log),
		Args: func(int, []*servers.RaftNode) []string { return files.nodeArgs() },
	})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	rep := &TenantsReport{Nodes: RaftNodes, PhaseS: (cfg.Duration / 2).Seconds(), SeqWorkers: cfg.SeqWorkers, HotWorkers: cfg.HotWorkers,
		HoldMS: msf(cfg.Hold), AttackConns: cfg.AttackConns, HammerRate: cfg.HammerRate, WatchPrefix: cfg.WatchPrefix,
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

// tenantsVictim is the victim's workload of one phase.
type tenantsVictim struct {
	r       *tenantsRun
	clients []*client.Client
	seq     []*client.Client
	hot     []*client.Client
	watcher *client.Client

	mu        sync.Mutex
	res       TenantsVictim
	seqHist   *hdrhistogram.Histogram
	hotHist   *hdrhistogram.Histogram
	sessions  map[*lock.Session]bool
	lastEvent time.Time
	trackers  sync.WaitGroup
}

func newTenantsVictim(r *tenantsRun) *tenantsVictim {
	return &tenantsVictim{r: r, seqHist: newHist(), hotHist: newHist(), sessions: map[*lock.Session]bool{},
		res: TenantsVictim{Failures: map[string]int{}}}
}

func (v *tenantsVictim) newClient(id string) (*client.Client, error) {
	c, err := client.New(v.r.c.APIAddrs, client.Options{Token: v.r.files.VictimToken, ClientID: id})
	if err != nil {
		return nil, err
	}
	v.clients = append(v.clients, c)
	return c, nil
}

func seqKey(i int) string { return fmt.Sprintf("%sseq-%d", victimPrefix, i) }

const hotKey = victimPrefix + "hot"

// warmUp opens the victim's clients and makes one cycle on each (its
// connection and its session), unmeasured; pctx is the phase's, which
// the sessions are tracked until.
func (v *tenantsVictim) warmUp(ctx, pctx context.Context) error {
	for i := range v.r.cfg.SeqWorkers {
		c, err := v.newClient(fmt.Sprintf("victim-seq-%d", i))
		if err != nil {
			return err
		}
		v.seq = append(v.seq, c)
	}
	for i := range v.r.cfg.HotWorkers {
		c, err := v.newClient(fmt.Sprintf("victim-hot-%d", i))
		if err != nil {
			return err
		}
		v.hot = append(v.hot, c)
	}
	c, err := v.newClient("victim-watch")
	if err != nil {
		return err
	}
	v.watcher = c
	errs := make(chan error, len(v.seq)+len(v.hot))
	warm := func(c *client.Client, key string) {
		wctx, cancel := context.WithTimeout(ctx, tenantsWarmupTimeout)
		defer cancel()
		lease, err := c.Acquire(wctx, key, lock.AcquireOptions{})
		if err == nil {
			v.track(pctx, lease.Session())
			err = c.Release(wctx, lease)
		}
		if err != nil {
			err = fmt.Errorf("the victim's first acquire and release of %s (unmeasured): %w", key, err)
		}
		errs <- err
	}
	for i, c := range v.seq {
		go warm(c, seqKey(i))
	}
	for _, c := range v.hot {
		go warm(c, hotKey)
	}
	var all []error
	for range len(v.seq) + len(v.hot) {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// run runs the workload until pctx ends; each worker finishes its cycle
// (bounded by ctx) and returns.
func (v *tenantsVictim) run(ctx, pctx context.Context) {
	var wg sync.WaitGroup
	for i, c := range v.seq {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v.worker(ctx, pctx, c, seqKey(i), false)
		}()
	}
	for _, c := range v.hot {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v.worker(ctx, pctx, c, hotKey, true)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		v.watch(pctx)
	}()
	wg.Wait()
	v.trackers.Wait()
}

// tenantsCounts are a worker's tallies, added to the phase's at its end.
type tenantsCounts struct {
	attempts, granted, releases, releaseFailures, leasesLost int
	failures                                                 map[string]int
}

func (v *tenantsVictim) worker(ctx, pctx context.Context, c *client.Client, key string, contended bool) {
	h := newHist()
	n := tenantsCounts{failures: map[string]int{}}
	for pctx.Err() == nil && ctx.Err() == nil {
		v.cycle(ctx, pctx, c, key, contended, h, &n)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if contended {
		v.hotHist.Merge(h)
	} else {
		v.seqHist.Merge(h)
	}
	v.res.Attempts += n.attempts
	v.res.Granted += n.granted
	v.res.Releases += n.releases
	v.res.ReleaseFailures += n.releaseFailures
	v.res.LeasesLost += n.leasesLost
	for k, x := range n.failures {
		v.res.Failures[k] += x
	}
}

// cycle is one acquire (timed), hold and release.
func (v *tenantsVictim) cycle(ctx, pctx context.Context, c *client.Client, key string, contended bool, h *hdrhistogram.Histogram, n *tenantsCounts) {
	actx, cancel := context.WithTimeout(ctx, tenantsOpTimeout)
	defer cancel()
	t0 := time.Now()
	lease, err := c.Acquire(actx, key, lock.AcquireOptions{})
	d := time.Since(t0)
	if ctx.Err() != nil {
		return // the run was interrupted: not the victim's failure
	}
	n.attempts++
	if err != nil {
		n.failures["acquire: "+tenantsErrKind(err)]++
		sleepCtx(pctx, tenantsErrorPause)
		return
	}
	n.granted++
	h.RecordValue(min(max(d.Microseconds(), histMin), histMax))
	v.track(pctx, lease.Session())
	if contended && v.r.cfg.Hold > 0 {
		time.Sleep(v.r.cfg.Hold)
	}
	lost := lease.Err() != nil
	err = c.Release(actx, lease)
	switch {
	case err == nil && !lost:
		n.releases++
	case lost || errors.Is(err, lock.ErrNotHeld):
		n.leasesLost++
		cause := err
		if lost {
			cause = lease.Err()
		}
		n.failures["lease lost: "+tenantsErrKind(cause)]++
	default:
		n.releaseFailures++
		n.failures["release: "+tenantsErrKind(err)]++
	}
}

// track follows a session of the victim's until the phase ends: one that
// ends before is lost (the SDK's keep-alive was refused, or it ran out).
func (v *tenantsVictim) track(pctx context.Context, s *lock.Session) {
	if s == nil {
		return
	}
	v.mu.Lock()
	if v.sessions[s] {
		v.mu.Unlock()
		return
	}
	v.sessions[s] = true
	v.res.Sessions++
	v.mu.Unlock()
	v.trackers.Add(1)
	go func() {
		defer v.trackers.Done()
		select {
		case <-s.Done():
			if pctx.Err() == nil {
				v.mu.Lock()
				v.res.SessionsLost++
				v.res.Failures["session lost: "+tenantsErrKind(s.Err())]++
				v.mu.Unlock()
			}
		case <-pctx.Done():
		}
	}()
}

// watch keeps a prefix watch on the victim's keys until pctx ends,
// counting its events; a watch that breaks is counted and opened again.
func (v *tenantsVictim) watch(pctx context.Context) {
	for pctx.Err() == nil {
		ch, err := v.watcher.WatchPrefix(pctx, victimPrefix)
		if err != nil {
			if pctx.Err() != nil {
				return
			}
			v.mu.Lock()
			v.res.WatchOpenFailures++
			v.res.Failures["watch: "+tenantsErrKind(err)]++
			v.mu.Unlock()
			sleepCtx(pctx, tenantsErrorPause)
			continue
		}
		broke := false
		for ev := range ch {
			now := time.Now()
			v.mu.Lock()
			switch ev.Type {
			case lock.EventSynced:
				v.lastEvent = now
			case lock.EventGranted, lock.EventReleased, lock.EventExpired:
				v.res.WatchEvents++
				if ev.Type == lock.EventExpired {
					v.res.WatchExpired++
				}
				if !v.lastEvent.IsZero() {
					v.res.WatchMaxGapMS = max(v.res.WatchMaxGapMS, msf(now.Sub(v.lastEvent)))
				}
				v.lastEvent = now
			case lock.EventError:
				if pctx.Err() == nil {
					broke = true
					v.res.Failures["watch broke: "+tenantsErrKind(ev.Err)]++
				}
			}
			v.mu.Unlock()
		}
		if pctx.Err() == nil {
			if !broke {
				v.mu.Lock()
				v.res.Failures["watch broke: closed"]++
				v.mu.Unlock()
			}
			v.mu.Lock()
			v.res.WatchBreaks++
			v.lastEvent = time.Time{}
			v.mu.Unlock()
		}
	}
}

// result is the phase's victim figures.
func (v *tenantsVictim) result() TenantsVictim {
	v.mu.Lock()
	defer v.mu.Unlock()
	res := v.res
	res.Failures = maps.Clone(v.res.Failures)
	if res.Attempts > 0 {
		res.SuccessRate = float64(res.Granted) / float64(res.Attempts)
	}
	res.Sequential, res.Contended = tenantsLatencyOf(v.seqHist), tenantsLatencyOf(v.hotHist)
	res.SessionsKept = res.Sessions - res.SessionsLost
	return res
}

// close closes the sessions the phase opened (their leases are released
// already) and the clients.
func (v *tenantsVictim) close() {
	v.mu.Lock()
	sessions := slices.Collect(maps.Keys(v.sessions))
	v.mu.Unlock()
	if len(v.clients) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		for _, s := range sessions {
			if s.Err() == nil {
				v.clients[0].CloseSession(ctx, s)
			}
		}
		cancel()
	}
	for _, c := range v.clients {
		c.Close()
	}
}

// tenantsLatencyOf summarises an acquire-latency histogram (µs).
func tenantsLatencyOf(h *hdrhistogram.Histogram) TenantsLatency {
	if h == nil || h.TotalCount() == 0 {
		return TenantsLatency{}
	}
	return TenantsLatency{Count: h.TotalCount(), P50US: float64(h.ValueAtQuantile(50)),
		P99US: float64(h.ValueAtQuantile(99)), MaxUS: float64(h.Max())}
}

// tenantsRefusal returns the refusal code of err — a tenant's refusal, or
// a per-connection limit — and, for quota_exceeded over REST, the quota
// the gateway named; "" when err is no refusal.
func tenantsRefusal(err error) (code, quota string) {
	var re *tenantsRESTError
	if errors.As(err, &re) {
		switch re.Code {
		case CodeQuotaExceeded, CodeRateLimited, CodeTooManySessions, CodeForbidden,
			codeTooManyWaiters, codeTooManyWatches, codeTooManyLocks, codeTooManyTickets:
			return re.Code, re.Quota
		}
		return "", ""
	}
	switch {
	case errors.Is(err, lock.ErrQuotaExceeded):
		return CodeQuotaExceeded, ""
	case errors.Is(err, lock.ErrRateLimited):
		return CodeRateLimited, ""
	case errors.Is(err, lock.ErrTooManySessions):
		return CodeTooManySessions, ""
	case errors.Is(err, lock.ErrForbidden):
		return CodeForbidden, ""
	}
	var se *client.ServerError
	if errors.As(err, &se) {
		switch se.Code {
		case codeTooManyWaiters, codeTooManyWatches, codeTooManyLocks, codeTooManyTickets:
			return se.Code, ""
		}
	}
	return "", ""
}

// tenantsErrKind names an error for the report: its refusal code, else
// its kind.
func tenantsErrKind(err error) string {
	if err == nil {
		return "none"
	}
	if code, _ := tenantsRefusal(err); code != "" {
		return code
	}
	var re *tenantsRESTError
	switch {
	case errors.Is(err, client.ErrUnauthorized):
		return "unauthorized"
	case errors.Is(err, lock.ErrSessionExpired):
		return "session_expired"
	case errors.Is(err, lock.ErrExpired):
		return "expired"
	case errors.As(err, &re):
		if re.Code != "" {
			return re.Code
		}
		return fmt.Sprintf("http %d", re.Status)
	}
	return errorKind(err)
}

// msf is d in milliseconds.
func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// jitter is d scaled by a random factor in [0.5, 1.5).
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.5 + mrand.Float64()))
}

// TenantsReport is the outcome of RunTenants; its JSON form is the schema
// of `lockgate bench tenants --json`.
type TenantsReport struct {
	Nodes       int     `json:"nodes"`
	PhaseS      float64 `json:"phase_s"`
	SeqWorkers  int     `json:"seq_workers"`
	HotWorkers  int     `json:"hot_workers"`
	HoldMS      float64 `json:"hold_ms"`
	AttackConns int     `json:"attack_conns"`
	HammerRate  float64 `json:"hammer_rate"`
	WatchPrefix string  `json:"attacker_watch_prefix"`
	// PolicyFile is false for the control run (no --policy-file).
	PolicyFile bool          `json:"policy_file"`
	Policy     TenantsPolicy `json:"policy"`
	// Attacker is the attacker's quotas under Policy.
	Attacker TenantQuota    `json:"attacker_quota"`
	Phases   []TenantsPhase `json:"phases"`
	// NodeExits lists nodes found not running after a phase.
	NodeExits []string    `json:"node_exits,omitempty"`
	Goal      TenantsGoal `json:"goal"`
	GoalMet   bool        `json:"goal_met"`
	Command   string      `json:"command,omitempty"`
}

// TenantsPhase is one phase: what the victim saw, and beside, what the
// attacker did.
type TenantsPhase struct {
	Name      string           `json:"name"`
	What      string           `json:"what"`
	DurationS float64          `json:"duration_s"`
	Victim    TenantsVictim    `json:"victim"`
	Attacker  *TenantsAttacker `json:"attacker,omitempty"`
}

// TenantsVictim is what the victim's workload saw in a phase. Attempts
// and Granted count acquires; Sequential and Contended are the granted
// acquires' latencies on the workers' own keys and on the one contended
// key. A lease is lost when it ended before its release (its Done closed)
// or the release answered not_held; a session when it ended while the
// phase ran. Watch events are the grants, releases and expiries the
// prefix watch on victim/ delivered; a break is the watch ending with an
// error (it is opened again).
type TenantsVictim struct {
	Attempts          int            `json:"attempts"`
	Granted           int            `json:"granted"`
	SuccessRate       float64        `json:"success_rate"`
	Sequential        TenantsLatency `json:"sequential"`
	Contended         TenantsLatency `json:"contended"`
	Releases          int            `json:"releases"`
	ReleaseFailures   int            `json:"release_failures"`
	LeasesLost        int            `json:"leases_lost"`
	Sessions          int            `json:"sessions"`
	SessionsLost      int            `json:"sessions_lost"`
	SessionsKept      int            `json:"sessions_kept"`
	WatchEvents       int            `json:"watch_events"`
	WatchExpired      int            `json:"watch_expired"`
	WatchBreaks       int            `json:"watch_breaks"`
	WatchOpenFailures int            `json:"watch_open_failures"`
	WatchMaxGapMS     float64        `json:"watch_max_gap_ms"`
	// Failures counts what went wrong, by operation and kind.
	Failures map[string]int `json:"failures"`
}

// TenantsLatency summarises the granted acquires' latencies (µs).
type TenantsLatency struct {
	Count int64   `json:"count"`
	P50US float64 `json:"p50_us"`
	P99US float64 `json:"p99_us"`
	MaxUS float64 `json:"max_us"`
}

// TenantsAttacker is what the attacker did in the beside phase: its
// requests (Attempts; Succeeded those carried out), the refusals by code,
// other errors by kind, and per flood and per quota.
type TenantsAttacker struct {
	Attempts  int64          `json:"attempts"`
	Succeeded int64          `json:"succeeded"`
	Refusals  map[string]int `json:"refusals"`
	Errors    map[string]int `json:"errors"`
	// QuotaRefusals counts quota_exceeded by the quota refused: the one
	// the gateway named (REST), else the one the flood was pressing.
	QuotaRefusals map[string]int `json:"quota_refusals"`
	Floods        []TenantsFlood `json:"floods"`
	Quotas        []TenantsQuota `json:"quotas"`
	// HammerStartS is when the hammer started, in seconds since the
	// phase's start: once every quota flood was refused (or at its cap),
	// at most 40% into the phase. HammerPerS is its requests per second.
	HammerStartS float64 `json:"hammer_start_s"`
	HammerPerS   float64 `json:"hammer_per_s"`
	// WatchEvents are the events the attacker's watches received.
	WatchEvents int64 `json:"watch_events"`
	// ForbiddenGranted counts grants of the victim's keys to the
	// attacker (the policy forbids them).
	ForbiddenGranted int64 `json:"forbidden_granted"`
}

// TenantsFlood is one of the attacker's floods: its requests, those
// carried out, the most it held at once (sessions, leases, waits,
// watches), its cap, and its refusals and errors.
type TenantsFlood struct {
	Name      string         `json:"name"`
	Quota     string         `json:"quota,omitempty"`
	Attempts  int64          `json:"attempts"`
	Succeeded int64          `json:"succeeded"`
	Peak      int64          `json:"peak"`
	Cap       int            `json:"cap,omitempty"`
	Refusals  map[string]int `json:"refusals"`
	Errors    map[string]int `json:"errors"`
}

// TenantsQuota is one of the attacker's quotas: its limit, the most the
// attacker held at once (as its clients counted: a release or expiry is
// counted when the client learns of it, so the peak may exceed what the
// gateway counted by the requests in flight), and the count it held when
// first refused quota_exceeded (-1: never).
type TenantsQuota struct {
	Name      string `json:"name"`
	Limit     int    `json:"limit"`
	Peak      int64  `json:"peak"`
	RefusedAt int64  `json:"refused_at"`
	Refusals  int64  `json:"refusals"`
}

// TenantsGoal is the verdict: the victim lost nothing in either phase,
// the attacker was in fact attacking, and the victim's p99 acquire
// latency beside is at most MaxRatio times alone, for the sequential and
// the contended acquires (Ratio is the larger of the two).
type TenantsGoal struct {
	Met             bool     `json:"met"`
	MaxRatio        float64  `json:"max_ratio"`
	SequentialRatio float64  `json:"sequential_p99_ratio"`
	ContendedRatio  float64  `json:"contended_p99_ratio"`
	Ratio           float64  `json:"p99_ratio"`
	Failures        []string `json:"failures"`
}

// Phase returns the phase named name, or nil.
func (rep *TenantsReport) Phase(name string) *TenantsPhase {
	for i := range rep.Phases {
		if rep.Phases[i].Name == name {
			return &rep.Phases[i]
		}
	}
	return nil
}

// evaluate judges the goal.
func (rep *TenantsReport) evaluate() {
	g := TenantsGoal{MaxRatio: TenantsGoalRatio, Failures: []string{}}
	fail := func(format string, args ...any) { g.Failures = append(g.Failures, fmt.Sprintf(format, args...)) }
	alone, beside := rep.Phase(PhaseAlone), rep.Phase(PhaseBeside)
	if alone == nil || beside == nil {
		fail("the run lacks a phase: want %s and %s", PhaseAlone, PhaseBeside)
	}
	for _, p := range []*TenantsPhase{alone, beside} {
		if p == nil {
			continue
		}
		v := p.Victim
		if v.Attempts == 0 {
			fail("%s: the victim made no acquire", p.Name)
		}
		if v.Granted < v.Attempts {
			fail("%s: %d of the victim's %d acquires were not granted (%s)", p.Name, v.Attempts-v.Granted, v.Attempts, fmtCounts(v.Failures))
		}
		if v.LeasesLost > 0 {
			fail("%s: the victim lost %d leases", p.Name, v.LeasesLost)
		}
		if v.ReleaseFailures > 0 {
			fail("%s: %d of the victim's releases failed", p.Name, v.ReleaseFailures)
		}
		if v.SessionsLost > 0 {
			fail("%s: the victim lost %d of its %d sessions", p.Name, v.SessionsLost, v.Sessions)
		}
		if v.WatchBreaks > 0 || v.WatchOpenFailures > 0 {
			fail("%s: the victim's watch broke %d times (%d opens failed)", p.Name, v.WatchBreaks, v.WatchOpenFailures)
		}
		if v.WatchEvents == 0 {
			fail("%s: the victim's watch received no event", p.Name)
		}
	}
	if alone != nil && beside != nil {
		ratio := func(what string, a, b TenantsLatency) float64 {
			if a.Count == 0 || b.Count == 0 || a.P99US <= 0 {
				if a.Count+b.Count > 0 {
					fail("%s: no p99 to compare (%d acquires alone, %d beside)", what, a.Count, b.Count)
				}
				return 0
			}
			r := b.P99US / a.P99US
			if r > g.MaxRatio {
				fail("%s: the victim's p99 beside the attacker is %.2f× its p99 alone (%.2f ms vs %.2f ms), above %.1f×",
					what, r, b.P99US/1000, a.P99US/1000, g.MaxRatio)
			}
			return r
		}
		g.SequentialRatio = ratio("sequential", alone.Victim.Sequential, beside.Victim.Sequential)
		g.ContendedRatio = ratio("contended", alone.Victim.Contended, beside.Victim.Contended)
		g.Ratio = max(g.SequentialRatio, g.ContendedRatio)
		if alone.Victim.Sequential.Count+alone.Victim.Contended.Count == 0 {
			fail("no victim latency to compare")
		}
		switch a := beside.Attacker; {
		case a == nil || a.Succeeded == 0:
			fail("the attacker had no request carried out: beside measures no attack (errors: %s)", fmtCounts(attackerErrors(a)))
		case a.ForbiddenGranted > 0:
			fail("the attacker was granted the victim's keys %d times", a.ForbiddenGranted)
		}
	}
	for _, e := range rep.NodeExits {
		fail("%s", e)
	}
	g.Met = len(g.Failures) == 0
	rep.Goal, rep.GoalMet = g, g.Met
}

func attackerErrors(a *TenantsAttacker) map[string]int {
	if a == nil {
		return nil
	}
	return a.Errors
}

// fmtCounts is "k1 n1, k2 n2" in key order, or "none".
func fmtCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// WriteJSON writes the report as indented JSON.
func (rep *TenantsReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteTable writes the terminal summary: the victim per phase, the
// attacker's floods and quotas, the goal.
func (rep *TenantsReport) WriteTable(w io.Writer) error {
	q := rep.Attacker
	policy := "under the policy file"
	if !rep.PolicyFile {
		policy = "WITHOUT a policy file, the control run: nothing limits it"
	}
	fmt.Fprintf(w, "bench tenants: %d nodes, 2 phases of %.1fs; victim: %d sequential + %d contended workers (hold %.1f ms), 1 prefix watch; "+
		"attacker (%s): sessions %d, leases %d, waiters %d, watches %d, rate %g/s burst %d, over %d connections per flood\n\n",
		rep.Nodes, rep.PhaseS, rep.SeqWorkers, rep.HotWorkers, rep.HoldMS, policy, q.Sessions, q.Leases, q.Waiters, q.Watches, q.Rate, q.Burst, rep.AttackConns)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "VICTIM\tACQUIRES\tGRANTED\tSUCCESS\tSEQ p50 ms\tSEQ p99 ms\tSEQ max ms\tHOT p50 ms\tHOT p99 ms\tHOT max ms\tLEASES LOST\tSESSIONS KEPT\tWATCH EVENTS\tWATCH BREAKS\tWATCH GAP ms\t")
	for _, p := range rep.Phases {
		v := p.Victim
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f%%\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%d/%d\t%d\t%d\t%.0f\t\n", p.Name, v.Attempts, v.Granted, 100*v.SuccessRate,
			v.Sequential.P50US/1000, v.Sequential.P99US/1000, v.Sequential.MaxUS/1000, v.Contended.P50US/1000, v.Contended.P99US/1000, v.Contended.MaxUS/1000,
			v.LeasesLost, v.SessionsKept, v.Sessions, v.WatchEvents, v.WatchBreaks, v.WatchMaxGapMS)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range rep.Phases {
		if len(p.Victim.Failures) > 0 {
			fmt.Fprintf(w, "victim failures %s: %s\n", p.Name, fmtCounts(p.Victim.Failures))
		}
	}
	if b := rep.Phase(PhaseBeside); b != nil && b.Attacker != nil {
		a := b.Attacker
		fmt.Fprintf(w, "\nattacker beside: %d requests, %d carried out; hammer from %.1fs at %.0f/s; its watches received %d events; victim keys granted to it %d\n",
			a.Attempts, a.Succeeded, a.HammerStartS, a.HammerPerS, a.WatchEvents, a.ForbiddenGranted)
		codes := []string{CodeQuotaExceeded, CodeRateLimited, CodeTooManySessions, CodeForbidden}
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "FLOOD\tQUOTA\tREQUESTS\tCARRIED OUT\tPEAK HELD\tCAP\tquota_exceeded\trate_limited\ttoo_many_sessions\tforbidden\tOTHER REFUSALS\tERRORS\t")
		for _, f := range a.Floods {
			row := []any{f.Name, f.Quota, f.Attempts, f.Succeeded, f.Peak, f.Cap}
			other := maps.Clone(f.Refusals)
			for _, c := range codes {
				row = append(row, f.Refusals[c])
				delete(other, c)
			}
			row = append(row, fmtCounts(other), fmtCounts(f.Errors))
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t\n", row...)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w)
		for _, qu := range a.Quotas {
			at := "never refused quota_exceeded"
			if qu.RefusedAt >= 0 {
				at = fmt.Sprintf("first refused quota_exceeded holding %d", qu.RefusedAt)
			}
			fmt.Fprintf(w, "quota %-8s limit %6d: peak held %6d, %s (%d refusals)\n", qu.Name, qu.Limit, qu.Peak, at, qu.Refusals)
		}
		fmt.Fprintf(w, "refusals by code: %s\n", fmtCounts(a.Refusals))
		if len(a.Errors) > 0 {
			fmt.Fprintf(w, "attacker errors: %s\n", fmtCounts(a.Errors))
		}
	}
	for _, e := range rep.NodeExits {
		fmt.Fprintf(w, "NODE EXIT %s\n", e)
	}
	g := rep.Goal
	fmt.Fprintf(w, "\nvictim p99 beside / alone: sequential %.2f×, contended %.2f× (goal ≤ %.1f×)\n", g.SequentialRatio, g.ContendedRatio, g.MaxRatio)
	if g.Met {
		_, err := fmt.Fprintln(w, "GOAL MET: the victim lost nothing and its p99 stayed within the bound beside the attacker")
		return err
	}
	fmt.Fprintln(w, "GOAL NOT MET:")
	for _, f := range g.Failures {
		fmt.Fprintf(w, "  %s\n", f)
	}
	return nil
}

// sortedFloods orders floods as the attacker runs them.
func sortedFloods(fs []TenantsFlood) {
	order := map[string]int{}
	for i, n := range []string{FloodSessionsWS, FloodSessionsREST, FloodLeasesWS, FloodLeasesREST, FloodWaiters, FloodWatches, FloodHammer, FloodForbidden} {
		order[n] = i
	}
	sort.SliceStable(fs, func(i, j int) bool { return order[fs[i].Name] < order[fs[j].Name] })
}

// tenantsCap is how far a flood pressing a quota of limit goes at most.
func tenantsCap(limit int) int { return max(tenantsCapFactor*limit, tenantsMinCap) }

// ratePace returns a function that blocks until the next of rate
// requests/s may start, shared by its callers (rate 0: no pacing); it
// reports false when ctx ended first.
func ratePace(rate float64) func(ctx context.Context) bool {
	if rate <= 0 {
		return func(ctx context.Context) bool { return ctx.Err() == nil }
	}
	var mu sync.Mutex
	var next time.Time
	step := time.Duration(float64(time.Second) / rate)
	return func(ctx context.Context) bool {
		mu.Lock()
		if now := time.Now(); next.Before(now) {
			next = now
		}
		at := next
		next = next.Add(step)
		mu.Unlock()
		if d := time.Until(at); d > 0 {
			return sleepCtx(ctx, d)
		}
		return ctx.Err() == nil
	}
}

// tenantsAttacker is the attacker of the beside phase: floods at and
// beyond each quota, the hammer, and the forbidden probe.
type tenantsAttacker struct {
	r     *tenantsRun
	eps   []string
	token string
	quota TenantQuota
	conns int
	start time.Time
	end   time.Time // the phase's planned end
	d     time.Duration

	floods  []*tenantsFlood
	quotas  map[string]*tenantsQuotaCounter
	hammer  *tenantsFlood
	stopped time.Time

	hammerAt         atomic.Int64 // ns after start; -1 until the hammer starts
	forbiddenGranted atomic.Int64
	watchEvents      atomic.Int64

	wg           sync.WaitGroup
	mu           sync.Mutex
	clients      []*client.Client
	rests        []*tenantsREST
	ownSessions  map[*lock.Session]bool
	otherRefusal map[string]int // quota_exceeded naming a quota no counter has
}

// tenantsFlood is one flood's tallies.
type tenantsFlood struct {
	name string
	q    *tenantsQuotaCounter // the quota it presses (nil: none)
	cap  int                  // 0: none
	// pauses scales its workers' pauses: a flood with n times the
	// workers of the others waits n times as long, so that it presses
	// its quota as hard as they do theirs.
	pauses int

	attempts, succeeded, held, peak atomic.Int64
	limited                         atomic.Bool // refused for a limit, or at its cap

	mu       sync.Mutex
	refusals map[string]int
	errs     map[string]int
}

// tenantsQuotaCounter follows one of the attacker's quotas across its
// floods.
type tenantsQuotaCounter struct {
	name                 string
	limit                int
	order                int // in the report
	live, peak, refusals atomic.Int64
	refusedAt            atomic.Int64 // live at the first quota_exceeded; -1 before
}

func atomicMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

func (q *tenantsQuotaCounter) add(n int64) { atomicMax(&q.peak, q.live.Add(n)) }

// add counts n more (or fewer) of what the flood holds.
func (f *tenantsFlood) add(n int64) {
	atomicMax(&f.peak, f.held.Add(n))
	if f.q != nil {
		f.q.add(n)
	}
}

func newTenantsAttacker(r *tenantsRun, start time.Time, d time.Duration) *tenantsAttacker {
	a := &tenantsAttacker{r: r, eps: r.c.APIAddrs, token: r.files.AttackerToken, quota: r.cfg.Policy.QuotaOf(TenantAttacker),
		conns: r.cfg.AttackConns, start: start, end: start.Add(d), d: d,
		quotas: map[string]*tenantsQuotaCounter{}, ownSessions: map[*lock.Session]bool{}, otherRefusal: map[string]int{}}
	a.hammerAt.Store(-1)
	for i, q := range []struct {
		name  string
		limit int
	}{{QuotaSessions, a.quota.Sessions}, {QuotaLeases, a.quota.Leases}, {QuotaWaiters, a.quota.Waiters}, {QuotaWatches, a.quota.Watches}} {
		c := &tenantsQuotaCounter{name: q.name, limit: q.limit, order: i}
		c.refusedAt.Store(-1)
		a.quotas[q.name] = c
	}
	return a
}

func (a *tenantsAttacker) flood(name, quota string, cap int) *tenantsFlood {
	f := &tenantsFlood{name: name, q: a.quotas[quota], cap: cap, pauses: 1, refusals: map[string]int{}, errs: map[string]int{}}
	a.floods = append(a.floods, f)
	return f
}

func (a *tenantsAttacker) newClient(id string, noSession bool) (*client.Client, error) {
	c, err := client.New(a.eps, client.Options{Token: a.token, ClientID: id, NoSession: noSession})
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.clients = append(a.clients, c)
	a.mu.Unlock()
	return c, nil
}

// go runs f on a goroutine the attacker's run waits for.
func (a *tenantsAttacker) goRun(f func()) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		f()
	}()
}

// refused counts a refusal of f's request.
func (a *tenantsAttacker) refused(f *tenantsFlood, code, quota string) {
	f.mu.Lock()
	f.refusals[code]++
	f.mu.Unlock()
	switch code {
	case CodeQuotaExceeded:
		if quota == "" && f.q != nil {
			quota = f.q.name
		}
		if q := a.quotas[quota]; q != nil {
			q.refusals.Add(1)
			q.refusedAt.CompareAndSwap(-1, q.live.Load())
		} else {
			a.mu.Lock()
			a.otherRefusal[cmp.Or(quota, "unnamed")]++
			a.mu.Unlock()
		}
		f.limited.Store(true)
	case CodeTooManySessions, codeTooManyWaiters, codeTooManyWatches, codeTooManyLocks, codeTooManyTickets:
		f.limited.Store(true)
	}
}

func (f *tenantsFlood) errored(what string) {
	f.mu.Lock()
	f.errs[what]++
	f.mu.Unlock()
}

// attempt makes one request of f with step and counts its outcome; code
// is its refusal code ("" for a success or another error). A request
// cut short by the phase's end is not counted.
func (a *tenantsAttacker) attempt(ctx context.Context, f *tenantsFlood, step func(context.Context) error) (code string, err error) {
	f.attempts.Add(1)
	err = step(ctx)
	if err == nil {
		f.succeeded.Add(1)
		return "", nil
	}
	if ctx.Err() != nil {
		f.attempts.Add(-1)
		return "", err
	}
	code, quota := tenantsRefusal(err)
	if code != "" {
		a.refused(f, code, quota)
	} else {
		f.errored(tenantsErrKind(err))
	}
	return code, err
}

// climb runs step until ctx ends: up to f's cap, then at the cap it asks
// again every tenantsBeyondPause. After a refusal it waits
// tenantsBeyondPause (tenantsRatePause after rate_limited), each scaled
// by f.pauses — unless flat, the hammer's way: at once.
func (a *tenantsAttacker) climb(ctx context.Context, f *tenantsFlood, flat bool, step func(context.Context) error) {
	for ctx.Err() == nil {
		if f.cap > 0 && f.held.Load() >= int64(f.cap) {
			f.limited.Store(true)
			sleepCtx(ctx, jitter(tenantsBeyondPause*time.Duration(f.pauses)))
			continue
		}
		code, err := a.attempt(ctx, f, step)
		if err == nil || flat && code != "" {
			continue
		}
		pause := tenantsErrorPause
		switch code {
		case "":
		case CodeRateLimited:
			pause = tenantsRatePause
		default:
			pause = tenantsBeyondPause
		}
		sleepCtx(ctx, jitter(pause*time.Duration(f.pauses)))
	}
}

// holding counts a lease the attacker took until it ends, and the SDK
// session it is in.
func (a *tenantsAttacker) holding(ctx context.Context, f *tenantsFlood, lease *lock.Lease) {
	f.add(1)
	lease.AfterEnd(func() { f.add(-1) })
	s := lease.Session()
	if s == nil {
		return
	}
	a.mu.Lock()
	seen := a.ownSessions[s]
	a.ownSessions[s] = true
	a.mu.Unlock()
	if seen {
		return
	}
	q := a.quotas[QuotaSessions]
	q.add(1)
	a.goRun(func() {
		select {
		case <-s.Done():
			q.add(-1)
		case <-ctx.Done():
		}
	})
}

// run floods until ctx ends, and returns once every flood has stopped.
func (a *tenantsAttacker) run(ctx context.Context) {
	defer func() { a.stopped = time.Now() }()
	q := a.quota
	sessWS := a.flood(FloodSessionsWS, QuotaSessions, tenantsCap(q.Sessions))
	sessREST := a.flood(FloodSessionsREST, QuotaSessions, tenantsCap(q.Sessions))
	leasesWS := a.flood(FloodLeasesWS, QuotaLeases, tenantsCap(q.Leases))
	leasesREST := a.flood(FloodLeasesREST, QuotaLeases, tenantsCap(q.Leases))
	waiters := a.flood(FloodWaiters, QuotaWaiters, min(tenantsCap(q.Waiters), tenantsMaxRESTWaiters))
	waiters.pauses = tenantsWaiterWorkersPerConn
	watches := a.flood(FloodWatches, QuotaWatches, tenantsCap(q.Watches))
	a.hammer = a.flood(FloodHammer, QuotaLeases, 0)
	forbidden := a.flood(FloodForbidden, "", 0)

	// First the lease flood's clients, each with its session and a
	// lease, one of them holding the key the waiters queue for: before
	// the session flood takes every session the quota allows.
	leaseClients := make([]*client.Client, a.conns)
	for i := range leaseClients {
		c, err := a.newClient(fmt.Sprintf("attacker-leases-%d", i), false)
		if err != nil {
			leasesWS.errored(tenantsErrKind(err))
			return
		}
		leaseClients[i] = c
	}
	a.setup(ctx, leasesWS, leaseClients)

	a.floodSessionsWS(ctx, sessWS)
	a.floodSessionsREST(ctx, sessREST)
	a.floodLeasesWS(ctx, leasesWS, leaseClients)
	a.floodLeasesREST(ctx, leasesREST)
	a.floodWaiters(ctx, waiters)
	a.floodWatches(ctx, watches)
	a.probeForbidden(ctx, forbidden)
	a.goRun(func() { a.startHammer(ctx, []*tenantsFlood{sessWS, sessREST, leasesWS, leasesREST, waiters, watches}) })
	a.goRun(func() { a.status(ctx) })
	a.wg.Wait()
}

// setup takes the waiters' key with the first lease client and a lease
// with each other one, asking again (rate_limited, errors) for up to 5 s.
func (a *tenantsAttacker) setup(ctx context.Context, f *tenantsFlood, clients []*client.Client) {
	var wg sync.WaitGroup
	for i, c := range clients {
		key := fmt.Sprintf("%slease-%d-0", attackerPrefix, i)
		if i == 0 {
			key = tenantsHeldKey
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(5 * time.Second)
			for ctx.Err() == nil && time.Now().Before(deadline) {
				_, err := a.attempt(ctx, f, func(ctx context.Context) error {
					lease, err := c.TryAcquire(ctx, key, lock.AcquireOptions{})
					if err == nil {
						a.holding(ctx, f, lease)
					}
					return err
				})
				if err == nil {
					return
				}
				sleepCtx(ctx, jitter(tenantsRatePause))
			}
		}()
	}
	wg.Wait()
}

// tenantsHeldKey is the key the attacker holds and queues waiters for.
const tenantsHeldKey = attackerPrefix + "held"

// floodSessionsWS opens sessions over WebSocket on each worker's
// connection, tenantsSessionsPerConn at a time (or until the connection's
// own limit refuses) before it closes the client and connects anew; a
// keeper client keeps every session alive.
func (a *tenantsAttacker) floodSessionsWS(ctx context.Context, f *tenantsFlood) {
	keeper, err := a.newClient("attacker-keeper", true)
	if err != nil {
		f.errored(tenantsErrKind(err))
		return
	}
	for w := range a.conns {
		var c *client.Client
		opened := 0
		a.goRun(func() {
			a.climb(ctx, f, false, func(ctx context.Context) error {
				if c == nil || opened >= tenantsSessionsPerConn {
					if c != nil {
						c.Close()
					}
					var err error
					if c, err = a.newClient(fmt.Sprintf("attacker-sessions-%d", w), true); err != nil {
						return err
					}
					opened = 0
				}
				s, err := c.OpenSession(ctx, lock.SessionOptions{TTL: tenantsAttackTTL})
				if err != nil {
					if errors.Is(err, lock.ErrTooManySessions) {
						opened = tenantsSessionsPerConn // this connection is full: the next request connects anew
					}
					return err
				}
				opened++
				f.add(1)
				a.goRun(func() {
					lock.KeepSessionAlive(ctx, keeper, s)
					if s.Err() != nil {
						f.add(-1)
					}
				})
				return nil
			})
		})
	}
}

// floodSessionsREST opens sessions with POST /sessions from each
// worker's connections (dropped every tenantsRESTReconnect requests); a
// keeper renews them all every TTL/3.
func (a *tenantsAttacker) floodSessionsREST(ctx context.Context, f *tenantsFlood) {
	var (
		mu  sync.Mutex
		ids []string
	)
	ttl := tenantsAttackTTL.Milliseconds()
	for w := range a.conns {
		rc := a.newREST(w)
		a.goRun(func() {
			a.climb(ctx, f, false, func(ctx context.Context) error {
				var out struct {
					SessionID string `json:"session_id"`
				}
				if _, err := rc.do(ctx, "POST", "/sessions", map[string]any{"client_id": "attacker-rest", "ttl_ms": ttl}, &out, 201); err != nil {
					return err
				}
				f.add(1)
				mu.Lock()
				ids = append(ids, out.SessionID)
				mu.Unlock()
				return nil
			})
		})
	}
	keeper := a.newREST(a.conns)
	a.goRun(func() {
		for sleepCtx(ctx, tenantsAttackTTL/3) {
			mu.Lock()
			live := slices.Clone(ids)
			mu.Unlock()
			gone := map[string]bool{}
			for _, id := range live {
				_, err := keeper.do(ctx, "POST", "/sessions/renew", map[string]any{"session_id": id}, nil, 200)
				var re *tenantsRESTError
				switch {
				case ctx.Err() != nil:
					return
				case errors.As(err, &re) && re.Code == "session_expired":
					gone[id] = true
					f.add(-1)
					f.errored("renew: session_expired")
				case err != nil:
					f.errored("renew: " + tenantsErrKind(err))
				}
			}
			if len(gone) > 0 {
				mu.Lock()
				ids = slices.DeleteFunc(ids, func(id string) bool { return gone[id] })
				mu.Unlock()
			}
		}
	})
}

// floodLeasesWS takes leases of keys of its own on each lease client, in
// the client's session (the SDK's default).
func (a *tenantsAttacker) floodLeasesWS(ctx context.Context, f *tenantsFlood, clients []*client.Client) {
	for w, c := range clients {
		n := 1
		a.goRun(func() {
			a.climb(ctx, f, false, func(ctx context.Context) error {
				key := fmt.Sprintf("%slease-%d-%d", attackerPrefix, w, n)
				n++
				lease, err := c.TryAcquire(ctx, key, lock.AcquireOptions{})
				if err != nil {
					return err
				}
				a.holding(ctx, f, lease)
				return nil
			})
		})
	}
}

// floodLeasesREST takes leases with POST /locks/{key}, each with a TTL
// past the phase's end (so none needs renewing).
func (a *tenantsAttacker) floodLeasesREST(ctx context.Context, f *tenantsFlood) {
	for w := range a.conns {
		rc := a.newREST(w)
		n := 0
		a.goRun(func() {
			a.climb(ctx, f, false, func(ctx context.Context) error {
				key := fmt.Sprintf("%srest-%d-%d", attackerPrefix, w, n)
				n++
				ttl := min(time.Until(a.end)+time.Minute, 24*time.Hour)
				if _, err := rc.do(ctx, "POST", "/locks/"+url.PathEscape(key), map[string]any{"client_id": "attacker-rest", "ttl_ms": ttl.Milliseconds()}, nil, 200); err != nil {
					return err
				}
				f.add(1)
				return nil
			})
		})
	}
}

// floodWaiters queues waiting acquires for the held key with POST
// /locks/{key} and wait_ms: refusals answer at once, a queued wait after
// the synchronous window with 202 and a ticket (the wait goes on in the
// gateway). Over REST because the Go SDK's Acquire waits out rate_limited
// answers itself, which would hide them.
func (a *tenantsAttacker) floodWaiters(ctx context.Context, f *tenantsFlood) {
	path := "/locks/" + url.PathEscape(tenantsHeldKey)
	for w := range a.conns {
		rc := a.newREST(w)
		for range tenantsWaiterWorkersPerConn {
			a.goRun(func() {
				a.climb(ctx, f, false, func(ctx context.Context) error {
					wait := min(time.Until(a.end)+10*time.Second, 5*time.Minute)
					var out struct {
						LockToken    string `json:"lock_token"`
						FencingToken struct {
							Value uint64 `json:"value"`
						} `json:"fencing_token"`
					}
					status, err := rc.do(ctx, "POST", path, map[string]any{"client_id": "attacker-wait", "wait_ms": wait.Milliseconds()}, &out, 202, 200)
					if err != nil {
						return err
					}
					if status == 200 {
						// Granted: the holder lost the key. Let it go again.
						q := url.Values{"lock_token": {out.LockToken}, "fencing_token": {fmt.Sprint(out.FencingToken.Value)}}
						rc.do(ctx, "DELETE", path+"?"+q.Encode(), nil, nil, 204)
						return errors.New("granted: the held key was free")
					}
					f.add(1)
					time.AfterFunc(wait, func() { f.add(-1) })
					return nil
				})
			})
		}
	}
}

// floodWatches opens prefix watches, each drained until it ends; a
// connection at its own limit of watches is joined by another.
func (a *tenantsAttacker) floodWatches(ctx context.Context, f *tenantsFlood) {
	prefix := a.r.cfg.WatchPrefix
	for w := range a.conns {
		var c *client.Client
		a.goRun(func() {
			a.climb(ctx, f, false, func(ctx context.Context) error {
				if c == nil {
					var err error
					if c, err = a.newClient(fmt.Sprintf("attacker-watches-%d", w), true); err != nil {
						return err
					}
				}
				ch, err := c.WatchPrefix(ctx, prefix)
				if err != nil {
					if code, _ := tenantsRefusal(err); code == codeTooManyWatches {
						c = nil // the next watch on another connection
					}
					return err
				}
				f.add(1)
				a.goRun(func() {
					defer f.add(-1)
					for ev := range ch {
						switch ev.Type {
						case lock.EventGranted, lock.EventReleased, lock.EventExpired:
							a.watchEvents.Add(1)
						case lock.EventError:
							if ctx.Err() == nil {
								f.errored("watch ended: " + tenantsErrKind(ev.Err))
							}
						}
					}
				})
				return nil
			})
		})
	}
}

// startHammer starts the hammer once every quota flood is limited, or
// tenantsHammerAfter into the phase.
func (a *tenantsAttacker) startHammer(ctx context.Context, floods []*tenantsFlood) {
	deadline := a.start.Add(time.Duration(tenantsHammerAfter * float64(a.d)))
	unlimited := func(f *tenantsFlood) bool { return !f.limited.Load() }
	for time.Now().Before(deadline) && slices.ContainsFunc(floods, unlimited) {
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return
		}
	}
	if ctx.Err() != nil {
		return
	}
	a.hammerAt.Store(int64(time.Since(a.start)))
	pace := ratePace(a.r.cfg.HammerRate)
	for i := range a.conns {
		c, err := a.newClient(fmt.Sprintf("attacker-hammer-%d", i), true)
		if err != nil {
			a.hammer.errored(tenantsErrKind(err))
			return
		}
		for j := range 2 {
			key := fmt.Sprintf("%shammer-%d-%d", attackerPrefix, i, j)
			a.goRun(func() {
				a.climb(ctx, a.hammer, true, func(ctx context.Context) error {
					if !pace(ctx) {
						return ctx.Err()
					}
					lease, err := c.TryAcquire(ctx, key, lock.AcquireOptions{TTL: 10 * time.Second})
					if err != nil {
						return err
					}
					a.hammer.add(1)
					defer a.hammer.add(-1)
					return c.Release(ctx, lease)
				})
			})
		}
	}
}

// probeForbidden tries the victim's contended key every
// tenantsForbiddenEvery: the policy must refuse it (forbidden); a grant is
// counted and released at once.
func (a *tenantsAttacker) probeForbidden(ctx context.Context, f *tenantsFlood) {
	c, err := a.newClient("attacker-forbidden", true)
	if err != nil {
		f.errored(tenantsErrKind(err))
		return
	}
	a.goRun(func() {
		for sleepCtx(ctx, tenantsForbiddenEvery) {
			a.attempt(ctx, f, func(ctx context.Context) error {
				lease, err := c.TryAcquire(ctx, hotKey, lock.AcquireOptions{TTL: 10 * time.Second})
				if err != nil {
					return err
				}
				a.forbiddenGranted.Add(1)
				return c.Release(ctx, lease)
			})
		}
	})
}

// status prints where the attacker is every tenantsStatusEvery.
func (a *tenantsAttacker) status(ctx context.Context) {
	for sleepCtx(ctx, tenantsStatusEvery) {
		var parts []string
		for _, q := range a.sortedQuotas() {
			parts = append(parts, fmt.Sprintf("%s %d/%d", q.name, q.live.Load(), q.limit))
		}
		refusals := map[string]int{}
		var n int64
		for _, f := range a.floods {
			n += f.attempts.Load()
			f.mu.Lock()
			for k, v := range f.refusals {
				refusals[k] += v
			}
			f.mu.Unlock()
		}
		a.r.progress("%6.1fs  attacker holds %s; %d requests; refusals: %s", time.Since(a.start).Seconds(), strings.Join(parts, ", "), n, fmtCounts(refusals))
	}
}

func (a *tenantsAttacker) sortedQuotas() []*tenantsQuotaCounter {
	qs := slices.Collect(maps.Values(a.quotas))
	slices.SortFunc(qs, func(x, y *tenantsQuotaCounter) int { return cmp.Compare(x.order, y.order) })
	return qs
}

// close closes the attacker's clients and connections.
func (a *tenantsAttacker) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.clients {
		c.Close()
	}
	for _, rc := range a.rests {
		rc.tr.CloseIdleConnections()
	}
}

// result is what the attacker did.
func (a *tenantsAttacker) result() TenantsAttacker {
	res := TenantsAttacker{Refusals: map[string]int{}, Errors: map[string]int{}, QuotaRefusals: map[string]int{},
		WatchEvents: a.watchEvents.Load(), ForbiddenGranted: a.forbiddenGranted.Load(), HammerStartS: -1}
	for _, f := range a.floods {
		tf := TenantsFlood{Name: f.name, Attempts: f.attempts.Load(), Succeeded: f.succeeded.Load(), Peak: f.peak.Load(), Cap: f.cap}
		if f.q != nil {
			tf.Quota = f.q.name
		}
		f.mu.Lock()
		tf.Refusals, tf.Errors = maps.Clone(f.refusals), maps.Clone(f.errs)
		f.mu.Unlock()
		res.Attempts += tf.Attempts
		res.Succeeded += tf.Succeeded
		for k, v := range tf.Refusals {
			res.Refusals[k] += v
		}
		for k, v := range tf.Errors {
			res.Errors[f.name+": "+k] += v
		}
		res.Floods = append(res.Floods, tf)
	}
	sortedFloods(res.Floods)
	for _, q := range a.sortedQuotas() {
		tq := TenantsQuota{Name: q.name, Limit: q.limit, Peak: q.peak.Load(), RefusedAt: q.refusedAt.Load(), Refusals: q.refusals.Load()}
		res.Quotas = append(res.Quotas, tq)
		if tq.Refusals > 0 {
			res.QuotaRefusals[q.name] = int(tq.Refusals)
		}
	}
	a.mu.Lock()
	for k, v := range a.otherRefusal {
		res.QuotaRefusals[k] += v
	}
	a.mu.Unlock()
	if at := a.hammerAt.Load(); at >= 0 {
		res.HammerStartS = time.Duration(at).Seconds()
		if d := a.stopped.Sub(a.start.Add(time.Duration(at))); d > 0 {
			res.HammerPerS = float64(a.hammer.attempts.Load()) / d.Seconds()
		}
	}
	return res
}

// tenantsRESTError is a REST answer other than the one asked for.
type tenantsRESTError struct {
	Status  int
	Code    string
	Quota   string
	Message string
}

func (e *tenantsRESTError) Error() string {
	s := fmt.Sprintf("REST: HTTP %d", e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Quota != "" {
		s += " (quota " + e.Quota + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// tenantsREST is a REST client of the attacker's with connections of
// its own, dropped every tenantsRESTReconnect requests. It is safe for
// concurrent use.
type tenantsREST struct {
	base, token string
	tr          *http.Transport
	hc          *http.Client
	n           atomic.Int64
}

func (a *tenantsAttacker) newREST(i int) *tenantsREST {
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * tenantsWaiterWorkersPerConn, IdleConnTimeout: 30 * time.Second}
	rc := &tenantsREST{base: "http://" + a.eps[i%len(a.eps)], token: a.token, tr: tr,
		// A follower answers 307 to the leader, which the client follows
		// (the same host: the token goes along).
		hc: &http.Client{Transport: tr, Timeout: 15 * time.Second}}
	a.mu.Lock()
	a.rests = append(a.rests, rc)
	a.mu.Unlock()
	return rc
}

// do sends a JSON body (nil: none) and, when the answer's status is one
// of want, decodes its body into out (nil: ignored); any other status is
// a *tenantsRESTError.
func (rc *tenantsREST) do(ctx context.Context, method, path string, body, out any, want ...int) (int, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, rc.base+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+rc.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if rc.n.Add(1)%tenantsRESTReconnect == 0 {
		defer rc.tr.CloseIdleConnections()
	}
	resp, err := rc.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return resp.StatusCode, err
	}
	if slices.Contains(want, resp.StatusCode) {
		if out != nil && len(data) > 0 {
			return resp.StatusCode, json.Unmarshal(data, out)
		}
		return resp.StatusCode, nil
	}
	var eb struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Quota   string `json:"quota"`
		} `json:"error"`
	}
	json.Unmarshal(data, &eb)
	return resp.StatusCode, &tenantsRESTError{Status: resp.StatusCode, Code: eb.Error.Code, Quota: eb.Error.Quota, Message: eb.Error.Message}
}
