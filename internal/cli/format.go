package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/backend/raftlock/fsm"
)

func newFormatCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "format",
		Short: "Show or lower a raftlock cluster's format gate (rolling upgrades and downgrades)",
		Long: `A raftlock cluster writes its log entries and snapshots in the highest
format every voter reads: the leader asks each voter which formats its
binary reads, and raises the cluster's format gate once all of them read
a higher one. Features that need a format (sessions: 3; shared locks,
semaphores, multi-key acquires and lock-delay: 2) are offered to clients
only from then on. The gate never goes down by itself: to replace nodes
with an older binary, lower it first with 'lockgate format downgrade'
(docs/operations.md, "Upgrades and downgrades").`,
	}
	cmd.AddCommand(newFormatStatusCmd(), newFormatDowngradeCmd(), newFormatResumeCmd())
	return cmd
}

func newFormatStatusCmd() *cobra.Command {
	var (
		af      adminClientFlags
		asJSON  bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print the format gate, what each voter reads, and what clients are offered",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return af.run(cmd, timeout, func(ctx context.Context, mc *raftlock.MembershipClient) error {
				var errs []error
				for _, addr := range af.endpoints {
					st, err := mc.FormatStatus(ctx, addr)
					if err != nil {
						errs = append(errs, err)
						continue
					}
					if asJSON {
						return printJSON(cmd, st)
					}
					printFormatStatus(cmd.OutOrStdout(), st)
					return nil
				}
				return errors.Join(errs...)
			})
		},
	}
	af.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for the answer")
	return cmd
}

func printFormatStatus(w io.Writer, st *raftlock.FormatStatus) {
	fmt.Fprintf(w, "gate: %s\nstate needs format %d (sessions %d with %d leases, shared holders %d, lock-delays %d)\noffered: %s\n",
		st.Gate, st.Needs, st.Drain.Sessions, st.Drain.SessionLeases, st.Drain.Shared, st.Drain.Delays, strings.Join(st.Offered, ","))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VOTER\tREADS")
	for _, v := range st.Voters {
		reads := strconv.Itoa(int(v.Reads))
		if v.Reads == 0 {
			reads = "unknown: " + v.Error
		}
		fmt.Fprintf(tw, "%s\t%s\n", v.ID, reads)
	}
	tw.Flush()
}

func newFormatDowngradeCmd() *cobra.Command {
	var (
		af      adminClientFlags
		to      uint8
		timeout time.Duration
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "downgrade --to N",
		Short: "Lower the cluster's format gate, before replacing nodes with a binary that reads only up to format N",
		Long: `Lower the cluster's format gate to format N (admin credential), in four
steps the leader takes: (1) new work is held to format N's features (a
client asking for more is answered 'unsupported'; the SDKs fall back to
per-lease renewal) and the gate stops rising; (2) the state drains:
sessions that hold no lease are no longer renewed and end at their
expiry, the other sessions, shared holders and lock-delays end as their
holders release or their leases expire; (3) the leader writes only format N from then on; (4) every voter
takes a snapshot past that point, so that a node restarted with an older
binary starts from a snapshot it reads and replays no entry above format
N. The command asks again until all four are done or --timeout passes
(run it again to continue). 'lockgate format resume' ends a downgrade.

A binary released before the format gate reads format 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if to < 1 || to > fsm.MaxFormat {
				return fmt.Errorf("--to %d: want a format from 1 to %d", to, fsm.MaxFormat)
			}
			return af.run(cmd, timeout, func(ctx context.Context, mc *raftlock.MembershipClient) error {
				out := cmd.OutOrStdout()
				for {
					rep, err := changeFormat(ctx, mc, af.endpoints, raftlock.FormatArgs{DowngradeTo: to, WaitMs: min(timeout, 30*time.Second).Milliseconds()})
					if err != nil {
						return err
					}
					if rep.Done {
						if asJSON {
							return printJSON(cmd, rep)
						}
						fmt.Fprintf(out, "done: %s\ngate: %s\n", rep.Message, rep.Gate)
						for id, idx := range rep.Snapshots {
							fmt.Fprintf(out, "  voter %s: snapshot at index %d\n", id, idx)
						}
						return nil
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "%s (sessions %d with %d leases, shared holders %d, lock-delays %d)\n",
						rep.Message, rep.Drain.Sessions, rep.Drain.SessionLeases, rep.Drain.Shared, rep.Drain.Delays)
					select {
					case <-ctx.Done():
						return fmt.Errorf("format downgrade to %d not finished within --timeout %v: %s; run it again to continue", to, timeout, rep.Message)
					case <-time.After(time.Second): // the leader waited already; a pause between asks
					}
				}
			})
		},
	}
	af.register(cmd)
	cmd.Flags().Uint8Var(&to, "to", 0, "the format to lower the gate to: the highest the older binary reads (1 for a binary that predates the gate)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the state to drain")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the final answer as JSON")
	cmd.MarkFlagRequired("to")
	return cmd
}

func newFormatResumeCmd() *cobra.Command {
	var (
		af      adminClientFlags
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "End a downgrade: the gate rises again once every voter reads a higher format",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return af.run(cmd, timeout, func(ctx context.Context, mc *raftlock.MembershipClient) error {
				rep, err := changeFormat(ctx, mc, af.endpoints, raftlock.FormatArgs{Resume: true})
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\ngate: %s\n", rep.Message, rep.Gate)
				return nil
			})
		},
	}
	af.register(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the answer")
	return cmd
}

// changeFormat posts a to the first endpoint that answers.
func changeFormat(ctx context.Context, mc *raftlock.MembershipClient, endpoints []string, a raftlock.FormatArgs) (*raftlock.FormatReply, error) {
	var errs []error
	for _, addr := range endpoints {
		rep, err := mc.ChangeFormat(ctx, addr, a)
		if err == nil {
			return rep, nil
		}
		errs = append(errs, err)
		if rep != nil && rep.Error != "" && ctx.Err() == nil {
			return nil, err // the leader answered: a refusal, not an unreachable member
		}
	}
	return nil, errors.Join(errs...)
}
