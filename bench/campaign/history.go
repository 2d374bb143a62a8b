package campaign

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/lockgate/lockgate/check"
)

// HistoryFormat names the JSON layout of a campaign's history file.
const HistoryFormat = "lockgate-chaos-history/1"

// historyFile is a campaign written out whole: its report (configuration,
// command, fault log and verdicts), the fault timeline the checkers use,
// and every operation the clients recorded. `lockgate-bench check` loads
// it and runs the checkers again.
type historyFile struct {
	Format   string        `json:"format"`
	Report   *ChaosReport  `json:"report"`
	Timeline []check.Fault `json:"timeline"`
	Ops      check.History `json:"ops"`
	// Observations and Watches are an election campaign's observers'
	// reports and watches (check.Elections).
	Observations []check.Observation  `json:"observations,omitempty"`
	Watches      []check.WatchSession `json:"watches,omitempty"`
}

// WriteHistory writes the whole campaign, every operation and the fault
// timeline with its report, as JSON: the input of LoadHistory and of
// `lockgate-bench check`.
func (r *ChaosReport) WriteHistory(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(historyFile{Format: HistoryFormat, Report: r, Timeline: r.faults, Ops: r.history,
		Observations: r.observations, Watches: r.watches}); err != nil {
		return err
	}
	return bw.Flush()
}

// SaveHistory writes the history (WriteHistory) to path, through a
// temporary file renamed into place.
func (r *ChaosReport) SaveHistory(path string) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := r.WriteHistory(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// LoadHistory reads a history file that WriteHistory wrote. The report
// holds the verdicts the campaign recorded; Recheck runs the checkers
// again.
func LoadHistory(path string) (*ChaosReport, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var hf historyFile
	if err := json.NewDecoder(bufio.NewReaderSize(f, 1<<20)).Decode(&hf); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if hf.Format != HistoryFormat || hf.Report == nil {
		return nil, fmt.Errorf("%s: not a campaign history (format %q, want %q)", path, hf.Format, HistoryFormat)
	}
	if len(hf.Timeline) != len(hf.Report.Injected) {
		return nil, fmt.Errorf("%s: %d faults in the timeline, %d injected", path, len(hf.Timeline), len(hf.Report.Injected))
	}
	r := hf.Report
	r.history, r.faults = hf.Ops, hf.Timeline
	r.observations, r.watches = hf.Observations, hf.Watches
	return r, nil
}

// Recheck returns a copy of the report with every checker run again over
// its history (as loaded by LoadHistory).
func (r *ChaosReport) Recheck() *ChaosReport {
	c := *r
	c.Injected = append([]FaultEvent(nil), r.Injected...)
	if r.Election != nil {
		el := *r.Election
		c.Election = &el
	}
	c.check()
	return &c
}

// Verdicts are the checkers' verdicts of a report, one line each, in a
// fixed order: two reports of the same history give the same lines.
func (r *ChaosReport) Verdicts() []string {
	v := []string{
		fmt.Sprintf("cycles %d", r.Cycles),
		fmt.Sprintf("overlaps %d", r.Overlaps),
		fmt.Sprintf("stale_writes_accepted %d", r.StaleWritesAccepted),
		fmt.Sprintf("stale_writes_rejected %d", r.StaleWritesRejected),
		fmt.Sprintf("unfenced_conflicts %d", r.UnfencedConflicts),
		fmt.Sprintf("token_check %s", r.TokenCheck),
		fmt.Sprintf("tokens_reused %d", r.TokensReused),
		fmt.Sprintf("token_regressions %d", r.TokenRegressions),
		fmt.Sprintf("linearizable %v (%s; not Ok: %s; %d of %d keys unknown)", r.Linearizable, r.Linearizability,
			strings.Join(r.NotLinearizableKeys, ","), r.LinearizabilityUnknownKeys, r.LinearizabilityKeys),
		fmt.Sprintf("max_recovery_s %.3f", r.MaxRecoveryS),
		fmt.Sprintf("valid %v", r.Valid),
	}
	if r.Holds != "" && r.Holds != ChaosExclusive {
		v = append(v, fmt.Sprintf("holds %s (permit_excess %d, mode_token_violations %d, shared_keys %d)",
			r.Holds, r.PermitExcess, r.ModeTokenViolations, r.SharedKeys))
	}
	if t := r.readsText(); t != "" {
		v = append(v, "reads "+t)
	}
	if el := r.Election; el != nil {
		v = append(v, fmt.Sprintf("election terms %d, reports %d, vacant %d, watches %d, rewatches %d, seen %d, missed_during_rewatch %d, before_sync %d, unseen %d, order_violations %d, phantom_tokens %d (explained %d)",
			el.Terms, el.Reports, el.Vacant, el.Watches, el.Rewatches, el.Seen, el.MissedDuringRewatch, el.BeforeSync, el.Unseen, el.OrderViolations, el.PhantomTokens, el.PhantomsExplained))
	}
	for _, f := range r.Failures() {
		v = append(v, "FAILED "+f)
	}
	return v
}
