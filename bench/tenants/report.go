package tenants

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
)

// TenantsReport is the outcome of RunTenants; its JSON form is the schema
// of `lockgate-bench tenants --json`.
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
