package latency

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/opts"
	"github.com/lockgate/lockgate/bench/report"
)

// WriteTable writes the runs as a table for a terminal, then the notes,
// the comparisons, the wanted signal beside its floor, and the physical
// floor's rows.
func (rep *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "BACKEND\tVIA\tCACHE\tWORKLOAD\tCLIENTS\tOPS\tOPS/S\tP50 µs\tP90 µs\tP99 µs\tP99.9 µs\tMAX µs\tERRORS\tFLOOR µs\tP50 ×FLOOR\tOPS ×FLOOR\tHIT/MISS/RECL\t")
	for _, r := range rep.Runs {
		if r.Skipped {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t\n", r.ref(), r.Via, r.Cache, r.Workload, r.Clients, r.skipWord())
			continue
		}
		l := r.LatencyUS
		fl, p50x, opsx := r.floorText()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t\n",
			r.ref(), r.Via, r.Cache, r.Workload, r.Clients, r.Ops, r.OpsPerSec, l.P50, l.P90, l.P99, l.P999, l.Max, r.errorText(), fl, p50x, opsx, r.CacheStats.text())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range rep.notes() {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	sections := []struct {
		head []string
		rows [][]string
	}{
		{resourceRowsHead, rep.resourceRows()},
		{procRowsHead, rep.procRows()},
		{[]string{"WORKLOAD", "VIA", "OURS", "PEER", "P50 RATIO", "OPS RATIO", "PEER LACKS"}, rep.comparisonRows()},
		{cacheRowsHead, rep.cacheRows()},
		{modeRowsHead, rep.modeRows()},
		{signalRowsHead, rep.signalRows()},
		{[]string{"FLOOR", "P50 µs", "P99 µs", "SAMPLES", "MODEL"}, rep.Floor.rows()},
	}
	for _, sec := range sections {
		if len(sec.rows) == 0 {
			continue
		}
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(sec.head, "\t"))
		for _, row := range sec.rows {
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// notes are the report's notes, then each skipped run's reason.
func (rep *Report) notes() []string {
	notes := append([]string(nil), rep.Notes...)
	for _, r := range rep.Runs {
		if r.Skipped {
			notes = append(notes, fmt.Sprintf("%s via %s, cache %s, %s: %s", r.ref(), r.Via, r.Cache, r.Workload, r.Note))
		}
	}
	return append(notes, rep.resourceNotes()...)
}

// floorText is the run's floor columns: the floor (µs) and its p50 and
// ops/s as multiples of it; dashes without a floor.
func (r *Run) floorText() (floor, p50x, opsx string) {
	if r.Floor == nil {
		return "-", "-", "-"
	}
	return fmt.Sprintf("%.0f", r.Floor.LatencyUS), fmt.Sprintf("%.2f", r.Floor.P50X), fmt.Sprintf("%.2f", r.Floor.OpsX)
}

// rows are the floor's rows: the two measured primitives, then each
// backend's derived commit, cycle and handoff floors.
func (f *Floor) rows() [][]string {
	if f == nil || f.Sync.Samples == 0 {
		return nil
	}
	us := func(v float64) string { return fmt.Sprintf("%.1f", v) }
	fs := f.FS
	if fs == "" {
		fs = "filesystem"
	}
	rows := [][]string{
		{fmt.Sprintf("sync %d KiB", FloorBlock>>10), us(f.Sync.P50), us(f.Sync.P99), fmt.Sprint(f.Sync.Samples),
			fmt.Sprintf("append + fdatasync, %s at %s", fs, f.Dir)},
		{"loopback round trip", us(f.RTT.P50), us(f.RTT.P99), fmt.Sprint(f.RTT.Samples),
			fmt.Sprintf("%d B echo over TCP on 127.0.0.1", FloorMessage)},
	}
	for _, b := range f.Backends {
		rows = append(rows,
			[]string{b.Backend + " commit", us(b.CommitUS), "", "", fmt.Sprintf("%d sync + %d rtt", b.Model.Syncs, b.Model.RTTs)},
			[]string{b.Backend + " cycle", us(b.CycleUS), "", "", fmt.Sprintf("%d commit + %d rtt", CycleCommits, CycleRTTs)},
			[]string{b.Backend + " handoff", us(b.HandoffUS), "", "", fmt.Sprintf("%d commit + %d rtt", HandoffCommits, HandoffRTTs)})
	}
	return rows
}

// errorText is the error count with its kinds, e.g. "3 (timeout 2, other 1)".
func (r *Run) errorText() string {
	if r.Errors == 0 {
		return "0"
	}
	kinds := make([]string, 0, len(r.ErrorKinds))
	for k, n := range r.ErrorKinds {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	return fmt.Sprintf("%d (%s)", r.Errors, strings.Join(kinds, ", "))
}

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteHTML writes a self-contained HTML report: for each workload a
// latency CDF per backend and path, the throughput of every run, the table
// and the machine it ran on.
func (rep *Report) WriteHTML(w io.Writer) error {
	page := report.NewPage("lockgate-bench latency")
	for _, wl := range Workloads {
		runs := rep.runsOf(wl)
		runs = slices.DeleteFunc(runs, func(r *Run) bool { return r.Skipped })
		if len(runs) == 0 {
			continue
		}
		page.AddCharts(cdfChart(wl, runs), throughputChart(wl, runs))
		if fc := floorChart(wl, runs); fc != nil {
			page.AddCharts(fc)
		}
	}
	var buf bytes.Buffer
	if err := page.Render(&buf); err != nil {
		return err
	}
	return report.WriteInlinedFooter(w, buf.String(), rep.htmlHeader(), rep.htmlFooter())
}

func (rep *Report) runsOf(workload string) []*Run {
	var rs []*Run
	for _, r := range rep.Runs {
		if r.Workload == workload {
			rs = append(rs, r)
		}
	}
	return rs
}

func (r *Run) label() string {
	if r.Cache == CacheOn {
		return r.ref() + " (" + r.Via + ", cache on)"
	}
	return r.ref() + " (" + r.Via + ")"
}

// ref is the run's backend with its variant, "etcd:session".
func (r *Run) ref() string {
	if r.Variant == "" || strings.Contains(r.Backend, ":") {
		return r.Backend
	}
	return r.Backend + ":" + r.Variant
}

func cdfChart(workload string, runs []*Run) *charts.Line {
	c := charts.NewLine()
	c.SetGlobalOptions(
		charts.WithInitializationOpts(opts.Initialization{Width: "1000px", Height: "420px"}),
		charts.WithAnimation(false),
		charts.WithTitleOpts(opts.Title{Title: workload + ": latency CDF", Subtitle: "fraction of operations at or below a latency (log scale)"}),
		charts.WithXAxisOpts(opts.XAxis{Type: "log", Name: "µs"}),
		charts.WithYAxisOpts(opts.YAxis{Type: "value", Name: "%", Max: 100}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "axis"}),
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(true), Top: "30px"}),
	)
	for _, r := range runs {
		data := make([]opts.LineData, 0, len(r.CDF))
		for _, p := range r.CDF {
			data = append(data, opts.LineData{Value: []float64{max(p.LatencyUS, 1), p.Quantile}})
		}
		c.AddSeries(r.label(), data)
	}
	return c
}

func throughputChart(workload string, runs []*Run) *charts.Bar {
	c := charts.NewBar()
	c.SetGlobalOptions(
		charts.WithInitializationOpts(opts.Initialization{Width: "1000px", Height: "300px"}),
		charts.WithAnimation(false),
		charts.WithTitleOpts(opts.Title{Title: workload + ": throughput", Subtitle: "operations per second, median of the rounds"}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true)}),
	)
	names := make([]string, len(runs))
	data := make([]opts.BarData, len(runs))
	for i, r := range runs {
		names[i] = r.label()
		data[i] = opts.BarData{Value: int64(r.OpsPerSec)}
	}
	c.SetXAxis(names).AddSeries("ops/s", data)
	return c
}

// floorChart draws each run's p50 and ops/s as multiples of its floor (1
// is the floor), or returns nil when no run has a floor.
func floorChart(workload string, runs []*Run) *charts.Bar {
	var names []string
	var p50x, opsx []opts.BarData
	for _, r := range runs {
		if r.Floor == nil {
			continue
		}
		names = append(names, r.label())
		p50x = append(p50x, opts.BarData{Value: report.RoundTo(r.Floor.P50X, 2)})
		opsx = append(opsx, opts.BarData{Value: report.RoundTo(r.Floor.OpsX, 2)})
	}
	if len(names) == 0 {
		return nil
	}
	c := charts.NewBar()
	c.SetGlobalOptions(
		charts.WithInitializationOpts(opts.Initialization{Width: "1000px", Height: "300px"}),
		charts.WithAnimation(false),
		charts.WithTitleOpts(opts.Title{Title: workload + ": distance to the physical floor", Subtitle: "p50 and time per operation as multiples of the backend's floor (1 = the floor)"}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true)}),
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(true), Right: "10px"}),
	)
	c.SetXAxis(names).AddSeries("p50 × floor", p50x).AddSeries("ops × floor", opsx)
	return c
}

// htmlHeader is the report's heading, machine and table, as HTML.
func (rep *Report) htmlHeader() string {
	var b strings.Builder
	esc := html.EscapeString
	b.WriteString(`<div style="font-family:sans-serif;max-width:1000px;margin:1em auto">`)
	b.WriteString("<h1>lockgate-bench latency</h1>\n")
	if rep.Command != "" {
		fmt.Fprintf(&b, "<p><code>%s</code></p>\n", esc(rep.Command))
	}
	m := rep.Machine
	fmt.Fprintf(&b, "<p>%s · %s/%s · kernel %s · %s × %d cores · %s · lockgate %s · %s</p>\n",
		esc(m.Host), esc(m.OS), esc(m.Arch), esc(m.Kernel), esc(m.CPU), m.Cores, esc(m.GoVersion), esc(m.Lockgate),
		m.Time.Format("2006-01-02 15:04 UTC"))
	if len(m.Versions) > 0 {
		names := make([]string, 0, len(m.Versions))
		for k := range m.Versions {
			names = append(names, k)
		}
		sort.Strings(names)
		b.WriteString("<p>")
		for i, k := range names {
			if i > 0 {
				b.WriteString(" · ")
			}
			fmt.Fprintf(&b, "%s: %s", esc(k), esc(m.Versions[k]))
		}
		b.WriteString("</p>\n")
	}
	fmt.Fprintf(&b, "<p>%d round(s), %s measured per run", rep.Rounds, esc(rep.Duration))
	if rep.Rate > 0 {
		fmt.Fprintf(&b, ", open loop at %.0f ops/s", rep.Rate)
	} else {
		b.WriteString(", closed loop")
	}
	b.WriteString("; latencies are medians of the rounds' percentiles.</p>\n")
	b.WriteString(`<table style="border-collapse:collapse;font-size:13px" border="1" cellpadding="4">`)
	b.WriteString("<tr><th>backend</th><th>via</th><th>cache</th><th>workload</th><th>clients</th><th>ops</th><th>ops/s</th><th>p50 µs</th><th>p90 µs</th><th>p99 µs</th><th>p99.9 µs</th><th>max µs</th><th>errors</th><th>floor µs</th><th>p50 × floor</th><th>ops × floor</th><th>cache hits/misses/reclaimed</th></tr>\n")
	for _, r := range rep.Runs {
		if r.Skipped {
			fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%d</td><td colspan=\"12\">%s</td></tr>\n",
				esc(r.ref()), esc(r.Via), esc(r.Cache), esc(r.Workload), r.Clients, r.skipWord())
			continue
		}
		l := r.LatencyUS
		fl, p50x, opsx := r.floorText()
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%d</td><td>%d</td><td>%.0f</td><td>%.0f</td><td>%.0f</td><td>%.0f</td><td>%.0f</td><td>%.0f</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
			esc(r.ref()), esc(r.Via), esc(r.Cache), esc(r.Workload), r.Clients, r.Ops, r.OpsPerSec, l.P50, l.P90, l.P99, l.P999, l.Max, esc(r.errorText()), fl, p50x, opsx, r.CacheStats.text())
	}
	b.WriteString("</table>\n")
	for _, n := range rep.notes() {
		fmt.Fprintf(&b, "<p><i>note:</i> %s</p>\n", esc(n))
	}
	if rows := rep.cacheRows(); len(rows) > 0 {
		b.WriteString(`<h2>Lease cache</h2>
<p>Each cache-on run beside its cache-off run, same run: <i>ops on/off</i> is acquisitions/s with the SDK's lease cache over
without (above 1: the cache does more), <i>p50 off/on</i> and <i>p99 off/on</i> the latency without over with (above 1: the
cache is faster); hits, misses and reclaimed are the cache-on run's totals over its clients.</p>
`)
		b.WriteString(report.HTMLTable("cache", cacheRowsHead, rows))
	}
	if rows := rep.modeRows(); len(rows) > 0 {
		b.WriteString(`<h2>Beyond the mutex</h2>
<p>The primitives beyond the mutex beside their baseline in this run: <i>rw</i> (shared with the probability shown, else
exclusive, one key) and <i>semaphore</i> (one key) as acquisitions/s over the <i>contended</i> workload's (same clients,
one key, exclusive); <i>multikey</i> as the p50 of an AcquireAll of the keys shown over the p50 of a single-key acquire,
the two alternating in each client on keys of its own.</p>
`)
		b.WriteString(report.HTMLTable("modes", modeRowsHead, rows))
	}
	if rows := rep.signalRows(); len(rows) > 0 {
		b.WriteString(`<h2>Wanted signal</h2>
<p>From a waiter's Acquire to its holder seeing <code>Lease.Wanted</code>, p50 beside the floor measured in this run: one
commit (the waiter's place in the queue) and one loopback round trip (the request in, the push out), plus the gateway's hop
in front of a backend that is not raftlock.</p>
`)
		b.WriteString(report.HTMLTable("signal", signalRowsHead, rows))
	}
	b.WriteString(rep.modesHTML())
	if rows := rep.Floor.rows(); len(rows) > 0 {
		b.WriteString(`<h2>Physical floor</h2>
<p>Measured on this machine in this run, a round at a time with the backends; a backend's floors follow its commit model
(docs/benchmarks.md). <i>p50 × floor</i> is a run's p50 over the least one of its operations can take (the cycle floor;
the handoff floor for handoff); <i>ops × floor</i> is the most ops/s the workload can reach at the floor over the ops/s
measured (for contended: the interval between acquisitions over the handoff floor). 1.00 is the floor.</p>
`)
		b.WriteString(report.HTMLTable("floor", []string{"floor", "p50 µs", "p99 µs", "samples", "model"}, rows))
		for _, bf := range rep.Floor.Backends {
			fmt.Fprintf(&b, "<p><b>%s</b>: %s.</p>\n", esc(bf.Backend), esc(bf.Model.Why))
		}
	}
	b.WriteString("</div>\n")
	return b.String()
}

// htmlFooter is the report's part after the charts: what each run cost.
func (rep *Report) htmlFooter() string {
	var b strings.Builder
	b.WriteString(`<div style="font-family:sans-serif;max-width:1000px;margin:1em auto">`)
	if rows := rep.resourceRows(); len(rows) > 0 {
		b.WriteString(`<h2>Resources</h2>
<p>What each run cost over its measured rounds (not the warm-up): CPU time of the server processes the bench started for
its backend (each with everything it forked: PostgreSQL's backends count) and of the bench process, where the clients
run (and, on the gateway path, the gateway); <i>µs/op</i> is CPU time over the run's operations. The leader's is the
process that led the cluster in each window. Peak RSS is the largest resident set sampled at each round's start and
end; HWM is the kernel's peak since the process started. Servers the bench did not start are not measured.</p>
`)
		b.WriteString(report.HTMLTable("resources", resourceRowsHead, rows))
		if prow := rep.procRows(); len(prow) > 0 {
			b.WriteString(report.HTMLTable("server-processes", procRowsHead, prow))
		}
	}
	b.WriteString("</div>\n")
	return b.String()
}
