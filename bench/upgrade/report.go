package upgrade

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lockgate/lockgate/bench/campaign"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/check"
	"github.com/lockgate/lockgate/check/linearize"
)

// The phases of the drill, as the report names them.
const (
	PhaseOld            = "old"
	PhaseUpgrade        = "upgrade"
	PhaseGateRise       = "gate-rise"
	PhaseNew            = "new"
	PhaseDowngrade      = "downgrade"
	PhaseDowngradeNodes = "downgrade-nodes"
	PhaseOldAgain       = "old-again"
)

// UpgradeReport is the outcome of RunUpgrade; its JSON form is the schema
// of `lockgate-bench upgrade --json`. Times are seconds since the
// workload started.
type UpgradeReport struct {
	From        string  `json:"from"`
	To          string  `json:"to"`
	DurationS   float64 `json:"duration_s"`
	Workers     int     `json:"workers"`
	ClientLifeS float64 `json:"client_life_s"`
	DowngradeTo uint8   `json:"downgrade_to"`

	Phases []UpgradePhase `json:"phases"`
	Swaps  []NodeSwap     `json:"swaps"`
	// Gate is every change of the format gate the nodes reported (none
	// while every node ran a binary that predates it: format 1).
	Gate []GateChange `json:"gate"`
	// GateRoseTo is the format the gate rose to once every node ran the
	// newer binary; GateRoseS when it got there, GateFellS when it was
	// back at DowngradeTo after the downgrade began (nil: never).
	GateRoseTo uint8    `json:"gate_rose_to"`
	GateRoseS  *float64 `json:"gate_rose_s"`
	GateFellS  *float64 `json:"gate_fell_s"`
	// FeaturesOnS is when the first client was offered sessions;
	// FeaturesOffS when the first client that connected after the
	// downgrade began was not (nil: never).
	FeaturesOnS  *float64 `json:"features_on_s"`
	FeaturesOffS *float64 `json:"features_off_s"`
	// Clients counts the SDK clients the workers opened, ClientsOffered
	// those offered sessions.
	Clients        int           `json:"clients"`
	ClientsOffered int           `json:"clients_offered_sessions"`
	Downgrade      DowngradeStep `json:"downgrade"`

	Ops    PhaseOps       `json:"ops"`
	Errors map[string]int `json:"errors"`

	// The checkers of check over the whole history, as a chaos
	// campaign's: see ChaosReport. TokensReusedAnyKey counts grants
	// whose token a grant of any key carried before: raftlock's counter
	// is the cluster's, so no token is ever granted twice.
	Overlaps                   int      `json:"overlaps"`
	OverlapExamples            []string `json:"overlap_examples,omitempty"`
	StaleWritesAccepted        int      `json:"stale_writes_accepted"`
	StaleWritesRejected        int      `json:"stale_writes_rejected"`
	TokensReused               int      `json:"tokens_reused"`
	TokensReusedAnyKey         int      `json:"tokens_reused_any_key"`
	TokenRegressions           int      `json:"token_regressions"`
	TokenExamples              []string `json:"token_examples,omitempty"`
	Linearizable               bool     `json:"linearizable"`
	Linearizability            string   `json:"linearizability"`
	LinearizabilityKeys        int      `json:"linearizability_keys"`
	LinearizabilityUnknownKeys int      `json:"linearizability_unknown_keys"`
	NotLinearizableKeys        []string `json:"not_linearizable_keys,omitempty"`
	SharedKeys                 int      `json:"shared_keys"`

	// NodeExits lists the nodes found not running when they should have
	// been; DrillError why the drill ended early.
	NodeExits  []string `json:"node_exits,omitempty"`
	DrillError string   `json:"drill_error,omitempty"`
	// Failures lists every promise broken (empty: the drill passed).
	Failures []string `json:"failures"`
	Command  string   `json:"command,omitempty"`

	history check.History // every operation, for History
}

// UpgradePhase is one phase of the drill and what the clients did in it.
type UpgradePhase struct {
	Name   string   `json:"name"`
	What   string   `json:"what"`
	StartS float64  `json:"start_s"`
	EndS   float64  `json:"end_s"`
	Ops    PhaseOps `json:"ops"`
}

// PhaseOps counts a stretch of the history: the grants (by the kind of
// cycle, and those in a session), the acquires that were not granted
// (held, refused as unsupported, or of unknown outcome), the releases and
// the fenced store's verdicts.
type PhaseOps struct {
	Grants          int            `json:"grants"`
	GrantsPerS      float64        `json:"grants_per_s"`
	ByKind          map[string]int `json:"by_kind"`
	SessionGrants   int            `json:"session_grants"`
	AcquireFailures int            `json:"acquire_failures"`
	Releases        int            `json:"releases"`
	FencedWrites    int            `json:"fenced_writes"`
	WritesRejected  int            `json:"fenced_writes_rejected"`
}

// NodeSwap is one node's replacement: stopped (SIGTERM) at StartS,
// knowing a leader again at ReadyS, applied up to the leader's commit
// index at CaughtUpS.
type NodeSwap struct {
	Node      string  `json:"node"`
	From      string  `json:"from"`
	To        string  `json:"to"`
	WasLeader bool    `json:"was_leader"`
	StartS    float64 `json:"start_s"`
	ReadyS    float64 `json:"ready_s"`
	CaughtUpS float64 `json:"caught_up_s"`
}

// GateChange is the gate as a node reported it, when it changed.
type GateChange struct {
	AtS     float64 `json:"at_s"`
	Gate    string  `json:"gate"`
	Format  uint8   `json:"format"`
	Offer   uint8   `json:"offer"`
	Ceiling uint8   `json:"ceiling,omitempty"`
	Node    string  `json:"node"`
}

// DowngradeStep is the operator's downgrade: first asked at AskedS, done
// at DoneS after Asks requests, every voter's snapshot covering Index.
type DowngradeStep struct {
	AskedS  float64 `json:"asked_s"`
	DoneS   float64 `json:"done_s"`
	Asks    int     `json:"asks"`
	Index   uint64  `json:"index"`
	Message string  `json:"message,omitempty"`
}

// finish fills the report from what the drill recorded and runs the
// checkers.
func (r *upgradeRun) finish() {
	rep, u := r.rep, r.u
	h := u.History()
	notes := u.notes()
	r.mu.Lock()
	rep.Gate = slices.Clone(r.gate)
	r.mu.Unlock()
	for i := range rep.Phases {
		p := &rep.Phases[i]
		p.Ops = countOps(h, notes, secs(p.StartS), secs(p.EndS))
	}
	rep.Ops = countOps(h, notes, 0, secs(rep.DurationS)+time.Hour)
	u.Mu.Lock()
	maps.Copy(rep.Errors, u.Errs)
	u.Mu.Unlock()
	u.umu.Lock()
	rep.Clients, rep.ClientsOffered = u.clients, u.withSession
	if u.on {
		rep.FeaturesOnS = floatPtr(u.featuresOn.Seconds())
	}
	if u.off {
		rep.FeaturesOffS = floatPtr(u.featuresOff.Seconds())
	}
	u.umu.Unlock()
	for _, g := range rep.Gate {
		if rep.GateRoseS == nil && rep.GateRoseTo != 0 && g.Format == rep.GateRoseTo && g.Offer == g.Format {
			rep.GateRoseS = floatPtr(g.AtS)
		}
		if rep.GateFellS == nil && rep.Downgrade.Asks > 0 && g.AtS >= rep.Downgrade.AskedS && g.Format == rep.DowngradeTo && g.Offer == g.Format {
			rep.GateFellS = floatPtr(g.AtS)
		}
	}
	rep.history = h
	rep.check(h)
}

// History is every operation the drill's clients recorded, in the
// checkers' form: what a failed drill's investigation starts from.
func (rep *UpgradeReport) History() check.History { return rep.history }

// check runs the checkers over h and lists the failures.
func (rep *UpgradeReport) check(h check.History) {
	res := linearize.Check(h, nil, check.Options{
		LinearizabilityTimeout: campaign.LinearizabilityBudget, LinearizabilityKeyTimeout: campaign.LinearizabilityKeyBudget})
	rep.Overlaps, rep.OverlapExamples = res.Overlaps, res.OverlapExamples
	rep.StaleWritesAccepted, rep.StaleWritesRejected = res.StaleWritesAccepted, res.StaleWritesRejected
	rep.TokensReused, rep.TokenRegressions, rep.TokenExamples = res.TokensReused, res.TokenRegressions, res.TokenExamples
	var ex []string
	rep.TokensReusedAnyKey, ex = tokensReusedAnyKey(h, 5)
	rep.TokenExamples = append(rep.TokenExamples, ex...)
	rep.Linearizable, rep.Linearizability = res.Linearizable, string(res.LinearizabilityResult)
	rep.LinearizabilityKeys, rep.LinearizabilityUnknownKeys = len(res.LinearizabilityKeys), res.LinearizabilityUnknownKeys
	rep.NotLinearizableKeys, rep.SharedKeys = res.NotOkKeys(), res.SharedKeys
	rep.Failures = rep.failures()
}

// failures lists the promises the drill saw broken.
func (rep *UpgradeReport) failures() []string {
	out := []string{}
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if rep.Overlaps > 0 {
		add("overlaps: %d: two clients held a key at once", rep.Overlaps)
	}
	if rep.StaleWritesAccepted > 0 {
		add("stale_writes_accepted: %d: the fenced store took writes behind a newer token", rep.StaleWritesAccepted)
	}
	if rep.TokensReused > 0 || rep.TokensReusedAnyKey > 0 {
		add("tokens_reused: %d grants carried a token already granted for their key, %d one granted for any key", rep.TokensReused, rep.TokensReusedAnyKey)
	}
	if rep.TokenRegressions > 0 {
		add("token_regressions: %d grants carried a token lower than an earlier grant's", rep.TokenRegressions)
	}
	if !rep.Linearizable {
		add("linearizable: false (%s; keys not Ok: %s; %d of %d keys unknown)", rep.Linearizability,
			strings.Join(rep.NotLinearizableKeys, ", "), rep.LinearizabilityUnknownKeys, rep.LinearizabilityKeys)
	}
	for _, e := range rep.NodeExits {
		add("node exit: %s", e)
	}
	if rep.DrillError != "" {
		add("drill: %s", rep.DrillError)
	}
	if rep.DrillError == "" && (rep.GateRoseS == nil || rep.GateFellS == nil) {
		add("gate: rose at %s, fell at %s: it must rise once every node runs %s and fall with the downgrade", fmtAt(rep.GateRoseS), fmtAt(rep.GateFellS), rep.To)
	}
	return out
}

// tokensReusedAnyKey counts the grants of h whose token an earlier grant
// of any key carried, with up to maxExamples descriptions.
func tokensReusedAnyKey(h check.History, maxExamples int) (reused int, examples []string) {
	var grants []check.Op
	for _, o := range h {
		if o.Kind == check.Acquire && o.OK {
			grants = append(grants, o)
		}
	}
	slices.SortStableFunc(grants, func(a, b check.Op) int { return cmp.Compare(a.End, b.End) })
	first := make(map[uint64]check.Op, len(grants))
	for _, g := range grants {
		if f, ok := first[g.Token]; ok {
			reused++
			if len(examples) < maxExamples {
				examples = append(examples, fmt.Sprintf("token %d granted again: %v after %v", g.Token, g, f))
			}
			continue
		}
		first[g.Token] = g
	}
	return reused, examples
}

// countOps counts the operations of h that started in [from, to), and the
// grants noted in it.
func countOps(h check.History, notes []grantNote, from, to time.Duration) PhaseOps {
	p := PhaseOps{ByKind: map[string]int{}}
	for _, n := range notes {
		if n.at < from || n.at >= to {
			continue
		}
		p.Grants++
		p.ByKind[n.kind]++
		if n.session {
			p.SessionGrants++
		}
	}
	for _, o := range h {
		if o.Start < from || o.Start >= to {
			continue
		}
		switch {
		case o.Kind == check.Acquire && !o.OK:
			p.AcquireFailures++
		case o.Kind == check.Release:
			p.Releases++
		case o.Kind == check.Write && o.Fenced:
			p.FencedWrites++
			if !o.OK && !o.Unknown {
				p.WritesRejected++
			}
		}
	}
	if d := min(to, latest(h)) - from; d > 0 {
		p.GrantsPerS = float64(p.Grants) / d.Seconds()
	}
	return p
}

// latest is the latest End of h.
func latest(h check.History) time.Duration {
	var end time.Duration
	for _, o := range h {
		end = max(end, o.End)
	}
	return end
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func floatPtr(v float64) *float64 { return &v }

func fmtAt(s *float64) string {
	if s == nil {
		return "never"
	}
	return fmt.Sprintf("%.1fs", *s)
}

// Passed reports whether the drill broke no promise.
func (rep *UpgradeReport) Passed() bool { return len(rep.Failures) == 0 }

// WriteJSON writes the report as indented JSON.
func (rep *UpgradeReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteTable writes the terminal summary: the phases with what the
// clients did in each, the node replacements, the gate, the checkers.
func (rep *UpgradeReport) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "bench upgrade: %s → %s → %s, %d nodes, %d workers (a new SDK client every %.1fs), %.1fs\n\n",
		rep.From, rep.To, rep.From, provision.RaftNodes, rep.Workers, rep.ClientLifeS, rep.DurationS)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PHASE\tSTART s\tEND s\tGRANTS\t/s\tIN SESSION\tSHARED\tSEMAPHORE\tMULTIKEY\tNOT GRANTED\t")
	for _, p := range rep.Phases {
		o := p.Ops
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%d\t%.0f\t%d\t%d\t%d\t%d\t%d\t\n", p.Name, p.StartS, p.EndS, o.Grants, o.GrantsPerS, o.SessionGrants,
			o.ByKind[cycleRWShared], o.ByKind[cycleSemaphore], o.ByKind[cycleMultiKey], o.AcquireFailures)
	}
	o := rep.Ops
	fmt.Fprintf(tw, "all\t0.0\t%.1f\t%d\t%.0f\t%d\t%d\t%d\t%d\t%d\t\n", rep.DurationS, o.Grants, o.GrantsPerS, o.SessionGrants,
		o.ByKind[cycleRWShared], o.ByKind[cycleSemaphore], o.ByKind[cycleMultiKey], o.AcquireFailures)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, s := range rep.Swaps {
		leader := ""
		if s.WasLeader {
			leader = " (leader)"
		}
		fmt.Fprintf(w, "node %s%s: %s → %s at %.1fs, ready %.1fs later, caught up %.1fs later\n",
			s.Node, leader, s.From, s.To, s.StartS, s.ReadyS-s.StartS, s.CaughtUpS-s.StartS)
	}
	fmt.Fprintf(w, "\ngate: rose to %d at %s; first client offered sessions at %s (%d of %d clients were)\n",
		rep.GateRoseTo, fmtAt(rep.GateRoseS), fmtAt(rep.FeaturesOnS), rep.ClientsOffered, rep.Clients)
	d := rep.Downgrade
	if d.Asks > 0 {
		fmt.Fprintf(w, "downgrade to %d: asked at %.1fs, done at %.1fs after %d request(s) (every voter's snapshot covers index %d); gate at %d from %s; sessions no longer offered to new clients from %s\n",
			rep.DowngradeTo, d.AskedS, d.DoneS, d.Asks, d.Index, rep.DowngradeTo, fmtAt(rep.GateFellS), fmtAt(rep.FeaturesOffS))
	}
	for _, g := range rep.Gate {
		fmt.Fprintf(w, "  %6.1fs  %s (node %s)\n", g.AtS, g.Gate, g.Node)
	}
	fmt.Fprintf(w, "\nops: %d grants (%d in a session), %d not granted, %d releases, %d fenced writes (%d rejected as stale)\n",
		o.Grants, o.SessionGrants, o.AcquireFailures, o.Releases, o.FencedWrites, o.WritesRejected)
	if len(rep.Errors) > 0 {
		keys := slices.Sorted(maps.Keys(rep.Errors))
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %d", k, rep.Errors[k])
		}
		fmt.Fprintf(w, "errors: %s\n", strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "checks: overlaps %d; stale writes accepted %d (rejected %d); tokens reused %d per key, %d across keys; token regressions %d; linearizable %v (%s, %d keys, %d unknown; %d keys with shared holds left out)\n",
		rep.Overlaps, rep.StaleWritesAccepted, rep.StaleWritesRejected, rep.TokensReused, rep.TokensReusedAnyKey, rep.TokenRegressions,
		rep.Linearizable, rep.Linearizability, rep.LinearizabilityKeys, rep.LinearizabilityUnknownKeys, rep.SharedKeys)
	for _, e := range rep.OverlapExamples {
		fmt.Fprintf(w, "  overlap: %s\n", e)
	}
	for _, e := range rep.TokenExamples {
		fmt.Fprintf(w, "  token: %s\n", e)
	}
	if rep.Passed() {
		_, err := fmt.Fprintln(w, "PASSED")
		return err
	}
	for _, f := range rep.Failures {
		fmt.Fprintf(w, "FAILED %s\n", f)
	}
	return nil
}
