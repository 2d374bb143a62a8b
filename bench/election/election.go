// Package election is `lockgate-bench election`: how fast leadership
// passes over raftlock, with the built-in election and with the
// lock-based recipe, when a leader is killed or resigns.
package election

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/report"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/election"
)

// The election failover bench (`lockgate-bench election`): campaigner
// processes contend for one election through the SDK; the leader's process
// is killed (SIGKILL: it renews nothing, resigns nothing) again and again,
// and the time from each kill to the next leader observed is set beside
// its bound, the lease TTL plus one commit measured in the same run.

// ElectionConfig configures RunElection.
type ElectionConfig struct {
	// Endpoints are the gateway-protocol endpoints the campaigners and the
	// observer connect to (a raftlock cluster's API addresses, or gateways).
	Endpoints []string
	// Backend names what serves Endpoints, for the report ("raft").
	Backend string
	// Lockgate is the lockgate binary: each campaigner of CampaignerElect
	// is a process of `lockgate elect`.
	Lockgate string
	// Bench is the lockgate-bench binary: each campaigner of
	// CampaignerBuiltin is a process of `lockgate-bench campaign`
	// (Campaign).
	Bench string
	// Campaigner picks the campaigner command (default CampaignerElect).
	Campaigner string
	// Campaigners is how many campaigner processes run at once (default
	// 3): one leads, the others wait in line.
	Campaigners int
	// Kills is how many leaders are killed (default 20).
	Kills int
	// TTL is the leader's lease TTL (default 2 s).
	TTL time.Duration
	// CommitSamples is how many uncontended acquires measure the commit
	// latency, half before the kills and half after (default 200).
	CommitSamples int
	// Seed seeds the wait before each kill (drawn in [TTL/10, TTL/2], so
	// that kills land at every phase of the leader's renewals).
	Seed uint64
	// Command is the command line, kept in the report.
	Command string
	// Log receives the campaigners' stderr; Progress a line per kill.
	Log, Progress io.Writer
}

func (c *ElectionConfig) fill() error {
	if len(c.Endpoints) == 0 {
		return errors.New("election: no endpoints")
	}
	if c.Lockgate == "" {
		return errors.New("election: no lockgate binary for the campaigners")
	}
	if c.Campaigner == CampaignerBuiltin && c.Bench == "" {
		return errors.New("election: no lockgate-bench binary for the builtin campaigners")
	}
	if c.Backend == "" {
		c.Backend = provision.Raft
	}
	switch c.Campaigner {
	case "":
		c.Campaigner = CampaignerElect
	case CampaignerElect, CampaignerBuiltin:
	default:
		return fmt.Errorf("campaigner %q: want %s or %s", c.Campaigner, CampaignerElect, CampaignerBuiltin)
	}
	if c.Campaigners == 0 {
		c.Campaigners = 3
	}
	if c.Kills == 0 {
		c.Kills = 20
	}
	if c.TTL == 0 {
		c.TTL = 2 * time.Second
	}
	if c.CommitSamples == 0 {
		c.CommitSamples = 200
	}
	switch {
	case c.Campaigners < 2 || c.Campaigners > 64:
		return fmt.Errorf("campaigners %d: want 2 to 64 (one to kill, one to take over)", c.Campaigners)
	case c.Kills < 1 || c.Kills > 10000:
		return fmt.Errorf("kills %d: want 1 to 10000", c.Kills)
	case c.TTL < 100*time.Millisecond || c.TTL > time.Minute:
		return fmt.Errorf("ttl %v: want 100ms to 1m", c.TTL)
	case c.CommitSamples < 2:
		return fmt.Errorf("commit samples %d: want 2 or more", c.CommitSamples)
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return nil
}

// ElectionReport is the outcome of RunElection; its JSON form is the
// schema of `lockgate-bench election --json`.
type ElectionReport struct {
	Machine     provision.Machine `json:"machine"`
	Command     string            `json:"command,omitempty"`
	Backend     string            `json:"backend"`
	Campaigners int               `json:"campaigners"`
	// Campaigner is the campaigner command (CampaignerElect or
	// CampaignerBuiltin).
	Campaigner string  `json:"campaigner"`
	TTLMs      float64 `json:"ttl_ms"`
	// Observer is how leaders were observed: "observe" (lock/election's
	// Observe over the backend's watch) or "poll" (Current every
	// PollInterval, on a Locker without watch).
	Observer string `json:"observer"`
	// CommitP50Ms is the p50 of an uncontended acquire on the same
	// endpoints (one commit and one round trip), CommitSamples of them
	// half before and half after the kills.
	CommitP50Ms   float64 `json:"commit_p50_ms"`
	CommitP99Ms   float64 `json:"commit_p99_ms"`
	CommitSamples int     `json:"commit_samples"`
	// BoundMs is TTL + CommitP50Ms: the bound on each failover.
	BoundMs float64 `json:"bound_ms"`
	Kills   []Kill  `json:"kills"`
	// P50Ms and MaxMs are over the kills' FailoverMs.
	P50Ms float64 `json:"p50_ms"`
	MaxMs float64 `json:"max_ms"`
	// Within counts the kills whose failover was within BoundMs; Met is
	// every kill's (MaxMs ≤ BoundMs, and every kill saw a new leader).
	Within int      `json:"within"`
	Met    bool     `json:"met"`
	Notes  []string `json:"notes,omitempty"`
}

// Kill is one leader killed.
type Kill struct {
	N int `json:"n"`
	// Killed and Next are the owners of the killed leader and the next
	// one; Token and NextToken their fencing tokens (terms).
	Killed    string     `json:"killed"`
	Token     lock.Token `json:"token"`
	Next      string     `json:"next,omitempty"`
	NextToken lock.Token `json:"next_token,omitempty"`
	// HeldMs is how long the killed leader had been observed leading
	// when it was killed.
	HeldMs float64 `json:"held_ms"`
	// VacantMs is from the SIGKILL to the observer seeing no leader (the
	// lease's expiry; 0 when not seen apart from the next grant).
	VacantMs float64 `json:"vacant_ms,omitempty"`
	// FailoverMs is from the SIGKILL to the observer seeing the next
	// leader; SelfMs to the next leader's process saying it leads.
	FailoverMs float64 `json:"failover_ms"`
	SelfMs     float64 `json:"self_ms,omitempty"`
	// Elected is false when no next leader was seen in time
	// (FailoverMs is then the time waited).
	Elected bool `json:"elected"`
}

// Campaigner commands (ElectionConfig.Campaigner).
const (
	// CampaignerElect: `lockgate elect --key K --value OWNER --ttl T --
	// sh -c 'echo leading $LOCKGATE_FENCING_TOKEN; exec sleep …'`, the
	// command users run.
	CampaignerElect = "elect"
	// CampaignerBuiltin: `lockgate-bench campaign` (Campaign).
	CampaignerBuiltin = "builtin"
)

// PollInterval is how often a poll observer asks for the leader.
const PollInterval = 2 * time.Millisecond

// RunElection runs the failover bench on cfg.Endpoints.
func RunElection(ctx context.Context, cfg ElectionConfig) (*ElectionReport, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	rep := &ElectionReport{Machine: provision.ReadMachine(), Command: cfg.Command, Backend: cfg.Backend, Campaigners: cfg.Campaigners,
		Campaigner: cfg.Campaigner, TTLMs: report.Millis(cfg.TTL), CommitSamples: cfg.CommitSamples}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	obs, err := client.New(cfg.Endpoints, client.Options{ClientID: "bench-observer"})
	if err != nil {
		return nil, err
	}
	defer obs.Close()
	key := fmt.Sprintf("bench/election/%d", time.Now().UnixNano())
	commit := report.NewHist()
	if err := sampleCommits(ctx, obs, key+"/commit", cfg.CommitSamples/2, commit); err != nil {
		return nil, err
	}

	leaders, how, err := observeLeaders(ctx, obs, key)
	if err != nil {
		return nil, err
	}
	rep.Observer = how
	if how == "poll" {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the Locker offers no watch: leaders were observed by asking every %v (election.Current), which adds up to that much to each failover", PollInterval))
	}

	c := &campaigners{cfg: cfg, key: key, procs: map[string]*campaigner{}, said: make(chan said, 64)}
	defer c.stopAll()
	for range cfg.Campaigners {
		if err := c.start(ctx); err != nil {
			return nil, err
		}
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 22))
	cur, since, err := c.awaitLeader(ctx, leaders, 0, 30*time.Second+5*cfg.TTL)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Progress, "leader %s (token %d); %d campaigners; killing the leader %d times\n", cur.Owner, cur.Token, cfg.Campaigners, cfg.Kills)
	for n := 1; n <= cfg.Kills; n++ {
		// A wait at a random phase of the leader's renewals.
		if !provision.SleepCtx(ctx, provision.Between(rng, cfg.TTL/10, cfg.TTL/2)) {
			return nil, ctx.Err()
		}
		// A change while waiting (a leader that lost its lease): follow it.
		for drained := false; !drained; {
			select {
			case ld := <-leaders:
				if ld.Present && ld.Token > cur.Token {
					cur, since = ld.Leader, ld.at
				}
			default:
				drained = true
			}
		}
		p := c.procs[leaderID(cur)]
		if p == nil {
			return nil, fmt.Errorf("election: the leader %q (token %d) is none of the campaigners", leaderID(cur), cur.Token)
		}
		k := Kill{N: n, Killed: p.owner, Token: cur.Token}
		c.drainSaid()
		t0 := time.Now()
		k.HeldMs = report.Millis(t0.Sub(since))
		p.kill()
		next, at, vacant, err := awaitNext(ctx, leaders, cur.Token, 5*cfg.TTL+10*time.Second)
		if err != nil {
			return nil, err
		}
		k.FailoverMs = report.Millis(at.Sub(t0))
		if !vacant.IsZero() {
			k.VacantMs = report.Millis(vacant.Sub(t0))
		}
		if next.Present {
			k.Elected, k.Next, k.NextToken = true, leaderID(next), next.Token
			if s, ok := c.awaitSaid(leaderID(next), 2*time.Second); ok {
				k.SelfMs = report.Millis(s.Sub(t0))
			}
		}
		rep.Kills = append(rep.Kills, k)
		fmt.Fprintf(cfg.Progress, "kill %2d/%d  %s (token %d, led %.0f ms) → %s (token %d) in %.0f ms\n",
			n, cfg.Kills, k.Killed, k.Token, k.HeldMs, k.Next, k.NextToken, k.FailoverMs)
		if !k.Elected {
			break
		}
		cur, since = next, at
		if err := c.start(ctx); err != nil { // the replacement
			return nil, err
		}
	}
	if err := sampleCommits(ctx, obs, key+"/commit", cfg.CommitSamples-cfg.CommitSamples/2, commit); err != nil {
		return nil, err
	}
	rep.CommitP50Ms = float64(commit.ValueAtQuantile(50)) / 1e3
	rep.CommitP99Ms = float64(commit.ValueAtQuantile(99)) / 1e3
	rep.summarise()
	return rep, nil
}

// summarise sets the bound and the kills' p50, max and verdict.
func (rep *ElectionReport) summarise() {
	rep.BoundMs = rep.TTLMs + rep.CommitP50Ms
	var v []float64
	rep.Within, rep.MaxMs = 0, 0
	elected := true
	for _, k := range rep.Kills {
		v = append(v, k.FailoverMs)
		rep.MaxMs = max(rep.MaxMs, k.FailoverMs)
		if k.Elected && k.FailoverMs <= rep.BoundMs {
			rep.Within++
		}
		elected = elected && k.Elected
	}
	rep.P50Ms = report.MedianOf(v)
	rep.Met = len(rep.Kills) > 0 && elected && rep.MaxMs <= rep.BoundMs
}

// sampleCommits adds n uncontended acquires of key (µs) to h, each
// released before the next.
func sampleCommits(ctx context.Context, l lock.Locker, key string, n int, h *hdrhistogram.Histogram) error {
	for range n {
		t0 := time.Now()
		lease, err := l.Acquire(ctx, key, lock.AcquireOptions{TTL: 10 * time.Second})
		if err != nil {
			return fmt.Errorf("election: measuring the commit latency: %w", err)
		}
		h.RecordValue(min(max(time.Since(t0).Microseconds(), report.HistMin), report.HistMax))
		if err := l.Release(ctx, lease); err != nil {
			return fmt.Errorf("election: measuring the commit latency: %w", err)
		}
	}
	return nil
}

// seen is a leader as the observer saw it, and when.
type seen struct {
	election.Leader
	at time.Time
}

// observeLeaders streams key's leaders, stamped on arrival: through
// election.Observe, or, on a Locker without watch, by polling
// election.Current every PollInterval.
func observeLeaders(ctx context.Context, l lock.Locker, key string) (<-chan seen, string, error) {
	out := make(chan seen, 1024)
	ch, err := election.Observe(ctx, l, key)
	if err == nil {
		go func() {
			defer close(out)
			for ld := range ch {
				select {
				case out <- seen{ld, time.Now()}:
				case <-ctx.Done():
					return
				}
			}
		}()
		return out, "observe", nil
	}
	if !errors.Is(err, lock.ErrUnsupported) {
		return nil, "", err
	}
	go func() {
		defer close(out)
		var last election.Leader
		first := true
		t := time.NewTicker(PollInterval)
		defer t.Stop()
		for {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			ld, err := election.Current(cctx, l, key)
			cancel()
			if err == nil && (first || ld.Present != last.Present || ld.Token != last.Token) {
				first, last = false, ld
				select {
				case out <- seen{ld, time.Now()}:
				case <-ctx.Done():
					return
				}
			}
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, "poll", nil
}

// awaitNext waits for a leader with a token above after; vacant is when no
// leader was first seen meanwhile. On timeout next is not Present and at
// is the time given up.
func awaitNext(ctx context.Context, leaders <-chan seen, after lock.Token, timeout time.Duration) (next election.Leader, at, vacant time.Time, err error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case ld, ok := <-leaders:
			if !ok {
				return next, at, vacant, errors.New("election: the observer stopped")
			}
			switch {
			case ld.Present && ld.Token > after:
				return ld.Leader, ld.at, vacant, nil
			case !ld.Present && vacant.IsZero():
				vacant = ld.at
			}
		case <-t.C:
			return next, time.Now(), vacant, nil
		case <-ctx.Done():
			return next, at, vacant, ctx.Err()
		}
	}
}

// leaderID is the campaigner a leader names: the value it published
// (its owner), else its owner.
func leaderID(ld election.Leader) string {
	if len(ld.Value) > 0 {
		return string(ld.Value)
	}
	return ld.Owner
}
