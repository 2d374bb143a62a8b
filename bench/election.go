package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/election"
)

// The election failover bench (`lockgate bench election`): campaigner
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
	// Lockgate is the lockgate binary: each campaigner is a process of
	// it, `lockgate elect` (CampaignerElect) or `lockgate bench campaign`
	// (CampaignerBuiltin: Campaign).
	Lockgate string
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
	if c.Backend == "" {
		c.Backend = Raft
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
// schema of `lockgate bench election --json`.
type ElectionReport struct {
	Machine     Machine `json:"machine"`
	Command     string  `json:"command,omitempty"`
	Backend     string  `json:"backend"`
	Campaigners int     `json:"campaigners"`
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
	// CampaignerBuiltin: `lockgate bench campaign` (Campaign).
	CampaignerBuiltin = "builtin"
)

// PollInterval is how often a poll observer asks for the leader.
const PollInterval = 2 * time.Millisecond

// RunElection runs the failover bench on cfg.Endpoints.
func RunElection(ctx context.Context, cfg ElectionConfig) (*ElectionReport, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	rep := &ElectionReport{Machine: ReadMachine(), Command: cfg.Command, Backend: cfg.Backend, Campaigners: cfg.Campaigners,
		Campaigner: cfg.Campaigner, TTLMs: ms(cfg.TTL), CommitSamples: cfg.CommitSamples}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	obs, err := client.New(cfg.Endpoints, client.Options{ClientID: "bench-observer"})
	if err != nil {
		return nil, err
	}
	defer obs.Close()
	key := fmt.Sprintf("bench/election/%d", time.Now().UnixNano())
	commit := newHist()
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
		if !sleepCtx(ctx, between(rng, cfg.TTL/10, cfg.TTL/2)) {
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
		k.HeldMs = ms(t0.Sub(since))
		p.kill()
		next, at, vacant, err := awaitNext(ctx, leaders, cur.Token, 5*cfg.TTL+10*time.Second)
		if err != nil {
			return nil, err
		}
		k.FailoverMs = ms(at.Sub(t0))
		if !vacant.IsZero() {
			k.VacantMs = ms(vacant.Sub(t0))
		}
		if next.Present {
			k.Elected, k.Next, k.NextToken = true, leaderID(next), next.Token
			if s, ok := c.awaitSaid(leaderID(next), 2*time.Second); ok {
				k.SelfMs = ms(s.Sub(t0))
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
	rep.P50Ms = medianOf(v)
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
		h.RecordValue(min(max(time.Since(t0).Microseconds(), histMin), histMax))
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

// campaigners are the campaigner processes.
type campaigners struct {
	cfg   ElectionConfig
	key   string
	seq   int
	mu    sync.Mutex
	procs map[string]*campaigner
	said  chan said
}

// said is a campaigner's "leading" line, stamped on arrival.
type said struct {
	owner string
	at    time.Time
}

type campaigner struct {
	owner string
	cmd   *exec.Cmd
	done  chan struct{}
}

// start starts one more campaigner process.
func (c *campaigners) start(ctx context.Context) error {
	c.seq++
	owner := fmt.Sprintf("campaigner-%d", c.seq)
	eps := strings.Join(c.cfg.Endpoints, ",")
	cmd := exec.Command(c.cfg.Lockgate, "bench", "campaign", "--endpoints", eps,
		"--key", c.key, "--ttl", c.cfg.TTL.String(), "--owner", owner)
	if c.cfg.Campaigner == CampaignerElect {
		// The leader's command says so, then sleeps while it leads.
		cmd = exec.Command(c.cfg.Lockgate, "elect", "--endpoints", eps, "--client-id", owner,
			"--key", c.key, "--value", owner, "--ttl", c.cfg.TTL.String(), "--",
			"sh", "-c", `echo "leading $LOCKGATE_FENCING_TOKEN"; exec sleep 86400`)
	}
	// A process group of its own: the kill takes the leader's command
	// with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = c.cfg.Log
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("election: starting a campaigner: %w", err)
	}
	p := &campaigner{owner: owner, cmd: cmd, done: make(chan struct{})}
	c.mu.Lock()
	c.procs[owner] = p
	c.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "leading ") {
				select {
				case c.said <- said{owner, time.Now()}:
				default:
				}
			}
		}
		cmd.Wait()
		close(p.done)
	}()
	return nil
}

// kill SIGKILLs the campaigner's process and its process group (the
// command `lockgate elect` runs while leading).
func (p *campaigner) kill() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	p.cmd.Process.Signal(syscall.SIGKILL)
}

// awaitLeader waits for a leader above token after that is one of the
// campaigners.
func (c *campaigners) awaitLeader(ctx context.Context, leaders <-chan seen, after lock.Token, timeout time.Duration) (election.Leader, time.Time, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case ld, ok := <-leaders:
			if !ok {
				return election.Leader{}, time.Time{}, errors.New("election: the observer stopped")
			}
			if ld.Present && ld.Token > after && c.procs[leaderID(ld.Leader)] != nil {
				return ld.Leader, ld.at, nil
			}
		case <-t.C:
			return election.Leader{}, time.Time{}, fmt.Errorf("election: no campaigner led within %v", timeout)
		case <-ctx.Done():
			return election.Leader{}, time.Time{}, ctx.Err()
		}
	}
}

func (c *campaigners) drainSaid() {
	for {
		select {
		case <-c.said:
		default:
			return
		}
	}
}

// awaitSaid waits up to d for owner's "leading" line.
func (c *campaigners) awaitSaid(owner string, d time.Duration) (time.Time, bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case s := <-c.said:
			if s.owner == owner {
				return s.at, true
			}
		case <-t.C:
			return time.Time{}, false
		}
	}
}

// stopAll kills every campaigner still running and waits for them.
func (c *campaigners) stopAll() {
	for _, p := range c.procs {
		p.kill()
	}
	for _, p := range c.procs {
		<-p.done
	}
}

// CampaignConfig configures Campaign.
type CampaignConfig struct {
	Endpoints []string
	Key       string
	Owner     string
	TTL       time.Duration
}

// Campaign is one campaigner (the process `lockgate bench campaign`
// runs): it campaigns for cfg.Key through the SDK with its owner as the
// published value, writes "leading TOKEN" to out once elected, and holds
// the leadership until ctx ends (then it resigns) or the leadership is
// lost (an error).
func Campaign(ctx context.Context, cfg CampaignConfig, out io.Writer) error {
	c, err := client.New(cfg.Endpoints, client.Options{ClientID: cfg.Owner})
	if err != nil {
		return err
	}
	defer c.Close()
	ld, err := election.Campaign(ctx, c, cfg.Key, []byte(cfg.Owner), election.WithTTL(cfg.TTL), election.WithOwner(cfg.Owner))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "leading %d\n", ld.Token())
	select {
	case <-ld.Done():
		return fmt.Errorf("leadership lost: %w", ld.Err())
	case <-ctx.Done():
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return ld.Resign(rctx)
	}
}

// WriteTable writes each kill, then the verdict against the bound.
func (rep *ElectionReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "KILL\tKILLED\tTOKEN\tLED ms\tVACANT ms\tNEXT\tTOKEN\tFAILOVER ms\tSELF ms\tWITHIN BOUND\t")
	for _, k := range rep.Kills {
		within := "no"
		if k.Elected && k.FailoverMs <= rep.BoundMs {
			within = "yes"
		}
		next := k.Next
		if !k.Elected {
			next = "(none)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%.0f\t%.0f\t%s\t%d\t%.0f\t%.0f\t%s\t\n", k.N, k.Killed, k.Token, k.HeldMs, k.VacantMs, next, k.NextToken, k.FailoverMs, k.SelfMs, within)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BACKEND\tCAMPAIGNERS\tCAMPAIGNER\tOBSERVER\tKILLS\tP50 ms\tMAX ms\tTTL ms\tCOMMIT P50 ms\tBOUND ms\tWITHIN\tGOAL MET")
	fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%.0f\t%.0f\t%.0f\t%.1f\t%.0f\t%d/%d\t%s\n", rep.Backend, rep.Campaigners, rep.Campaigner, rep.Observer, len(rep.Kills),
		rep.P50Ms, rep.MaxMs, rep.TTLMs, rep.CommitP50Ms, rep.BoundMs, rep.Within, len(rep.Kills), yesNo(rep.Met))
	return tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// WriteJSON writes the report as indented JSON.
func (rep *ElectionReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteHTML writes the report as a self-contained HTML page: the verdict
// and the kills' table.
func (rep *ElectionReport) WriteHTML(w io.Writer) error {
	esc := html.EscapeString
	var b strings.Builder
	b.WriteString(`<!DOCTYPE html><html><head><meta charset="utf-8"><title>lockgate bench election</title></head><body>`)
	b.WriteString(`<div style="font-family:sans-serif;max-width:1000px;margin:1em auto"><h1>lockgate bench election</h1>` + "\n")
	if rep.Command != "" {
		fmt.Fprintf(&b, "<p><code>%s</code></p>\n", esc(rep.Command))
	}
	m := rep.Machine
	fmt.Fprintf(&b, "<p>%s · %s/%s · %s × %d cores · %s</p>\n", esc(m.Host), esc(m.OS), esc(m.Arch), esc(m.CPU), m.Cores, m.Time.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "<p>%d campaigner processes (%s) on %s; the leader's process SIGKILLed %d times; failover is from the kill to the observer (%s) seeing the next leader. Bound: TTL %.0f ms + commit p50 %.1f ms (an uncontended acquire, %d samples) = %.0f ms. p50 %.0f ms, max %.0f ms, %d of %d within: goal %s.</p>\n",
		rep.Campaigners, esc(rep.Campaigner), esc(rep.Backend), len(rep.Kills), esc(rep.Observer), rep.TTLMs, rep.CommitP50Ms, rep.CommitSamples, rep.BoundMs,
		rep.P50Ms, rep.MaxMs, rep.Within, len(rep.Kills), map[bool]string{true: "met", false: "not met"}[rep.Met])
	var rows [][]string
	for _, k := range rep.Kills {
		rows = append(rows, []string{fmt.Sprint(k.N), k.Killed, fmt.Sprint(k.Token), fmt.Sprintf("%.0f", k.HeldMs), fmt.Sprintf("%.0f", k.VacantMs),
			k.Next, fmt.Sprint(k.NextToken), fmt.Sprintf("%.0f", k.FailoverMs), fmt.Sprintf("%.0f", k.SelfMs), yesNo(k.Elected && k.FailoverMs <= rep.BoundMs)})
	}
	b.WriteString(htmlTable("kills", []string{"kill", "killed", "token", "led ms", "vacant ms", "next", "token", "failover ms", "self ms", "within bound"}, rows))
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "<p><i>note:</i> %s</p>\n", esc(n))
	}
	b.WriteString("</div></body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
