package cli

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/internal/demo"
)

func newDemoCmd() *cobra.Command {
	var (
		duration time.Duration
		clients  int
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "See lockgate work: a raftlock cluster, clients, a failover and a fenced late write",
		Long: `Run, in one process and a temporary directory: a three-node raftlock
cluster with the gateway on each node, the fenced store, and SDK clients
contending for a few keys (acquire, write with the fencing token, release).
A third of the way in the leader is stopped; halfway a client stalls past its
TTL and writes late, and the fenced store rejects the write. Ends with a
summary; exits 0 when no holds overlapped and the late write was rejected.
Leaves nothing behind.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if duration < 6*time.Second {
				return fmt.Errorf("--duration %v: want at least 6s (the failover and the pause need time)", duration)
			}
			ctx, stop := SignalContext()
			defer stop()
			out := cmd.OutOrStdout()
			logger := slog.New(slog.NewTextHandler(io.Discard, nil))
			if slog.Default().Enabled(ctx, slog.LevelDebug) {
				logger = slog.Default()
			}
			sum, err := demo.Run(ctx, demo.Config{Duration: duration, Clients: clients, Logger: logger}, out)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, `
summary
  grants                 %d
  handoffs               %d (a key passed from one client to another)
  fenced writes accepted %d
  stale writes rejected  %d
  overlapping holds      %d
  token regressions      %d
  failover               node %s → node %s in %v
  client errors          %d
`, sum.Grants, sum.Handoffs, sum.Writes, sum.StaleRejected, sum.Overlaps, sum.TokenRegresses,
				sum.OldLeader, sum.NewLeader, sum.Failover.Round(time.Millisecond), sum.ClientErrors)
			if sum.Overlaps != 0 || sum.TokenRegresses != 0 || sum.StaleRejected == 0 {
				return exitCode(1)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&duration, "duration", 20*time.Second, "how long to run")
	cmd.Flags().IntVar(&clients, "clients", 6, "contending clients")
	return cmd
}
