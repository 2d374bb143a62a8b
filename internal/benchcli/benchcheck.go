package benchcli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/bench/campaign"
	"github.com/lockgate/lockgate/bench/report"
)

func newBenchCheckCmd() *cobra.Command {
	var (
		linPath string
		budget  campaign.CheckBudget
	)
	cmd := &cobra.Command{
		Use:   "check FILE",
		Short: "Run the chaos checkers again on a campaign's history file",
		Long: `Load a history that 'lockgate-bench chaos' wrote (--history, or on its own
when a campaign failed): every operation the clients recorded, the fault
timeline and the campaign's configuration. Run every checker on it again
(overlaps, stale writes, tokens, linearizability per key, availability) and
print the verdicts beside the ones the campaign recorded.

--key checks only that key's operations (repeat it for more), with the
linearizability search bounded by --key-budget per key, --check-budget in
all and --memory-budget MiB of heap: a key the campaign could not check can
be given more. A key that runs out of a budget is not checked, which fails
the check unless --tolerate-unchecked allows that fraction of the keys.

The exit status is 1 when a checker fails, as for 'lockgate-bench chaos'.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			recorded, err := campaign.LoadHistory(args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(cmd.ErrOrStderr(), "checking %s: %s, seed %d\n", args[0], recorded.Backend, recorded.Seed)
			if recorded.Command != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "recorded by: %s\n", recorded.Command)
			}
			if !cmd.Flags().Changed("tolerate-unchecked") {
				budget.TolerateUnchecked = recorded.TolerateUnchecked
			}
			if mib, _ := cmd.Flags().GetInt64("memory-budget"); mib > 0 {
				budget.Memory = mib << 20
			}
			rep := recorded.RecheckWith(budget)
			if err := rep.WriteTable(out); err != nil {
				return err
			}
			fmt.Fprintln(out)
			before, after := recorded.Verdicts(), rep.Verdicts()
			same := strings.Join(before, "\n") == strings.Join(after, "\n")
			for _, v := range after {
				fmt.Fprintf(out, "verdict  %s\n", v)
			}
			if same {
				fmt.Fprintln(out, "the verdicts are the campaign's")
			} else {
				fmt.Fprintln(out, "the verdicts differ from the campaign's, which were:")
				for _, v := range before {
					fmt.Fprintf(out, "recorded %s\n", v)
				}
			}
			if linPath != "" {
				if err := report.WriteFile(linPath, rep.WriteLinearizability); err != nil {
					return err
				}
			}
			if f := rep.Failures(); len(f) > 0 {
				return fmt.Errorf("checks failed: %s", strings.Join(f, "; "))
			}
			if !rep.Valid {
				return errors.New("invalid campaign: the faults expected to break mutual exclusion produced no overlap")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&budget.Keys, "key", nil, "check only this key (repeatable)")
	f.DurationVar(&budget.PerKey, "key-budget", campaign.LinearizabilityKeyBudget, "time bound of one key's linearizability search")
	f.DurationVar(&budget.Total, "check-budget", campaign.LinearizabilityBudget, "time bound of the linearizability search of all keys")
	f.Int64("memory-budget", campaign.LinearizabilityMemoryBudget>>20, "bound of the checking process's live heap, MiB: past it the largest running search is given up")
	f.Float64Var(&budget.TolerateUnchecked, "tolerate-unchecked", 0, "fraction of the keys that may go unchecked (default 0: none; unset: the campaign's)")
	cmd.Flags().StringVar(&linPath, "linearizability-html", "", "write porcupine's visualisation of the keys that were not linearizable (all keys if none) here")
	return cmd
}
