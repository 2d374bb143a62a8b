package election

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/lockgate/lockgate/bench/report"
)

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
		rep.P50Ms, rep.MaxMs, rep.TTLMs, rep.CommitP50Ms, rep.BoundMs, rep.Within, len(rep.Kills), report.YesNo(rep.Met))
	return tw.Flush()
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
	b.WriteString(`<!DOCTYPE html><html><head><meta charset="utf-8"><title>lockgate-bench election</title></head><body>`)
	b.WriteString(`<div style="font-family:sans-serif;max-width:1000px;margin:1em auto"><h1>lockgate-bench election</h1>` + "\n")
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
			k.Next, fmt.Sprint(k.NextToken), fmt.Sprintf("%.0f", k.FailoverMs), fmt.Sprintf("%.0f", k.SelfMs), report.YesNo(k.Elected && k.FailoverMs <= rep.BoundMs)})
	}
	b.WriteString(report.HTMLTable("kills", []string{"kill", "killed", "token", "led ms", "vacant ms", "next", "token", "failover ms", "self ms", "within bound"}, rows))
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "<p><i>note:</i> %s</p>\n", esc(n))
	}
	b.WriteString("</div></body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
