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
	var linPath string
	cmd := &cobra.Command{
		Use:   "check FILE",
		Short: "Run the chaos checkers again on a campaign's history file",
		Long: `Load a history that 'lockgate-bench chaos' wrote (--history, or on its own
when a campaign failed): every operation the clients recorded, the fault
timeline and the campaign's configuration. Run every checker on it again
(overlaps, stale writes, tokens, linearizability per key, availability) and
print the verdicts beside the ones the campaign recorded.

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
			rep := recorded.Recheck()
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
	cmd.Flags().StringVar(&linPath, "linearizability-html", "", "write porcupine's visualisation of the keys that were not linearizable (all keys if none) here")
	return cmd
}
