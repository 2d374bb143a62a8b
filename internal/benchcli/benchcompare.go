package benchcli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/bench/latency"
)

func newBenchCompareCmd() *cobra.Command {
	var margin float64
	cmd := &cobra.Command{
		Use:   "compare OLD.json NEW.json",
		Short: "Set two latency reports' same-run ratios side by side; fail on a regression",
		Long: `Read two reports that 'lockgate-bench latency --json' wrote, an earlier
one and a later one, and print each figure that does not depend on the
machine's speed beside its old value: for each comparison, ours over the
peer (p50 ratio: lower is better; ops ratio: higher is better); for each
run, its p50 and ops/s as multiples of the physical floor measured in
the same rounds (lower is better), and its CPU time per operation (the
servers', the leader's, the client's and all of it together; lower is
better) where both reports have it. Each is marked better or worse;
WORSE when it got worse by more than --margin: above old × (1 + margin)
when lower is better, below old × (1 − margin) when higher is. Figures in
only one report (a backend or workload added or dropped) are listed, not
failed.

The exit status is 1 when a figure is WORSE. 'lockgate-bench latency
--compare OLD.json' does the same after a run. Compare runs made in one
session, before and after a change, on the same machine.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkMargin(margin); err != nil {
				return err
			}
			old, err := latency.LoadReport(args[0])
			if err != nil {
				return err
			}
			cur, err := latency.LoadReport(args[1])
			if err != nil {
				return err
			}
			return compareReports(cmd.OutOrStdout(), old, cur, margin)
		},
	}
	cmd.Flags().Float64Var(&margin, "margin", latency.DefaultMargin, "how much worse (a fraction: 0.15 is 15%) a figure may get before it fails")
	return cmd
}

// checkMargin refuses a margin CompareReports cannot use.
func checkMargin(m float64) error {
	if m < 0 || m >= 1 {
		return fmt.Errorf("margin %v: want a fraction, at least 0 and below 1 (0.15 is 15%%)", m)
	}
	return nil
}

// compareReports prints cur's figures beside old's and fails when one got
// worse by more than margin.
func compareReports(w io.Writer, old, cur *latency.Report, margin float64) error {
	g, err := latency.CompareReports(old, cur, margin)
	if err != nil {
		return err
	}
	if err := g.WriteTable(w); err != nil {
		return err
	}
	return g.Err()
}
