package latency

import (
	"fmt"
	"html"
	"strings"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
)

// Comparison sets one of our backends beside a peer library on one
// workload and path, in the same run: ratios, not absolute figures, since
// this machine's speed moves 2–3× from day to day.
type Comparison struct {
	Workload string `json:"workload"`
	Via      string `json:"via"`
	// Cache is both runs' lease cache setting.
	Cache string `json:"cache,omitempty"`
	Ours  string `json:"ours"`
	Peer  string `json:"peer"`
	// P50Ratio is our p50 over the peer's: below 1, ours is faster.
	P50Ratio float64 `json:"p50_ratio"`
	// OpsRatio is our ops/s over the peer's: above 1, ours does more.
	OpsRatio float64 `json:"ops_ratio"`
	// Lacks lists what the peer does not guarantee that ours does
	// (fencing, ttl, fifo, inspect).
	Lacks []string `json:"peer_lacks,omitempty"`
}

// compare pairs each of our backends with the peer libraries of its group
// (PeerOf), and raftlock with every peer: raftlock is the lock service a
// user would pick instead of any of them.
func (rep *Report) compare() {
	rep.Comparisons = nil
	for _, ours := range rep.Runs {
		if ours.PeerOf != "" || ours.Variant == TraceVariant { // traced runs: compareTrace
			continue
		}
		name := provision.InfoOf(ours.Backend).Name
		for _, peer := range rep.Runs {
			if peer.PeerOf == "" || peer.Workload != ours.Workload || peer.Via != ours.Via || peer.Cache != ours.Cache || peer.Skipped || ours.Skipped {
				continue
			}
			if peer.PeerOf != name && name != provision.Raft {
				continue
			}
			c := Comparison{Workload: ours.Workload, Via: ours.Via, Cache: ours.Cache, Ours: ours.Backend, Peer: peer.Backend,
				Lacks: lacks(ours.Caps, peer.Caps)}
			if peer.LatencyUS.P50 > 0 {
				c.P50Ratio = ours.LatencyUS.P50 / peer.LatencyUS.P50
			}
			if peer.OpsPerSec > 0 {
				c.OpsRatio = ours.OpsPerSec / peer.OpsPerSec
			}
			rep.Comparisons = append(rep.Comparisons, c)
		}
	}
}

// lacks names what peer does not guarantee and ours does.
func lacks(ours, peer provision.Caps) []string {
	var out []string
	for _, c := range []struct {
		name      string
		has, need bool
	}{
		{"fencing", peer.Fencing, ours.Fencing},
		{"ttl", peer.TTL, ours.TTL},
		{"fifo", peer.FIFO, ours.FIFO},
		{"inspect", peer.Inspect, ours.Inspect},
		{"wanted", peer.Wanted, ours.Wanted},
	} {
		if c.need && !c.has {
			out = append(out, c.name)
		}
	}
	return out
}

// CapsText marks what a backend guarantees: "fencing ttl fifo inspect wanted",
// with "no-" before each that it lacks, and "session" for locks on a
// client session.
func CapsText(c provision.Caps) string {
	var parts []string
	for _, x := range []struct {
		name string
		has  bool
	}{{"fencing", c.Fencing}, {"ttl", c.TTL}, {"fifo", c.FIFO}, {"inspect", c.Inspect}, {"wanted", c.Wanted}} {
		if x.has {
			parts = append(parts, x.name)
		} else {
			parts = append(parts, "no-"+x.name)
		}
	}
	if c.Session {
		parts = append(parts, "session")
	}
	return strings.Join(parts, " ")
}

// modesHTML is the table of the modes the run measured and what each
// guarantees, then the comparisons.
func (rep *Report) modesHTML() string {
	var b strings.Builder
	esc := html.EscapeString
	seen := map[string]bool{}
	b.WriteString("<h2>Modes</h2>\n<p>Each backend as it ran, and what it guarantees (<i>no-</i>: it does not).</p>\n")
	b.WriteString(`<table id="modes" style="border-collapse:collapse;font-size:13px" border="1" cellpadding="4">`)
	b.WriteString("<tr><th>backend</th><th>variant</th><th>peer of</th><th>mode</th><th>guarantees</th></tr>\n")
	for _, r := range rep.Runs {
		if seen[r.Backend] {
			continue
		}
		seen[r.Backend] = true
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
			esc(r.Backend), esc(r.Variant), esc(r.PeerOf), esc(r.Mode), esc(CapsText(r.Caps)))
	}
	b.WriteString("</table>\n")
	if len(rep.Comparisons) == 0 {
		return b.String()
	}
	b.WriteString(`<h2>Ours beside the peers</h2>
<p>Same run, same workloads: <i>p50 ratio</i> is ours over the peer's (below 1: ours is faster), <i>ops ratio</i> ours over
the peer's (above 1: ours does more). <i>peer lacks</i> is what the peer does not guarantee and ours does.</p>
`)
	b.WriteString(`<table id="comparisons" style="border-collapse:collapse;font-size:13px" border="1" cellpadding="4">`)
	b.WriteString("<tr><th>workload</th><th>via</th><th>ours</th><th>peer</th><th>p50 ratio</th><th>ops ratio</th><th>peer lacks</th></tr>\n")
	for _, c := range rep.Comparisons {
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%.2f</td><td>%.2f</td><td>%s</td></tr>\n",
			esc(c.Workload), esc(c.Via), esc(c.Ours), esc(c.Peer), c.P50Ratio, c.OpsRatio, esc(strings.Join(c.Lacks, ", ")))
	}
	b.WriteString("</table>\n")
	return b.String()
}

// comparisonRows are the comparisons as rows for a terminal.
func (rep *Report) comparisonRows() [][]string {
	var rows [][]string
	for _, c := range rep.Comparisons {
		rows = append(rows, []string{c.Workload, c.Via, c.Ours, c.Peer, fmt.Sprintf("%.2f", c.P50Ratio),
			fmt.Sprintf("%.2f", c.OpsRatio), strings.Join(c.Lacks, ",")})
	}
	return rows
}

// CacheComparison sets a cache-on run beside the cache-off run of the same
// backend, path and workload, in the same run.
type CacheComparison struct {
	Backend  string `json:"backend"`
	Via      string `json:"via"`
	Workload string `json:"workload"`
	// OpsRatio is acquisitions/s with the cache over without: above 1,
	// the cache does more.
	OpsRatio float64 `json:"ops_ratio"`
	// P50Ratio and P99Ratio are the latency without the cache over with
	// it: above 1, the cache is faster.
	P50Ratio float64 `json:"p50_ratio"`
	P99Ratio float64 `json:"p99_ratio"`
	// GrantsRatio is the grants the server handed out per second with the
	// cache (its misses) over without (every acquisition): how often a key
	// went to the server — for contended, how often it changed hands.
	// Acquisitions the cache answers are not grants: a holder that takes
	// its own lease again, before the server's "wanted" reaches it, adds
	// to OpsRatio and not to this. Zero for the wanted workload, whose
	// ops are samples of the signal, not acquisitions.
	GrantsRatio float64 `json:"grants_ratio,omitempty"`
	// Stats is what the caches did in the cache-on run.
	Stats CacheStats `json:"cache_stats"`
}

// compareCache pairs every cache-on run with its cache-off run.
func (rep *Report) compareCache() {
	rep.CacheComparisons = nil
	for _, on := range rep.Runs {
		if on.Cache != CacheOn || on.Skipped {
			continue
		}
		for _, off := range rep.Runs {
			if off.Cache != CacheOff || off.Skipped || off.Backend != on.Backend || off.Via != on.Via || off.Workload != on.Workload {
				continue
			}
			c := CacheComparison{Backend: on.Backend, Via: on.Via, Workload: on.Workload,
				OpsRatio: ratio(on.OpsPerSec, off.OpsPerSec),
				P50Ratio: ratio(off.LatencyUS.P50, on.LatencyUS.P50),
				P99Ratio: ratio(off.LatencyUS.P99, on.LatencyUS.P99)}
			if on.CacheStats != nil {
				c.Stats = *on.CacheStats
			}
			if on.CacheStats != nil && on.Workload != Wanted {
				c.GrantsRatio = ratio(float64(c.Stats.Misses)/on.elapsed().Seconds(), float64(off.Ops)/off.elapsed().Seconds())
			}
			rep.CacheComparisons = append(rep.CacheComparisons, c)
		}
	}
}

// cacheRows are the cache comparisons as rows for a terminal.
func (rep *Report) cacheRows() [][]string {
	var rows [][]string
	for _, c := range rep.CacheComparisons {
		grants := "-"
		if c.GrantsRatio > 0 {
			grants = fmt.Sprintf("%.2f", c.GrantsRatio)
		}
		rows = append(rows, []string{c.Workload, c.Backend, c.Via, fmt.Sprintf("%.2f", c.OpsRatio),
			fmt.Sprintf("%.2f", c.P50Ratio), fmt.Sprintf("%.2f", c.P99Ratio),
			grants, fmt.Sprint(c.Stats.Hits), fmt.Sprint(c.Stats.Misses), fmt.Sprint(c.Stats.Reclaimed)})
	}
	return rows
}

// cacheRowsHead heads cacheRows.
var cacheRowsHead = []string{"WORKLOAD", "BACKEND", "VIA", "OPS ON/OFF", "P50 OFF/ON", "P99 OFF/ON", "GRANTS ON/OFF", "HITS", "MISSES", "RECLAIMED"}

// signalRows are the wanted runs' p50 beside their floor, for a terminal.
func (rep *Report) signalRows() [][]string {
	var rows [][]string
	for _, r := range rep.Runs {
		sf := r.Signal
		if sf == nil {
			continue
		}
		met := "no"
		if sf.Within {
			met = "yes"
		}
		rows = append(rows, []string{r.ref(), r.Via, r.Cache, fmt.Sprintf("%.0f", sf.P50US), fmt.Sprintf("%.0f", sf.CommitUS),
			fmt.Sprintf("%.1f", sf.RTTUS), fmt.Sprintf("%.0f", sf.GatewayRTTUS), fmt.Sprintf("%.0f", sf.FloorUS), met})
	}
	return rows
}

// signalRowsHead heads signalRows.
var signalRowsHead = []string{"WANTED", "VIA", "CACHE", "P50 µs", "COMMIT µs", "RTT µs", "GATEWAY µs", "COMMIT+RTT µs", "P50 ≤ FLOOR"}

// elapsed is the measured time of r's rounds together.
func (r *Run) elapsed() time.Duration {
	var d time.Duration
	for _, rr := range r.rounds {
		d += rr.elapsed
	}
	return d
}
