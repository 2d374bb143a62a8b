package scale

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/opts"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/report"
)

// ScaleReport is the outcome of RunScale; its JSON form is the schema of
// `lockgate-bench scale --json`.
type ScaleReport struct {
	Machine     provision.Machine `json:"machine"`
	Command     string            `json:"command,omitempty"`
	Backend     string            `json:"backend"`
	Provisioned bool              `json:"provisioned"`
	Leases      int               `json:"leases"`
	// Sessions are the sessions the leases were held in; SessionMode
	// says what a session is here: "explicit" (lock.SessionLocker
	// sessions the bench keeps alive), "per-client" (each connection's
	// auto-renewed leases: one SDK session per client where the SDK has
	// them, else each lease renewed on its own) or "etcd-lease" (an etcd
	// concurrency.Session).
	Sessions       int     `json:"sessions"`
	SessionMode    string  `json:"session_mode"`
	Connections    int     `json:"connections"`
	Waiters        int     `json:"waiters"`
	TTLMs          float64 `json:"ttl_ms"`
	DurationS      float64 `json:"duration_s"`
	Background     int     `json:"background_clients"`
	BackgroundRate float64 `json:"background_rate"`

	// LoadSeconds is how long opening the sessions and acquiring every
	// lease took; LoadRate leases per second.
	LoadSeconds float64 `json:"load_s"`
	LoadRate    float64 `json:"load_rate"`
	// The leader's live heap (go_memstats_next_gc_bytes / 2 after two
	// collections: the heap live at the last one) before loading and once
	// loaded; HeapPerLease their difference per lease (the state machine,
	// the gateway's per-lease state and the Raft log not yet compacted);
	// HeapPerLeaseHeld the same after --duration of holding.
	HeapIdleBytes    float64 `json:"heap_idle_bytes"`
	HeapLoadedBytes  float64 `json:"heap_loaded_bytes"`
	HeapPerLease     float64 `json:"heap_per_lease_bytes"`
	HeapPerLeaseHeld float64 `json:"heap_per_lease_held_bytes"`
	// RenewalsPerSec is the leader's renewal entries per second over the
	// load phase (RenewalSource says what was
	// counted; -1: not measured), beside RenewalGoal = sessions /
	// (TTL/3). EntriesPerSec is every log entry committed per second
	// (background workload included).
	RenewalsPerSec float64 `json:"renewals_per_s"`
	RenewalSource  string  `json:"renewal_source"`
	RenewalGoal    float64 `json:"renewal_goal_per_s"`
	EntriesPerSec  float64 `json:"entries_per_s"`
	// KeepAlivesSent is the keep-alives the bench sent (explicit
	// sessions; -1 when the SDK or etcd's client sent them).
	KeepAlivesSent int64 `json:"keepalives_sent"`

	Phases   []ScalePhase   `json:"phases"`
	WaitersR *ScaleWaiters  `json:"waiting,omitempty"`
	Snapshot *ScaleSnapshot `json:"snapshot,omitempty"`
	Restore  *ScaleRestore  `json:"restore,omitempty"`
	Failover *ScaleFailover `json:"failover,omitempty"`
	Storm    *ScaleStorm    `json:"storm,omitempty"`
	Samples  []ScaleSample  `json:"samples"`
	Goals    []ScaleGoal    `json:"goals"`
	Notes    []string       `json:"notes,omitempty"`
	Extra    map[string]any `json:"extra,omitempty"`
	// LostLeases and LostSessions count what ended before the storm while
	// the bench kept it alive: safety, must be 0.
	LostLeases   int `json:"lost_leases"`
	LostSessions int `json:"lost_sessions"`
}

// ScalePhase is the background workload's grants in one phase.
type ScalePhase struct {
	Name       string             `json:"name"`
	Seconds    float64            `json:"seconds"`
	Ops        int64              `json:"ops"`
	Errors     int64              `json:"errors"`
	ErrorKinds map[string]int64   `json:"error_kinds,omitempty"`
	LatencyUS  report.Percentiles `json:"latency_us"`
}

// ScaleWaiters is the waiting connections' part.
type ScaleWaiters struct {
	// Connections is every waiting connection (own keys and the one key).
	Connections int `json:"connections"`
	// The leader's live heap before the waiters came, with all queued, and
	// once they left; BytesPerConn is (queued − left) per connection.
	HeapBeforeBytes float64 `json:"heap_before_bytes"`
	HeapAfterBytes  float64 `json:"heap_after_bytes"`
	HeapLeftBytes   float64 `json:"heap_left_bytes"`
	BytesPerConn    float64 `json:"bytes_per_conn"`
	QueueSeconds    float64 `json:"queue_s"`
	// Granted one-key waiters, in the order of their grants; InOrder:
	// that order is their arrival order. FirstOutOfOrder is the first
	// grant (its position) that broke it, -1 when none did.
	Granted         int     `json:"granted"`
	InOrder         bool    `json:"in_order"`
	FirstOutOfOrder int     `json:"first_out_of_order"`
	ReleaseSeconds  float64 `json:"release_s"`
	// Unexpected counts grants of held keys to own-key waiters: a lease
	// lost or mutual exclusion broken.
	Unexpected int `json:"unexpected_grants"`
}

// ScaleSnapshot is a snapshot taken on demand on the leader.
type ScaleSnapshot struct {
	RequestMs     float64 `json:"request_ms"`
	ServerSeconds float64 `json:"server_s"` // lockgate_raft_snapshot_seconds; -1 absent
}

// ScaleRestore is a follower's restart.
type ScaleRestore struct {
	Node string `json:"node"`
	// ServeMs is from its start to it knowing a leader; CaughtUpMs to its
	// applied index reaching the leader's commit index of the restart.
	ServeMs       float64 `json:"serve_ms"`
	CaughtUpMs    float64 `json:"caught_up_ms"`
	ServerSeconds float64 `json:"server_s"` // lockgate_raft_restore_seconds; -1 absent
}

// ScaleFailover is the leader's SIGKILL.
type ScaleFailover struct {
	Killed    string  `json:"killed"`
	NewLeader string  `json:"new_leader,omitempty"`
	GrantMs   float64 `json:"first_grant_ms"` // kill → first grant of an acquire sent after it
	Granted   bool    `json:"granted"`
}

// ScaleStorm is the expiry storm.
type ScaleStorm struct {
	Leases int `json:"leases"`
	// From the last renewal burst: the first expiry seen (locks count
	// falling), the table emptied; WindowMs between the two.
	FirstExpiryMs float64 `json:"first_expiry_ms"`
	EmptiedMs     float64 `json:"emptied_ms"`
	WindowMs      float64 `json:"window_ms"`
	Emptied       bool    `json:"emptied"`
	LocksLeft     float64 `json:"locks_left"`
}

// ScaleSample is one /metrics sample of the leader.
type ScaleSample struct {
	T         float64 `json:"t_s"`
	Phase     string  `json:"phase"`
	Leader    string  `json:"leader"`
	HeapInuse float64 `json:"heap_inuse"`
	HeapAlloc float64 `json:"heap_alloc"`
	// HeapLive is the live heap at the last collection (next GC goal / 2).
	HeapLive      float64 `json:"heap_live"`
	Locks         float64 `json:"locks"`           // -1 absent
	Sessions      float64 `json:"sessions"`        // -1 absent
	BytesPerLease float64 `json:"bytes_per_lease"` // -1 outside the holding phases
	RenewPerSec   float64 `json:"renewals_per_s"`  // -1 absent
	EntriesPerSec float64 `json:"entries_per_s"`   // -1 absent
	// The counters the rates come from (-1 absent).
	RenewTotal   float64 `json:"renewals_total"`
	EntriesTotal float64 `json:"entries_total"`
}

// ScaleGoal is one of the scale bench's goals with what was measured.
type ScaleGoal struct {
	Goal     string `json:"goal"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	// Status: "met", "not met", or "n/a" (not measured here; Measured
	// says why).
	Status string `json:"status"`
	// Safety goals fail the run (exit status) when not met.
	Safety bool `json:"safety,omitempty"`
}

// Failed lists the safety goals not met: leases lost, FIFO broken.
func (rep *ScaleReport) Failed() []string {
	var out []string
	for _, g := range rep.Goals {
		if g.Safety && g.Status == "not met" {
			out = append(out, g.Goal+": "+g.Measured)
		}
	}
	return out
}

func (rep *ScaleReport) phase(name string) *ScalePhase {
	for i := range rep.Phases {
		if rep.Phases[i].Name == name {
			return &rep.Phases[i]
		}
	}
	return nil
}

func status(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

// goals judges the run against the scale bench's goals.
func (rep *ScaleReport) goals() {
	var g []ScaleGoal
	add := func(goal, target, measured, st string, safety bool) {
		g = append(g, ScaleGoal{Goal: goal, Target: target, Measured: measured, Status: st, Safety: safety})
	}
	lost := rep.LostLeases + rep.LostSessions
	add("leases lost", "0", fmt.Sprintf("%d leases, %d sessions", rep.LostLeases, rep.LostSessions), status(lost == 0), true)
	if w := rep.WaitersR; w != nil {
		add("one-key waiters granted in arrival order", "all", fmt.Sprintf("%d granted, in order: %s", w.Granted, report.YesNo(w.InOrder)), status(w.InOrder && w.Granted == rep.Waiters), true)
		add("held keys granted to waiters", "0", fmt.Sprint(w.Unexpected), status(w.Unexpected == 0), true)
		add("gateway bytes per waiting connection", "≤ 32 KiB", fmt.Sprintf("%.0f B", w.BytesPerConn), status(w.BytesPerConn > 0 && w.BytesPerConn <= 32<<10), false)
	} else if rep.Waiters > 0 {
		add("waiting connections, FIFO", "—", "does not apply to "+rep.Backend, "n/a", false)
	}
	if rep.HeapPerLease != 0 {
		add("leader heap per lease", "≤ 400 B", fmt.Sprintf("%.0f B loaded, %.0f B after holding", rep.HeapPerLease, rep.HeapPerLeaseHeld), status(max(rep.HeapPerLease, rep.HeapPerLeaseHeld) <= 400), false)
	} else {
		add("leader heap per lease", "≤ 400 B", "the leader serves no go_memstats_heap_inuse_bytes", "n/a", false)
	}
	if rep.RenewalsPerSec >= 0 {
		add("renewal entries per second", fmt.Sprintf("≤ sessions/(TTL/3) = %.1f", rep.RenewalGoal), fmt.Sprintf("%.1f (%s)", rep.RenewalsPerSec, rep.RenewalSource), status(rep.RenewalsPerSec <= rep.RenewalGoal), false)
	} else {
		add("renewal entries per second", fmt.Sprintf("≤ %.1f", rep.RenewalGoal), "not measured: "+rep.RenewalSource, "n/a", false)
	}
	idle, load, storm := rep.phase(PhaseIdle), rep.phase(PhaseLoad), rep.phase(PhaseStorm)
	if idle != nil && load != nil && idle.Ops > 0 && load.Ops > 0 {
		add("background p99 under load", fmt.Sprintf("≤ 3 × idle p99 (%.1f ms)", idle.LatencyUS.P99/1000), fmt.Sprintf("%.1f ms (%.2f ×)", load.LatencyUS.P99/1000, load.LatencyUS.P99/idle.LatencyUS.P99), status(load.LatencyUS.P99 <= 3*idle.LatencyUS.P99), false)
	} else {
		add("background p99 under load", "≤ 3 × idle p99", "no grants measured", "not met", false)
	}
	if storm != nil && storm.Ops > 0 {
		add("background p99 during the expiry storm", "≤ 500 ms", fmt.Sprintf("%.1f ms", storm.LatencyUS.P99/1000), status(storm.LatencyUS.P99 <= 500e3), false)
	} else {
		add("background p99 during the expiry storm", "≤ 500 ms", "no grants measured", "not met", false)
	}
	if st := rep.Storm; st != nil {
		add("lock table empties after the storm", "empty", fmt.Sprintf("%.0f ms after the last renewal (TTL %.0f ms), window %.0f ms", st.EmptiedMs, rep.TTLMs, st.WindowMs), status(st.Emptied), false)
	}
	if s := rep.Snapshot; s != nil && s.ServerSeconds >= 0 {
		add("snapshot", "≤ 5 s", fmt.Sprintf("%.2f s (request %.0f ms)", s.ServerSeconds, s.RequestMs), status(s.ServerSeconds <= 5), false)
	} else if s != nil {
		add("snapshot", "≤ 5 s", fmt.Sprintf("request %.0f ms (no lockgate_raft_snapshot_seconds)", s.RequestMs), status(s.RequestMs <= 5000), false)
	} else {
		add("snapshot", "≤ 5 s", "not measured (see notes)", "n/a", false)
	}
	if rs := rep.Restore; rs != nil {
		m := fmt.Sprintf("serves in %.0f ms, caught up in %.0f ms", rs.ServeMs, rs.CaughtUpMs)
		if rs.ServerSeconds >= 0 {
			m += fmt.Sprintf(", restore %.2f s", rs.ServerSeconds)
		}
		add("restarted follower serves", "≤ 5 s", m, status(rs.CaughtUpMs <= 5000 && rs.CaughtUpMs > 0), false)
	} else {
		add("restarted follower serves", "≤ 5 s", "not measured (see notes)", "n/a", false)
	}
	if f := rep.Failover; f != nil {
		add("leader SIGKILL → first grant on the new leader", "≤ 5 s", fmt.Sprintf("%.0f ms", f.GrantMs), status(f.Granted && f.GrantMs <= 5000), false)
	} else {
		add("leader SIGKILL → first grant on the new leader", "≤ 5 s", "not measured (see notes)", "n/a", false)
	}
	rep.Goals = g
}

// WriteTable prints the goals as a table, the phases' latencies, and the
// goals again as a markdown table (docs/benchmarks.md's).
func (rep *ScaleReport) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "%s: %d leases in %d sessions (%s) over %d connections, %d + %d waiting connections, TTL %.0f s, held %.0f s\n",
		rep.Backend, rep.Leases, rep.Sessions, rep.SessionMode, rep.Connections, rep.Waiters, rep.Waiters, rep.TTLMs/1000, rep.DurationS)
	fmt.Fprintf(w, "loaded in %.1f s (%.0f leases/s); leader live heap %.1f MB idle, %.1f MB loaded\n\n", rep.LoadSeconds, rep.LoadRate, rep.HeapIdleBytes/1e6, rep.HeapLoadedBytes/1e6)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PHASE\tSECONDS\tGRANTS\tERRORS\tP50 ms\tP99 ms\tMAX ms")
	for _, p := range rep.Phases {
		fmt.Fprintf(tw, "%s\t%.1f\t%d\t%d\t%.2f\t%.2f\t%.2f\n", p.Name, p.Seconds, p.Ops, p.Errors, p.LatencyUS.P50/1000, p.LatencyUS.P99/1000, p.LatencyUS.Max/1000)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GOAL\tTARGET\tMEASURED\tSTATUS")
	for _, g := range rep.Goals {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", g.Goal, g.Target, g.Measured, g.Status)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintln(w, "\nmarkdown (docs/benchmarks.md):")
	return rep.WriteMarkdown(w)
}

// WriteMarkdown writes the goals as the markdown table of
// docs/benchmarks.md's Scale section.
func (rep *ScaleReport) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "`%s` (%s, %d × %s, %s)\n\n", rep.Command, rep.Backend, rep.Machine.Cores, rep.Machine.CPU, rep.Machine.Time.Format("2006-01-02"))
	b.WriteString("| goal | target | measured | status |\n|---|---|---|---|\n")
	for _, g := range rep.Goals {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", g.Goal, g.Target, strings.ReplaceAll(g.Measured, "|", "\\|"), g.Status)
	}
	b.WriteString("\n| phase | s | grants | errors | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|---|---|\n")
	for _, p := range rep.Phases {
		fmt.Fprintf(&b, "| %s | %.1f | %d | %d | %.2f | %.2f | %.2f |\n", p.Name, p.Seconds, p.Ops, p.Errors, p.LatencyUS.P50/1000, p.LatencyUS.P99/1000, p.LatencyUS.Max/1000)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report as indented JSON.
func (rep *ScaleReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteHTML writes a self-contained HTML report: the goals, memory per
// lease and renewal entries per second over time, the background
// latency per phase and the failover.
func (rep *ScaleReport) WriteHTML(w io.Writer) error {
	page := report.NewPage("lockgate-bench scale")
	page.AddCharts(rep.memoryChart(), rep.renewalChart(), rep.latencyChart())
	if f := rep.Failover; f != nil {
		c := charts.NewBar()
		c.SetGlobalOptions(
			charts.WithInitializationOpts(opts.Initialization{Width: "1000px", Height: "260px"}),
			charts.WithAnimation(false),
			charts.WithTitleOpts(opts.Title{Title: "failover", Subtitle: "ms from the leader's SIGKILL to the first grant on the new leader (goal ≤ 5000)"}),
		)
		c.SetXAxis([]string{"failover"}).AddSeries("ms", []opts.BarData{{Value: report.RoundTo(f.GrantMs, 0)}})
		page.AddCharts(c)
	}
	var buf bytes.Buffer
	if err := page.Render(&buf); err != nil {
		return err
	}
	return report.WriteInlined(w, buf.String(), rep.htmlHeader())
}

func (rep *ScaleReport) memoryChart() *charts.Line {
	c := charts.NewLine()
	c.SetGlobalOptions(
		charts.WithInitializationOpts(opts.Initialization{Width: "1000px", Height: "360px"}),
		charts.WithAnimation(false),
		charts.WithTitleOpts(opts.Title{Title: "leader memory", Subtitle: "heap in use (MB) and, while the leases are held, heap growth per lease (B; goal ≤ 400)"}),
		charts.WithXAxisOpts(opts.XAxis{Type: "value", Name: "s"}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "axis"}),
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(true), Right: "10px"}),
	)
	var heap, per []opts.LineData
	for _, s := range rep.Samples {
		heap = append(heap, opts.LineData{Value: []float64{report.RoundTo(s.T, 1), report.RoundTo(s.HeapInuse/1e6, 1)}})
		if s.BytesPerLease >= 0 {
			per = append(per, opts.LineData{Value: []float64{report.RoundTo(s.T, 1), report.RoundTo(s.BytesPerLease, 0)}})
		}
	}
	c.AddSeries("heap in use, MB", heap).AddSeries("bytes per lease", per)
	return c
}

func (rep *ScaleReport) renewalChart() *charts.Line {
	c := charts.NewLine()
	c.SetGlobalOptions(
		charts.WithInitializationOpts(opts.Initialization{Width: "1000px", Height: "320px"}),
		charts.WithAnimation(false),
		charts.WithTitleOpts(opts.Title{Title: "log entries per second", Subtitle: fmt.Sprintf("renewal entries (goal ≤ %.1f/s) and every entry, on the leader", rep.RenewalGoal)}),
		charts.WithXAxisOpts(opts.XAxis{Type: "value", Name: "s"}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "axis"}),
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(true), Right: "10px"}),
	)
	var renew, all []opts.LineData
	for _, s := range rep.Samples {
		if s.RenewPerSec >= 0 {
			renew = append(renew, opts.LineData{Value: []float64{report.RoundTo(s.T, 1), report.RoundTo(s.RenewPerSec, 1)}})
		}
		if s.EntriesPerSec >= 0 {
			all = append(all, opts.LineData{Value: []float64{report.RoundTo(s.T, 1), report.RoundTo(s.EntriesPerSec, 1)}})
		}
	}
	c.AddSeries("renewal entries/s", renew).AddSeries("all entries/s", all)
	return c
}

func (rep *ScaleReport) latencyChart() *charts.Bar {
	c := charts.NewBar()
	c.SetGlobalOptions(
		charts.WithInitializationOpts(opts.Initialization{Width: "1000px", Height: "320px"}),
		charts.WithAnimation(false),
		charts.WithTitleOpts(opts.Title{Title: "background workload: grant latency", Subtitle: "ms per phase (goals: load p99 ≤ 3 × idle p99; storm p99 ≤ 500 ms)"}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true)}),
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(true), Right: "10px"}),
	)
	var names []string
	var p50, p99, p999 []opts.BarData
	for _, p := range rep.Phases {
		names = append(names, p.Name)
		p50 = append(p50, opts.BarData{Value: report.RoundTo(p.LatencyUS.P50/1000, 2)})
		p99 = append(p99, opts.BarData{Value: report.RoundTo(p.LatencyUS.P99/1000, 2)})
		p999 = append(p999, opts.BarData{Value: report.RoundTo(p.LatencyUS.P999/1000, 2)})
	}
	c.SetXAxis(names).AddSeries("p50", p50).AddSeries("p99", p99).AddSeries("p99.9", p999)
	return c
}

func (rep *ScaleReport) htmlHeader() string {
	var b strings.Builder
	esc := html.EscapeString
	b.WriteString(`<div style="font-family:sans-serif;max-width:1000px;margin:1em auto">`)
	b.WriteString("<h1>lockgate-bench scale</h1>\n")
	if rep.Command != "" {
		fmt.Fprintf(&b, "<p><code>%s</code></p>\n", esc(rep.Command))
	}
	m := rep.Machine
	fmt.Fprintf(&b, "<p>%s · %s/%s · %s × %d cores · %s</p>\n", esc(m.Host), esc(m.OS), esc(m.Arch), esc(m.CPU), m.Cores, m.Time.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "<p>%s: %d leases in %d sessions (%s) over %d connections; %d waiting connections on keys of their own and %d on one key; TTL %.0f s; held %.0f s; loaded in %.1f s.</p>\n",
		esc(rep.Backend), rep.Leases, rep.Sessions, esc(rep.SessionMode), rep.Connections, rep.Waiters, rep.Waiters, rep.TTLMs/1000, rep.DurationS, rep.LoadSeconds)
	var rows [][]string
	for _, g := range rep.Goals {
		rows = append(rows, []string{g.Goal, g.Target, g.Measured, g.Status})
	}
	b.WriteString(report.HTMLTable("goals", []string{"goal", "target", "measured", "status"}, rows))
	rows = nil
	for _, p := range rep.Phases {
		rows = append(rows, []string{p.Name, fmt.Sprintf("%.1f", p.Seconds), fmt.Sprint(p.Ops), fmt.Sprint(p.Errors),
			fmt.Sprintf("%.2f", p.LatencyUS.P50/1000), fmt.Sprintf("%.2f", p.LatencyUS.P99/1000), fmt.Sprintf("%.2f", p.LatencyUS.Max/1000)})
	}
	b.WriteString(report.HTMLTable("phases", []string{"phase", "s", "grants", "errors", "p50 ms", "p99 ms", "max ms"}, rows))
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "<p><i>note:</i> %s</p>\n", esc(n))
	}
	b.WriteString("</div>\n")
	return b.String()
}
