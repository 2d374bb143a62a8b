package latency

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

// DefaultMargin is how much worse a same-run ratio may get between two
// reports before CompareReports calls it a regression: 15 %.
const DefaultMargin = 0.15

// Regression sets the same-run ratios of one latency report beside those
// of an earlier one: ours over each peer, each run over its physical
// floor, and CPU per operation. Ratios, not absolute figures, because
// this machine's speed moves 2–3× from day to day while two backends, or
// a backend and its floor, measured in the same rounds move together.
type Regression struct {
	// Margin is the fraction by which a figure may get worse.
	Margin float64
	Rows   []RegressionRow
	// OnlyOld and OnlyNew name the figures one report has and the other
	// lacks (a backend or workload added or dropped): listed, not failed.
	OnlyOld, OnlyNew []string
}

// RegressionRow is one figure in both reports.
type RegressionRow struct {
	// Of is what the figure is about: "raft over etcd-mutex, sequential
	// via direct, cache off" or "raft via direct, cache off, sequential".
	Of string
	// Figure names it: "p50 ratio", "ops ratio", "p50 × floor", "ops ×
	// floor", "server µs/op", "leader µs/op", "client µs/op", "all µs/op".
	Figure string
	Old    float64
	New    float64
	// LowerBetter: a p50 ratio, a multiple of the floor and CPU per
	// operation are better lower; an ops ratio is better higher.
	LowerBetter bool
	// Verdict is "better", "worse", "same", or "WORSE" when it got worse
	// by more than the margin.
	Verdict string
}

// Failed reports whether the figure got worse by more than the margin.
func (r RegressionRow) Failed() bool { return r.Verdict == "WORSE" }

// figure is one comparable figure of a report.
type figure struct {
	of, name    string
	value       float64
	lowerBetter bool
}

func (f figure) key() string { return f.of + " | " + f.name }

// figures lists what CompareReports compares in rep, in report order.
func (rep *Report) figures() []figure {
	var out []figure
	add := func(of, name string, v float64, lower bool) {
		if v > 0 {
			out = append(out, figure{of: of, name: name, value: v, lowerBetter: lower})
		}
	}
	for _, c := range rep.Comparisons {
		cache := c.Cache
		if cache == "" {
			cache = CacheOff // reports from before comparisons named their cache
		}
		of := fmt.Sprintf("%s over %s, %s via %s, cache %s", c.Ours, c.Peer, c.Workload, c.Via, cache)
		add(of, "p50 ratio", c.P50Ratio, true)
		add(of, "ops ratio", c.OpsRatio, false)
	}
	for _, r := range rep.Runs {
		if r.Skipped {
			continue
		}
		of := fmt.Sprintf("%s via %s, cache %s, %s", r.ref(), r.Via, r.Cache, r.Workload)
		if r.Floor != nil {
			add(of, "p50 × floor", r.Floor.P50X, true)
			add(of, "ops × floor", r.Floor.OpsX, true)
		}
		if res := r.Resources; res != nil {
			if res.Servers != nil {
				add(of, "server µs/op", res.Servers.CPUPerOpUS, true)
				if res.Servers.Leader != nil {
					add(of, "leader µs/op", res.Servers.Leader.CPUPerOpUS, true)
				}
			}
			if res.Client != nil {
				add(of, "client µs/op", res.Client.CPUPerOpUS, true)
			}
			add(of, "all µs/op", res.AllCPUPerOpUS, true)
		}
	}
	// A key met twice (a report from before comparisons named their cache,
	// with cache on and off) keeps both, numbered.
	seen := map[string]int{}
	for i := range out {
		k := out[i].key()
		seen[k]++
		if n := seen[k]; n > 1 {
			out[i].of += fmt.Sprintf(" (#%d)", n)
		}
	}
	return out
}

// CompareReports sets cur's figures beside old's. A figure is worse by
// more than margin when, lower being better, it exceeds old × (1+margin),
// or, higher being better, it falls below old × (1−margin).
func CompareReports(old, cur *Report, margin float64) (*Regression, error) {
	if margin < 0 || margin >= 1 {
		return nil, fmt.Errorf("margin %v: want at least 0 and below 1", margin)
	}
	g := &Regression{Margin: margin}
	before := map[string]figure{}
	for _, f := range old.figures() {
		before[f.key()] = f
	}
	matched := map[string]bool{}
	for _, f := range cur.figures() {
		o, ok := before[f.key()]
		if !ok {
			g.OnlyNew = append(g.OnlyNew, f.of+": "+f.name)
			continue
		}
		matched[f.key()] = true
		row := RegressionRow{Of: f.of, Figure: f.name, Old: o.value, New: f.value, LowerBetter: f.lowerBetter}
		worse, better := f.value > o.value, f.value < o.value
		limit := o.value * (1 + margin)
		beyond := f.value > limit
		if !f.lowerBetter {
			worse, better = better, worse
			beyond = f.value < o.value*(1-margin)
		}
		switch {
		case beyond:
			row.Verdict = "WORSE"
		case worse:
			row.Verdict = "worse"
		case better:
			row.Verdict = "better"
		default:
			row.Verdict = "same"
		}
		g.Rows = append(g.Rows, row)
	}
	for _, f := range old.figures() {
		if !matched[f.key()] {
			g.OnlyOld = append(g.OnlyOld, f.of+": "+f.name)
		}
	}
	return g, nil
}

// Failed lists the rows that got worse by more than the margin.
func (g *Regression) Failed() []RegressionRow {
	var out []RegressionRow
	for _, r := range g.Rows {
		if r.Failed() {
			out = append(out, r)
		}
	}
	return out
}

// Err is nil unless some figure got worse by more than the margin.
func (g *Regression) Err() error {
	f := g.Failed()
	if len(f) == 0 {
		return nil
	}
	names := make([]string, len(f))
	for i, r := range f {
		names[i] = r.Of + ": " + r.Figure
	}
	return fmt.Errorf("%d of %d figures got worse by more than %.0f%%: %s", len(f), len(g.Rows), g.Margin*100, strings.Join(names, "; "))
}

// WriteTable prints every figure in both reports beside each other, then
// the figures only one report has.
func (g *Regression) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPARED\tFIGURE\tBETTER\tOLD\tNEW\tCHANGE\tVERDICT")
	for _, r := range g.Rows {
		dir := "higher"
		if r.LowerBetter {
			dir = "lower"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f\t%+.1f%%\t%s\n", r.Of, r.Figure, dir, r.Old, r.New, (r.New/r.Old-1)*100, r.Verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range g.OnlyOld {
		fmt.Fprintf(w, "only in the old report: %s\n", s)
	}
	for _, s := range g.OnlyNew {
		fmt.Fprintf(w, "only in the new report: %s\n", s)
	}
	n := len(g.Failed())
	fmt.Fprintf(w, "%d figures compared, %d worse by more than %.0f%%\n", len(g.Rows), n, g.Margin*100)
	return nil
}

// LoadReport reads a report that --json wrote.
func LoadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("%s: not a latency report: %w", path, err)
	}
	if len(rep.Runs) == 0 {
		return nil, fmt.Errorf("%s: a latency report with no runs", path)
	}
	return &rep, nil
}
