package campaign

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/opts"

	"github.com/lockgate/lockgate/bench/report"
	"github.com/lockgate/lockgate/check"
	"github.com/lockgate/lockgate/check/linearize"
)

// WriteTable writes the verdicts and the fault log for a terminal.
func (r *ChaosReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "backend\t%s\n", r.Backend)
	fmt.Fprintf(tw, "faults\t%s (seed %d)\n", strings.Join(r.Faults, ","), r.Seed)
	if r.Command != "" {
		fmt.Fprintf(tw, "command\t%s\n", r.Command)
	}
	fmt.Fprintf(tw, "duration\t%.1f s, %d clients on %d keys, TTL %d ms, hold < %g ms, think < %g ms\n",
		r.DurationS, r.Clients, r.Keys, r.TTLMs, r.HoldMs, r.ThinkMs)
	fmt.Fprintf(tw, "cycles\t%d (%.1f/s)\n", r.Cycles, r.CyclesPerS)
	if h := r.holdsText(); h != "" {
		fmt.Fprintf(tw, "holds\t%s\n", h)
	}
	if t := r.readsText(); t != "" {
		fmt.Fprintf(tw, "reads\t%s\n", t)
	}
	fmt.Fprintf(tw, "overlaps\t%d\n", r.Overlaps)
	fmt.Fprintf(tw, "stale writes accepted\t%d\n", r.StaleWritesAccepted)
	fmt.Fprintf(tw, "stale writes rejected\t%d\n", r.StaleWritesRejected)
	fmt.Fprintf(tw, "unfenced conflicts\t%d\n", r.UnfencedConflicts)
	fmt.Fprintf(tw, "linearizable\t%v (%s; %d keys: %d checked, %d not checked, %.0f%% tolerated)\n", r.Linearizable, r.Linearizability,
		r.LinearizabilityKeys, r.LinearizabilityKeys-len(r.UncheckedKeys), len(r.UncheckedKeys), 100*r.TolerateUnchecked)
	for _, k := range r.UncheckedKeys {
		fmt.Fprintf(tw, "not checked\t%s (%d ops): %s\n", k.Key, k.Ops, k.Reason)
	}
	if r.TokenCheck == "checked" {
		fmt.Fprintf(tw, "tokens reused\t%d\n", r.TokensReused)
		fmt.Fprintf(tw, "token regressions\t%d\n", r.TokenRegressions)
	} else {
		fmt.Fprintf(tw, "tokens\t%s\n", r.TokenCheck)
	}
	fmt.Fprintf(tw, "unavailable\t%.2f s\n", r.UnavailableS)
	fmt.Fprintf(tw, "max recovery\t%.2f s\n", r.MaxRecoveryS)
	fmt.Fprintf(tw, "valid\t%v\n", r.Valid)
	if len(r.Errors) > 0 {
		kinds := make([]string, 0, len(r.Errors))
		for k, n := range r.Errors {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
		sort.Strings(kinds)
		fmt.Fprintf(tw, "errors\t%s\n", strings.Join(kinds, ", "))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tHEALED\tRECOVERY\tFAULT\tWHAT")
	for _, ev := range r.Injected {
		rec := fmt.Sprintf("%.2f s", ev.RecoveryS)
		if !ev.Recovered {
			rec = "never"
		}
		fmt.Fprintf(tw, "%.1f s\t%.1f s\t%s\t%s\t%s\n", ev.StartS, ev.HealS, rec, ev.Fault, ev.What)
	}
	tw.Flush()
	if len(r.Availability) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "FAULT\tCOUNT\tSTART→GRANT MEDIAN\tMAX\tHEAL→GRANT MEDIAN\tMAX")
		for _, a := range r.Availability {
			fmt.Fprintf(tw, "%s\t%d\t%.2f s\t%s\t%.2f s\t%s\n", a.Fault, a.Count, a.ToGrantMedianS, worst(a.ToGrantMaxS, a.Unserved),
				a.RecoveryMedianS, worst(a.RecoveryMaxS, a.Unrecovered))
		}
		tw.Flush()
	}
	for _, ex := range r.OverlapExamples {
		fmt.Fprintf(w, "overlap: %s\n", ex)
	}
	for _, ex := range r.TokenExamples {
		fmt.Fprintf(w, "token: %s\n", ex)
	}
	for _, ex := range r.ReadExamples {
		fmt.Fprintf(w, "read: %s\n", ex)
	}
	if r.Election != nil {
		for _, ex := range r.Election.Examples {
			fmt.Fprintf(w, "election: %s\n", ex)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if !r.Valid {
		fmt.Fprintln(w, "INVALID: a fault expected to break mutual exclusion produced no overlap: this campaign tested nothing")
	}
	for _, f := range r.Failures() {
		fmt.Fprintf(w, "FAILED %s\n", f)
	}
	return nil
}

// worst formats a worst time, marked "≥" when some faults saw no grant
// (their times are lower bounds).
func worst(s float64, without int) string {
	if without > 0 {
		return fmt.Sprintf("≥ %.2f s (%d without a grant)", s, without)
	}
	return fmt.Sprintf("%.2f s", s)
}

// WriteJSON writes the report as indented JSON.
func (r *ChaosReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteLinearizability writes porcupine's visualisation of the lock
// history's keys that were not linearizable (Illegal, or Unknown: their
// search timed out), or of every key when all were; the search behind it
// is bounded by a minute.
func (r *ChaosReport) WriteLinearizability(w io.Writer) error {
	return linearize.VisualizeKeys(r.history, r.result.NotOkKeys(), time.Minute, w)
}

// WriteHTML writes a self-contained report: the verdicts, and a timeline of
// the faults (shaded) against the successful acquisitions per key and the
// stale writes the fence rejected.
func (r *ChaosReport) WriteHTML(w io.Writer) error {
	const bucket = 0.25 // seconds
	n := int(r.DurationS/bucket) + 1
	keys := map[string][]int{}
	rejected := make([]int, n)
	for _, o := range r.history {
		i := min(int(o.End.Seconds()/bucket), n-1)
		switch {
		case o.Kind == check.Acquire && o.OK:
			if keys[o.Key] == nil {
				keys[o.Key] = make([]int, n)
			}
			keys[o.Key][i]++
		case o.Kind == check.Write && o.Fenced && !o.OK && !o.Unknown:
			rejected[i]++
		}
	}
	x := make([]string, n)
	for i := range x {
		x[i] = fmt.Sprintf("%.2f", float64(i)*bucket)
	}
	c := charts.NewLine()
	c.SetGlobalOptions(
		charts.WithInitializationOpts(opts.Initialization{Width: "1100px", Height: "460px"}),
		charts.WithAnimation(false),
		charts.WithTitleOpts(opts.Title{Title: "timeline", Subtitle: "acquisitions per 250 ms per key; shaded: faults; red: stale writes the fence rejected"}),
		charts.WithXAxisOpts(opts.XAxis{Name: "s"}),
		charts.WithYAxisOpts(opts.YAxis{Name: "per 250 ms"}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "axis"}),
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(true), Top: "30px"}),
	)
	c.SetXAxis(x)
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	var areas []opts.MarkAreaNameCoordItem
	for _, ev := range r.Injected {
		areas = append(areas, opts.MarkAreaNameCoordItem{
			Name:        ev.Fault,
			Coordinate0: []interface{}{fmt.Sprintf("%.2f", float64(int(ev.StartS/bucket))*bucket)},
			Coordinate1: []interface{}{fmt.Sprintf("%.2f", float64(min(int(ev.HealS/bucket), n-1))*bucket)},
		})
	}
	for i, k := range names {
		data := make([]opts.LineData, n)
		for j, v := range keys[k] {
			data[j] = opts.LineData{Value: v}
		}
		var so []charts.SeriesOpts
		if i == 0 && len(areas) > 0 {
			so = append(so, charts.WithMarkAreaNameCoordItemOpts(areas...),
				charts.WithMarkAreaStyleOpts(opts.MarkAreaStyle{ItemStyle: &opts.ItemStyle{Color: "rgba(255,160,0,0.18)"}}))
		}
		c.AddSeries(k, data, so...)
	}
	rej := make([]opts.LineData, n)
	for j, v := range rejected {
		rej[j] = opts.LineData{Value: v}
	}
	c.AddSeries("stale writes rejected", rej, charts.WithItemStyleOpts(opts.ItemStyle{Color: "#d00"}))

	page := report.NewPage("lockgate-bench chaos: " + r.Backend)
	page.AddCharts(c)
	var buf bytes.Buffer
	if err := page.Render(&buf); err != nil {
		return err
	}
	return report.WriteInlined(w, buf.String(), r.htmlHeader())
}

func (r *ChaosReport) htmlHeader() string {
	esc := html.EscapeString
	var b strings.Builder
	b.WriteString(`<div style="font-family:sans-serif;max-width:1100px;margin:1em auto">`)
	fmt.Fprintf(&b, "<h1>lockgate-bench chaos: %s</h1>\n", esc(r.Backend))
	if r.Command != "" {
		fmt.Fprintf(&b, "<p><code>%s</code></p>\n", esc(r.Command))
	}
	verdict := func(name, value string, good bool) {
		color := "#070"
		if !good {
			color = "#b00"
		}
		fmt.Fprintf(&b, `<tr><td>%s</td><td style="color:%s;font-weight:bold">%s</td></tr>`+"\n", esc(name), color, esc(value))
	}
	b.WriteString(`<table style="border-collapse:collapse;font-size:14px" border="1" cellpadding="4">`)
	fmt.Fprintf(&b, "<tr><td>faults</td><td>%s (seed %d), %.1f s, %d clients on %d keys, TTL %d ms, hold &lt; %g ms, think &lt; %g ms, %d cycles (%.1f/s)</td></tr>\n",
		esc(strings.Join(r.Faults, ", ")), r.Seed, r.DurationS, r.Clients, r.Keys, r.TTLMs, r.HoldMs, r.ThinkMs, r.Cycles, r.CyclesPerS)
	if h := r.holdsText(); h != "" {
		fmt.Fprintf(&b, "<tr><td>holds</td><td>%s</td></tr>\n", esc(h))
	}
	verdict("overlaps", fmt.Sprint(r.Overlaps), r.Overlaps == 0)
	verdict("stale writes accepted", fmt.Sprint(r.StaleWritesAccepted), r.StaleWritesAccepted == 0)
	verdict("stale writes rejected (the fence at work)", fmt.Sprint(r.StaleWritesRejected), true)
	verdict("unfenced conflicts", fmt.Sprint(r.UnfencedConflicts), r.UnfencedConflicts == 0)
	verdict("linearizable", fmt.Sprintf("%v (%s; %d keys, %d unknown)", r.Linearizable, r.Linearizability,
		r.LinearizabilityKeys, r.LinearizabilityUnknownKeys), r.Linearizable)
	if r.TokenCheck == "checked" {
		verdict("tokens reused", fmt.Sprint(r.TokensReused), r.TokensReused == 0)
		verdict("token regressions", fmt.Sprint(r.TokenRegressions), r.TokenRegressions == 0)
	} else {
		verdict("tokens", r.TokenCheck, true)
	}
	verdict("unavailable", fmt.Sprintf("%.2f s", r.UnavailableS), true)
	verdict("max recovery after a heal", fmt.Sprintf("%.2f s", r.MaxRecoveryS), r.MaxRecoveryS <= 5)
	verdict("valid campaign", fmt.Sprint(r.Valid), r.Valid)
	b.WriteString("</table>\n<h3>faults</h3><ul>\n")
	for _, ev := range r.Injected {
		fmt.Fprintf(&b, "<li>%.1f–%.1f s: <b>%s</b>: %s (recovered after %.2f s)</li>\n", ev.StartS, ev.HealS, esc(ev.Fault), esc(ev.What), ev.RecoveryS)
	}
	b.WriteString("</ul>\n")
	if len(r.Availability) > 0 {
		b.WriteString(`<h3>availability per fault kind</h3><table style="border-collapse:collapse;font-size:14px" border="1" cellpadding="4">` +
			"<tr><th>fault</th><th>count</th><th>start → grant, median</th><th>worst</th><th>heal → grant, median</th><th>worst</th></tr>\n")
		for _, a := range r.Availability {
			fmt.Fprintf(&b, "<tr><td>%s</td><td>%d</td><td>%.2f s</td><td>%s</td><td>%.2f s</td><td>%s</td></tr>\n", esc(a.Fault), a.Count,
				a.ToGrantMedianS, esc(worst(a.ToGrantMaxS, a.Unserved)), a.RecoveryMedianS, esc(worst(a.RecoveryMaxS, a.Unrecovered)))
		}
		b.WriteString("</table>\n")
	}
	for _, f := range r.Failures() {
		fmt.Fprintf(&b, "<p style=\"color:#b00\"><b>failed</b> %s</p>\n", esc(f))
	}
	for _, ex := range r.OverlapExamples {
		fmt.Fprintf(&b, "<p>overlap: %s</p>\n", esc(ex))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "<p>note: %s</p>\n", esc(n))
	}
	b.WriteString("</div>\n")
	return b.String()
}

// KindAvailability is what clients saw around the faults of one kind: the
// median and worst time from a fault's start to the first grant of a lock
// requested at or after it (the lock-delay; a kill or pause of the
// servers starts with the holder's death), and from its heal to the next
// grant (recovery). Unserved and Unrecovered count the faults after which
// there was no such grant (their times run to the end of the history).
type KindAvailability struct {
	Fault           string  `json:"fault"`
	Count           int     `json:"count"`
	ToGrantMedianS  float64 `json:"to_grant_median_s"`
	ToGrantMaxS     float64 `json:"to_grant_max_s"`
	RecoveryMedianS float64 `json:"recovery_median_s"`
	RecoveryMaxS    float64 `json:"recovery_max_s"`
	Unserved        int     `json:"unserved,omitempty"`
	Unrecovered     int     `json:"unrecovered,omitempty"`
}

// FaultEvent is one injected fault.
type FaultEvent struct {
	Fault     string  `json:"fault"`
	What      string  `json:"what"`
	StartS    float64 `json:"start_s"`
	HealS     float64 `json:"heal_s"`
	RecoveryS float64 `json:"recovery_s"`
	Recovered bool    `json:"recovered"`
}
