package benchcli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/bench/upgrade"
	"github.com/lockgate/lockgate/internal/cli"
	"github.com/lockgate/lockgate/internal/servers"
)

func newBenchUpgradeCmd() *cobra.Command {
	var (
		cfg                upgrade.UpgradeConfig
		fromRev, jsonOut   string
		serverLog, repoDir string
	)
	cmd := &cobra.Command{
		Use:   "upgrade --from OLD_BINARY | --from-rev REV",
		Short: "Drill a rolling upgrade and downgrade of a raftlock cluster under load, and check it",
		Long: `Start three 'lockgate node' processes of the older binary (--from, or
--from-rev: the lockgate of that git revision, built once into the user's
cache directory from the repository of the working directory) on free
127.0.0.1 ports, and run a lock workload from --workers Go SDK clients with
default options, each replaced by a new client every --client-life:
exclusive locks that write to a fenced store with their fencing tokens,
and whenever the cluster offers them, sessions (the SDK puts its
auto-renewed leases in one) and the primitives (shared locks, semaphores,
AcquireAll). Meanwhile:

  upgrade          each node stopped (SIGTERM) and started again on the same
                   data directory and ports with the newer binary (--to,
                   default this one), followers first, the leader last, each
                   caught up with the leader's commit index before the next
  gate-rise        until the leader has raised the format gate to what every
                   voter reads (the first client offered sessions is noted)
  downgrade        POST /v1/cluster/format downgradeTo --downgrade-to, asked
                   again until done (sessions drained, the gate lowered,
                   every voter's snapshot past it)
  downgrade-nodes  the nodes replaced one at a time by the older binary

The phases share --duration; a slow step makes the drill longer. The
history is checked as 'lockgate-bench chaos' checks its own: no overlap, no fencing
token granted twice (for a key, or for any key: raftlock's counter is the
cluster's), no stale write accepted by the fenced store, linearizable
(porcupine). The summary gives each phase's grants (in a session, shared,
semaphore, multikey), the node replacements, when the gate rose and fell,
errors by kind and the verdicts; --json writes the report. The exit status
is 1 when a checker failed, a node exited on its own, the gate did not
rise and fall, or a step did not finish.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			errw := cmd.ErrOrStderr()
			if (cfg.From == "") == (fromRev == "") {
				return errors.New("give the older binary: --from OLD_BINARY or --from-rev REV")
			}
			self, logw, closeLog, err := benchSetup(cmd, serverLog)
			if err != nil {
				return err
			}
			defer closeLog()
			ctx, stop := cli.SignalContext()
			defer stop()
			if fromRev != "" {
				fmt.Fprintf(errw, "building lockgate at %s (the first time takes a minute; reused after)\n", fromRev)
				bctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
				cfg.From, err = servers.BuildRevision(bctx, fromRev, servers.BuildOptions{Dir: repoDir})
				cancel()
				if err != nil {
					return err
				}
				cfg.FromName = fromRev
			}
			if cfg.To == "" {
				cfg.To, cfg.ToName = self, "this binary"
			}
			cfg.Log, cfg.Progress = logw, errw
			cfg.Command = "lockgate-bench " + strings.Join(os.Args[1:], " ")
			rep, err := upgrade.RunUpgrade(ctx, cfg)
			if err != nil {
				return err
			}
			if err := writeTableJSON(cmd.OutOrStdout(), rep, jsonOut); err != nil {
				return err
			}
			if !rep.Passed() {
				return fmt.Errorf("upgrade drill failed: %s", strings.Join(rep.Failures, "; "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.From, "from", "", "the older lockgate binary the cluster starts on and returns to")
	f.StringVar(&fromRev, "from-rev", "", "build the older binary from this git revision (instead of --from)")
	f.StringVar(&repoDir, "repo", "", "a directory of the git repository --from-rev is built from (default: the working directory)")
	f.StringVar(&cfg.To, "to", "", "the newer lockgate binary (default: this one)")
	f.DurationVar(&cfg.Duration, "duration", upgrade.DefaultUpgradeDuration, "the whole drill, shared by its phases (at least 30s)")
	f.IntVar(&cfg.Workers, "workers", upgrade.DefaultUpgradeWorkers, "workload workers, each on SDK clients of its own")
	f.DurationVar(&cfg.ClientLife, "client-life", upgrade.DefaultClientLife, "how long a worker keeps one SDK client before it opens a new one (and so sees the cluster's features anew)")
	f.DurationVar(&cfg.Hold, "hold", upgrade.DefaultUpgradeHold, "longest hold of a lock after its writes")
	f.Uint8Var(&cfg.DowngradeTo, "downgrade-to", upgrade.DefaultDowngradeTo, "the highest format the older binary reads (1 for a binary that predates the format gate)")
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed of the workers' choices")
	f.StringVar(&jsonOut, "json", "", "write the report as JSON to this file")
	f.StringVar(&serverLog, "server-log", "", "write the nodes' output to this file (default: discard)")
	return cmd
}
