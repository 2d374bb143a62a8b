// Package matrix is `lockgate-bench matrix`: latency and fault campaigns
// of every backend, ours and the peer libraries, in one report with a
// decision table.
package matrix

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lockgate/lockgate/bench/campaign"
	"github.com/lockgate/lockgate/bench/faults"
	"github.com/lockgate/lockgate/bench/latency"
	"github.com/lockgate/lockgate/bench/provision"
)

// MatrixConfig configures RunMatrix: the latency workloads over every
// backend, then one fault campaign per backend × fault that applies to it.
type MatrixConfig struct {
	// Backends to measure (default: every backend and peer, Backends).
	Backends []string
	// Faults to inject, each in a campaign of its own (default:
	// MatrixFaults).
	Faults []string
	// Latency configures the latency part; its Backends are Backends.
	Latency latency.LatencyConfig
	// Campaign is each campaign's length (default 20 s); the clients run
	// on RecoveryGrace past the last heal.
	Campaign time.Duration
	Seed     uint64
	// Lockgate is the lockgate binary (raftlock nodes run as processes).
	Lockgate string
	// Log receives the servers' output; Progress a line per step.
	Log, Progress io.Writer
	// Command is the command line, for the report.
	Command string
}

// ShortMatrix is the matrix's short form: every backend and peer under
// MatrixFaults, short enough (8 minutes on a 2-core machine) to run before
// a decision rather than overnight.
func ShortMatrix() MatrixConfig {
	return MatrixConfig{
		Latency: latency.LatencyConfig{Workloads: []string{latency.Sequential, latency.Parallel, latency.Contended}, Clients: 8, Duration: 2 * time.Second, Rounds: 1},
		// 8 s: the schedule's first fault comes 2–4 s in, and none
		// starts in the last 3 s, so every campaign injects one at least.
		Campaign: 8 * time.Second,
		Seed:     1,
	}
}

// MatrixFaults are the matrix's faults by default: those that apply to
// every kind of server, so that each column compares every backend. The
// nemeses of one backend (raftlock's partition shapes, membership changes,
// disk full, …) belong to its own campaigns (`lockgate-bench chaos --faults all`).
var MatrixFaults = []string{faults.Kill, faults.Pause, faults.Partition, faults.Clock, faults.ClientPause}

// MatrixReport is the outcome of RunMatrix; its JSON form is the schema of
// `lockgate-bench matrix --json`.
type MatrixReport struct {
	Command string          `json:"command,omitempty"`
	Latency *latency.Report `json:"latency"`
	// Cells are the campaigns, backend × fault.
	Cells []MatrixCell `json:"cells"`
	// Decisions are derived from the latency runs and the cells.
	Decisions []Decision `json:"decisions"`
}

// MatrixCell is one campaign: one fault on one backend.
type MatrixCell struct {
	Backend string `json:"backend"`
	Fault   string `json:"fault"`
	// Skipped says why the fault does not apply to the backend.
	Skipped string `json:"skipped,omitempty"`
	// Injected counts the faults the campaign injected.
	Injected            int     `json:"injected"`
	Cycles              int     `json:"cycles"`
	Overlaps            int     `json:"overlaps"`
	StaleWritesAccepted int     `json:"stale_writes_accepted"`
	StaleWritesRejected int     `json:"stale_writes_rejected"`
	Fenced              bool    `json:"fenced"`
	Linearizable        bool    `json:"linearizable"`
	UnavailableS        float64 `json:"unavailable_s"`
	MaxRecoveryS        float64 `json:"max_recovery_s"`
	// ExpectedToBreak: the fault is known to break mutual exclusion on the
	// backend (Fault.BreaksSafety).
	ExpectedToBreak bool `json:"expected_to_break"`
	// Valid is false when the campaign injected nothing, or a fault
	// expected to break the backend showed no overlap: it then tested
	// nothing (ChaosReport.Valid).
	Valid bool `json:"valid"`
}

// Decision is one backend's row of the decision table.
type Decision struct {
	Backend string         `json:"backend"`
	Mode    string         `json:"mode"`
	Caps    provision.Caps `json:"caps"`
	// SeqP50US and ContendedOps are from the latency runs (direct path).
	SeqP50US     float64 `json:"sequential_p50_us"`
	ContendedOps float64 `json:"contended_ops_per_sec"`
	// BrokenBy lists the faults under which the campaign saw overlaps.
	BrokenBy []string `json:"broken_by,omitempty"`
	// StaleWritesAccepted sums the fenced store's acceptances of stale
	// writes over the backend's campaigns.
	StaleWritesAccepted int `json:"stale_writes_accepted"`
	// Verdict says in a sentence what the backend is fit for.
	Verdict string `json:"verdict"`
}

// RunMatrix runs the latency workloads over cfg.Backends (servers started
// once, every backend measured in the same rounds), then, per backend, its
// servers behind proxies and one campaign per fault that applies to it.
func RunMatrix(ctx context.Context, cfg MatrixConfig) (*MatrixReport, error) {
	if len(cfg.Backends) == 0 {
		cfg.Backends = provision.Backends
	}
	if len(cfg.Faults) == 0 {
		cfg.Faults = MatrixFaults
	}
	if cfg.Campaign == 0 {
		cfg.Campaign = 20 * time.Second
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if err := provision.CheckBackends(cfg.Backends); err != nil {
		return nil, err
	}
	for _, f := range cfg.Faults {
		if _, err := faults.ByName(f); err != nil {
			return nil, err
		}
	}
	rep := &MatrixReport{Command: cfg.Command}

	fmt.Fprintf(cfg.Progress, "matrix: latency of %s\n", strings.Join(cfg.Backends, ", "))
	s, err := provision.Provision(ctx, cfg.Backends, provision.ProvisionOptions{Lockgate: cfg.Lockgate, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	lc := cfg.Latency
	lc.Backends, lc.Progress = cfg.Backends, cfg.Progress
	rep.Latency, err = latency.RunLatency(ctx, s, lc)
	s.Close()
	if err != nil {
		return nil, err
	}
	rep.Latency.Command = cfg.Command

	dir, err := os.MkdirTemp("", "lockgate-matrix-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	for _, b := range cfg.Backends {
		cells, err := matrixRow(ctx, cfg, b, dir)
		if err != nil {
			return nil, fmt.Errorf("matrix: %s: %w", b, err)
		}
		rep.Cells = append(rep.Cells, cells...)
	}
	rep.decide()
	return rep, nil
}

// matrixRow runs the campaigns of one backend on one set of its servers.
func matrixRow(ctx context.Context, cfg MatrixConfig, backend, dir string) ([]MatrixCell, error) {
	var cells []MatrixCell
	var tg *campaign.Target
	defer func() {
		if tg != nil {
			tg.Close()
		}
	}()
	for i, name := range cfg.Faults {
		f, _ := faults.ByName(name)
		cell := MatrixCell{Backend: backend, Fault: name, Fenced: provision.InfoOf(backend).Caps.Fencing}
		if err := f.Check(backend); err != nil {
			cell.Skipped = strings.TrimPrefix(err.Error(), faults.ErrUnavailable.Error()+": ")
			cells = append(cells, cell)
			continue
		}
		if tg == nil {
			fmt.Fprintf(cfg.Progress, "matrix: starting %s servers behind proxies\n", backend)
			var err error
			if tg, err = campaign.StartTarget(ctx, backend, cfg.Lockgate, cfg.Log); err != nil {
				return nil, err
			}
		}
		cc := campaign.ChaosConfig{Backend: backend, Faults: []string{name}, Duration: cfg.Campaign, Seed: cfg.Seed,
			Lockgate: cfg.Lockgate, Log: cfg.Log, Progress: cfg.Progress}
		if err := cc.Fill(); err != nil {
			return nil, err
		}
		sub := filepath.Join(dir, fmt.Sprintf("%s-%d", strings.ReplaceAll(backend, ":", "-"), i))
		if err := os.MkdirAll(sub, 0o700); err != nil {
			return nil, err
		}
		fmt.Fprintf(cfg.Progress, "matrix: %s under %s (%v)\n", backend, name, cfg.Campaign)
		r, err := campaign.RunCampaign(ctx, tg, cc, sub)
		if err != nil {
			return nil, err
		}
		cell.Cycles, cell.Overlaps = r.Cycles, r.Overlaps
		cell.StaleWritesAccepted, cell.StaleWritesRejected = r.StaleWritesAccepted, r.StaleWritesRejected
		cell.Linearizable, cell.UnavailableS, cell.MaxRecoveryS = r.Linearizable, r.UnavailableS, r.MaxRecoveryS
		cell.ExpectedToBreak = f.BreaksSafety(backend)
		cell.Injected = len(r.Injected)
		cell.Valid = r.Valid && cell.Injected > 0
		cells = append(cells, cell)
	}
	return cells, nil
}

// decide derives the decision table: per backend, its speed, the faults
// that broke it, and whether its fence caught what they broke.
func (rep *MatrixReport) decide() {
	rep.Decisions = nil
	seen := map[string]bool{}
	for _, r := range rep.Latency.Runs {
		if seen[r.Backend] {
			continue
		}
		seen[r.Backend] = true
		d := Decision{Backend: r.Backend, Mode: r.Mode, Caps: r.Caps}
		for _, x := range rep.Latency.Runs {
			if x.Backend != r.Backend || x.Via != provision.Direct {
				continue
			}
			switch x.Workload {
			case latency.Sequential:
				d.SeqP50US = x.LatencyUS.P50
			case latency.Contended:
				d.ContendedOps = x.OpsPerSec
			}
		}
		tried := 0
		for _, c := range rep.Cells {
			if c.Backend != r.Backend || c.Skipped != "" {
				continue
			}
			tried++
			if c.Overlaps > 0 {
				d.BrokenBy = append(d.BrokenBy, c.Fault)
			}
			d.StaleWritesAccepted += c.StaleWritesAccepted
		}
		d.Verdict = verdict(d, tried)
		rep.Decisions = append(rep.Decisions, d)
	}
}

// verdict says what a backend is fit for, from what the campaigns saw.
func verdict(d Decision, tried int) string {
	switch {
	case tried == 0:
		return "not tried under faults in this run"
	case len(d.BrokenBy) == 0 && d.Caps.Fencing:
		return "held mutual exclusion under every fault tried, with fencing tokens: fit for correctness"
	case len(d.BrokenBy) == 0 && !d.Caps.TTL:
		return "held mutual exclusion under every fault tried, having no TTL: a holder that stops keeps the lock until its connection ends, so a hung client blocks the key; no fencing token"
	case len(d.BrokenBy) == 0:
		return "held mutual exclusion under every fault tried, but gives no fencing token: a paused holder that wakes late can still act"
	case d.Caps.Fencing && d.StaleWritesAccepted == 0:
		return fmt.Sprintf("lost mutual exclusion under %s; its fencing tokens let a fenced resource refuse every late write (0 accepted): fit for correctness only behind a fence",
			strings.Join(d.BrokenBy, ", "))
	case d.Caps.Fencing:
		return fmt.Sprintf("lost mutual exclusion under %s and the fence accepted %d stale writes: not fit for correctness",
			strings.Join(d.BrokenBy, ", "), d.StaleWritesAccepted)
	default:
		return fmt.Sprintf("lost mutual exclusion under %s with no fencing token to catch it: fit for efficiency only (duplicate work is harmless)",
			strings.Join(d.BrokenBy, ", "))
	}
}

// WriteJSON writes the report as indented JSON.
func (rep *MatrixReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteTable writes the decision table and the grid for a terminal.
func (rep *MatrixReport) WriteTable(w io.Writer) error {
	if err := rep.Latency.WriteTable(w); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, c := range rep.Cells {
		fmt.Fprintf(w, "%-22s %-13s %s\n", c.Backend, c.Fault, c.text())
	}
	fmt.Fprintln(w)
	for _, d := range rep.Decisions {
		fmt.Fprintf(w, "%-22s %s\n", d.Backend, d.Verdict)
	}
	return nil
}

// text is a cell's verdicts in one line.
func (c MatrixCell) text() string {
	if c.Skipped != "" {
		return "n/a: " + c.Skipped
	}
	stale := fmt.Sprint(c.StaleWritesAccepted)
	if !c.Fenced {
		stale = "n/a (no fencing)"
	}
	text := fmt.Sprintf("%d injected · cycles %d · overlaps %d · stale accepted %s · linearizable %v · unavailable %.1f s · recovery ≤ %.1f s",
		c.Injected, c.Cycles, c.Overlaps, stale, c.Linearizable, c.UnavailableS, c.MaxRecoveryS)
	if !c.Valid {
		text += " · INVALID: tested nothing"
	}
	return text
}

// WriteHTML writes one self-contained page: the latency report (table,
// modes, comparisons, CDFs), the faults × backends grid and the decision
// table.
func (rep *MatrixReport) WriteHTML(w io.Writer) error {
	var buf bytes.Buffer
	if err := rep.Latency.WriteHTML(&buf); err != nil {
		return err
	}
	page := strings.Replace(buf.String(), "<h1>lockgate-bench latency</h1>", "<h1>lockgate-bench matrix</h1><h2>Latency</h2>", 1)
	const mark = "</body>"
	i := strings.LastIndex(page, mark)
	if i < 0 {
		return fmt.Errorf("bench: the latency page has no %s", mark)
	}
	_, err := io.WriteString(w, page[:i]+rep.gridHTML()+page[i:])
	return err
}

// gridHTML is the faults × backends grid and the decision table.
func (rep *MatrixReport) gridHTML() string {
	esc := html.EscapeString
	var b strings.Builder
	b.WriteString(`<div style="font-family:sans-serif;max-width:1100px;margin:1em auto">`)
	b.WriteString("<h2>Faults × backends</h2>\n<p>One campaign per cell on the backend's servers: cycles, overlaps (mutual exclusion lost), stale writes the fenced store accepted, linearizability, seconds without a grant, worst recovery after a heal. <i>expected</i>: the fault is known to break this backend.</p>\n")
	var faults []string
	seenF := map[string]bool{}
	var backends []string
	seenB := map[string]bool{}
	cell := map[[2]string]MatrixCell{}
	for _, c := range rep.Cells {
		if !seenF[c.Fault] {
			seenF[c.Fault] = true
			faults = append(faults, c.Fault)
		}
		if !seenB[c.Backend] {
			seenB[c.Backend] = true
			backends = append(backends, c.Backend)
		}
		cell[[2]string{c.Backend, c.Fault}] = c
	}
	b.WriteString(`<table id="grid" style="border-collapse:collapse;font-size:12px" border="1" cellpadding="4"><tr><th>backend</th>`)
	for _, f := range faults {
		fmt.Fprintf(&b, "<th>%s</th>", esc(f))
	}
	b.WriteString("</tr>\n")
	for _, be := range backends {
		fmt.Fprintf(&b, "<tr><td>%s</td>", esc(be))
		for _, f := range faults {
			c := cell[[2]string{be, f}]
			style := ""
			switch {
			case c.Skipped != "":
				style = ` style="color:#888"`
			case c.Overlaps > 0 && (c.StaleWritesAccepted > 0 || !c.Fenced):
				style = ` style="background:#fbb"`
			case c.Overlaps > 0:
				style = ` style="background:#fe9"`
			default:
				style = ` style="background:#cfc"`
			}
			text := c.text()
			if c.ExpectedToBreak {
				text += " · expected"
			}
			fmt.Fprintf(&b, "<td%s>%s</td>", style, esc(text))
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</table>\n<h2>Decision table</h2>\n")
	b.WriteString(`<table id="decisions" style="border-collapse:collapse;font-size:13px" border="1" cellpadding="4"><tr><th>backend</th><th>mode</th><th>guarantees</th><th>sequential p50 µs</th><th>contended ops/s</th><th>verdict</th></tr>`)
	for _, d := range rep.Decisions {
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%.0f</td><td>%.0f</td><td>%s</td></tr>\n",
			esc(d.Backend), esc(d.Mode), esc(latency.CapsText(d.Caps)), d.SeqP50US, d.ContendedOps, esc(d.Verdict))
	}
	b.WriteString("</table></div>\n")
	return b.String()
}
