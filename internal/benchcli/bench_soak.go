package benchcli

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/soak"
	"github.com/lockgate/lockgate/internal/cli"
)

func newBenchSoakCmd() *cobra.Command {
	var (
		cfg       soak.Config
		bounds    []string
		jsonOut   string
		serverLog string
	)
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "Churn a raftlock cluster for an hour under calm faults, and judge every node's heap, goroutines, descriptors and disk for growth",
		Long: `Start a three-node raftlock cluster of 'lockgate node' processes behind
proxies (as the chaos campaign does), and for --duration churn it:
lockers acquire, queue for and release --keys shared keys with a --ttl
lease, one in ten left to expire; session clients open a session, take keys
in it, and close it or drop their connection with the session open (it
expires); watchers watch a key for 2 to 10 s and go; every client closes
its connection and opens a new one every few dozen operations. One fault
of --faults is injected every --fault-min to --fault-max and healed
(default: kill and restart a node, pause the leader, partition a node).

Every --sample, each node's /metrics (go_memstats_heap_inuse_bytes,
process_resident_memory_bytes, go_goroutines, process_open_fds, and its
log entries since its last snapshot) and its data directory's bytes on
disk (the Raft log and stable store; snapshots/) are read. After --warmup,
each process metric's growth is the least-squares slope over the samples,
pooled over the node's process lifetimes (a node restarted by a fault
starts a new series; its first --settle is dropped), judged per hour
against the larger of a fraction of its median and an absolute figure;
goroutines and descriptors, which follow the clients' connections to the
leader, are judged on the cluster's total (node "all"), each node's own
figure shown; each disk metric must stay under its cap. Bounds (--bound metric=spec,
repeatable):

  heap=10%:16MiB  rss=10%:32MiB  goroutines=5%:5  fds=5%:5
  log-bytes=320MiB  snapshot-bytes=64MiB  log-entries=200000

The exit status is 0 when every metric of every node is within its bound,
some lock was acquired and every fault healed; 1 otherwise, naming what
failed. --json writes every sample, the faults and the verdicts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.Bounds = map[string]soak.Bound{}
			for _, b := range bounds {
				m, spec, ok := strings.Cut(b, "=")
				def, known := soak.DefaultBounds[m]
				if !ok || !known {
					return fmt.Errorf("--bound %q: want metric=spec, metric one of %s", b, strings.Join(soak.Metrics, ", "))
				}
				bd, err := soak.ParseBound(spec, def.Cap)
				if err != nil {
					return fmt.Errorf("--bound %s: %w", m, err)
				}
				cfg.Bounds[m] = bd
			}
			self, logw, closeLog, err := benchSetup(cmd, serverLog)
			if err != nil {
				return err
			}
			defer closeLog()
			cfg.Lockgate, cfg.Log, cfg.Progress = self, logw, cmd.ErrOrStderr()
			cfg.Command = "lockgate-bench " + strings.Join(os.Args[1:], " ")
			ctx, stop := cli.SignalContext()
			defer stop()
			rep, err := soak.Run(ctx, cfg)
			if err != nil {
				return err
			}
			if err := writeTableJSON(cmd.OutOrStdout(), rep, jsonOut); err != nil {
				return err
			}
			if failed := rep.Failed(); len(failed) > 0 {
				return fmt.Errorf("soak: %s", strings.Join(failed, "; "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Backend, "backend", provision.Raft, "backend: raft")
	f.DurationVar(&cfg.Duration, "duration", time.Hour, "how long the churn runs")
	f.DurationVar(&cfg.Warmup, "warmup", 0, "how much of the start is not fitted (default 10 % of --duration, at least 1m, at most half)")
	f.DurationVar(&cfg.Settle, "settle", time.Minute, "how much of a restarted node's new process is not fitted")
	f.DurationVar(&cfg.SampleEvery, "sample", 10*time.Second, "how often every node is sampled")
	f.IntVar(&cfg.Clients, "clients", 16, "concurrent clients: half lockers, a quarter session clients, a quarter watchers")
	f.IntVar(&cfg.Keys, "keys", 6, "keys the lockers and watchers share (few: waits queue)")
	f.DurationVar(&cfg.TTL, "ttl", 3*time.Second, "the leases' and sessions' TTL")
	f.StringSliceVar(&cfg.Faults, "faults", soak.DefaultFaults, "faults injected one at a time, each healed (none: --faults '')")
	f.DurationVar(&cfg.FaultMin, "fault-min", 30*time.Second, "shortest time between two faults")
	f.DurationVar(&cfg.FaultMax, "fault-max", time.Minute, "longest time between two faults")
	f.StringArrayVar(&bounds, "bound", nil, "a metric's bound, metric=P%:N (growth per hour: P % of the median or N, whichever is larger) or metric=N (the disk metrics' cap); sizes take KiB, MiB, GiB")
	f.Uint64Var(&cfg.Seed, "seed", 0, "seed of the workload and the faults (default random)")
	f.StringVar(&jsonOut, "json", "", "write the report, every sample included, as JSON to this file")
	f.StringVar(&serverLog, "server-log", "", "write the servers' output to this file (default: discard)")
	return cmd
}
