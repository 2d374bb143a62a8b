package soak

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// minFitPoints is how many samples a series needs after the warm-up to be
// fitted at all; fewer is a failed verdict, not a pass: a soak that could
// not measure a node has not shown it does not leak.
const minFitPoints = 5

// Report is a soak's outcome: its settings, every sample (for plotting),
// the faults, what the workload did, and a verdict per node and metric.
type Report struct {
	Command     string           `json:"command,omitempty"`
	Backend     string           `json:"backend"`
	Duration    float64          `json:"durationSeconds"`
	Elapsed     float64          `json:"elapsedSeconds"`
	Warmup      float64          `json:"warmupSeconds"`
	Settle      float64          `json:"settleSeconds"`
	SampleEvery float64          `json:"sampleEverySeconds"`
	Clients     int              `json:"clients"`
	Keys        int              `json:"keys"`
	TTL         float64          `json:"ttlSeconds"`
	Faults      []string         `json:"faults"`
	Seed        uint64           `json:"seed"`
	Bounds      map[string]Bound `json:"bounds"`
	Nodes       []string         `json:"nodes"`
	Samples     []Sample         `json:"samples"`
	FaultEvents []FaultEvent     `json:"faultEvents"`
	Counts      Counts           `json:"counts"`
	Verdicts    []Verdict        `json:"verdicts"`
	// Failures lists every failed verdict and check, by name; empty when
	// the soak passed.
	Failures []string `json:"failures"`
}

// Verdict is one node's metric, judged.
type Verdict struct {
	Node   string  `json:"node"`
	Metric string  `json:"metric"`
	Fit    Fit     `json:"fit"`
	Bound  Bound   `json:"bound"`
	Limit  float64 `json:"limit"` // the growth per hour allowed, or the cap
	Pass   bool    `json:"pass"`
	Why    string  `json:"why,omitempty"`
	// Shown is true for a node's figure of a metric that is judged on
	// the cluster's total instead (connBound): it never fails the run.
	Shown bool `json:"shown,omitempty"`
}

// judge fits every node's every metric and judges it; then the checks of
// the run itself: the workload made progress after the warm-up, and every
// fault was healed.
func (r *Report) judge(cfg Config) {
	warm, settle := cfg.warmup().Seconds(), cfg.Settle.Seconds()
	judge := func(node, m string, pts []Point, shown bool) {
		b := r.Bounds[m]
		f, ok := FitGrowth(pts, warm, settle, minFitPoints)
		v := Verdict{Node: node, Metric: m, Fit: f, Bound: b, Limit: b.Limit(f), Shown: shown}
		if !ok {
			v.Why = fmt.Sprintf("too few samples after the warm-up to fit (%d in lifetimes of at least two, want %d)", f.Points, minFitPoints)
		} else {
			v.Pass, v.Why = b.Judge(f)
		}
		if !v.Pass && !shown {
			r.Failures = append(r.Failures, fmt.Sprintf("node %s %s: %s", node, m, v.Why))
		}
		r.Verdicts = append(r.Verdicts, v)
	}
	for _, node := range r.Nodes {
		for _, m := range Metrics {
			judge(node, m, series(r.Samples, node, m), connBound(m))
		}
	}
	for _, m := range Metrics {
		if connBound(m) {
			judge(ClusterNode, m, clusterSeries(r.Samples, r.Nodes, r.SampleEvery, m), false)
		}
	}
	if r.Counts.Acquired == 0 {
		r.Failures = append(r.Failures, "workload: no lock was acquired")
	}
	for _, ev := range r.FaultEvents {
		if strings.HasPrefix(ev.Err, "heal:") {
			r.Failures = append(r.Failures, fmt.Sprintf("fault %s at %.0fs: %s", ev.Name, ev.At, ev.Err))
		}
	}
}

// Failed lists what failed; empty when the soak passed.
func (r *Report) Failed() []string { return r.Failures }

// WriteJSON writes the whole report, every sample included.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(r)
}

// WriteTable writes the node × metric table and what the run did.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "soak of %s: %.0fs (warm-up %.0fs, restarts settle %.0fs), a sample every %.0fs, %d clients on %d keys, TTL %.1fs, seed %d\n",
		r.Backend, r.Elapsed, r.Warmup, r.Settle, r.SampleEvery, r.Clients, r.Keys, r.TTL, r.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "node\tmetric\twarm-up median\tmedian\tend\tmax\tslope/h\t%/h\tbound\tpoints\tlives\tverdict\t")
	for _, v := range r.Verdicts {
		bound := "≤ " + fmtNum(v.Limit) + "/h"
		if v.Bound.Cap {
			bound = "max ≤ " + fmtNum(v.Limit)
		}
		verdict := "ok"
		switch {
		case v.Shown:
			verdict = "(cluster)"
		case !v.Pass:
			verdict = "FAIL"
		}
		f := v.Fit
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t%d\t%d\t%s\t\n", v.Node, v.Metric, fmtNum(f.WarmMedian),
			fmtNum(f.Median), fmtNum(f.End), fmtNum(f.Max), fmtNum(f.SlopePerHour), 100*f.FracPerHour, bound, f.Points, f.Segments, verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	c := r.Counts
	fmt.Fprintf(w, "workload: %d acquired, %d released, %d left to expire; sessions %d opened, %d closed, %d abandoned to expire; "+
		"%d watches, %d events; connections %d opened, %d closed\n", c.Acquired, c.Released, c.LeftToExpire,
		c.SessionsOpened, c.SessionsClosed, c.SessionsAbandoned, c.WatchesOpened, c.WatchEvents, c.ConnsOpened, c.ConnsClosed)
	if len(c.Errors) > 0 {
		keys := make([]string, 0, len(c.Errors))
		for k := range c.Errors {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d", k, c.Errors[k]))
		}
		fmt.Fprintf(w, "errors (faults cause some): %s\n", strings.Join(parts, ", "))
	}
	byName := map[string]int{}
	for _, ev := range r.FaultEvents {
		byName[ev.Name]++
	}
	fmt.Fprintf(w, "faults: %d injected and healed (%v)\n", len(r.FaultEvents), byName)
	if len(r.Failures) == 0 {
		fmt.Fprintln(w, "verdict: PASS, every metric within its bound")
		return nil
	}
	fmt.Fprintln(w, "verdict: FAIL")
	for _, f := range r.Failures {
		fmt.Fprintf(w, "  %s\n", f)
	}
	return nil
}
