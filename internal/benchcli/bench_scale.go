package benchcli

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/scale"
	"github.com/lockgate/lockgate/internal/cli"
)

func newBenchScaleCmd() *cobra.Command {
	var (
		cfg              scale.ScaleConfig
		jsonOut, htmlOut string
		serverLog        string
	)
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "Hold many leases in sessions, with waiting connections, a leader kill and an expiry storm",
		Long: `Start a three-node cluster of 'lockgate node' processes on free 127.0.0.1
ports (or use --servers), then, under a background lock workload
(--background clients acquiring and releasing keys of their own,
--background-rate acquisitions/s in all, each grant's latency recorded by
phase):

  idle     the background workload alone (--idle)
  loading  --sessions sessions opened (TTL --ttl) over as many connections
           as the gateway's limits need (64 sessions, 10,000 leases per
           connection), and --leases keys acquired in them, AcquireAll of
           64 keys at a time; the bench renews every session every TTL/3
  waiters  --waiters connections each waiting on a held key of its own,
           and --waiters more on one key, each sent once the leader counts
           the one before it queued; then the one key is released and its
           waiters must be granted in arrival order, one by one
  load     every lease held for --duration: the leader's heap per lease
           and renewal entries per second are sampled from /metrics
  faults   a snapshot on the leader (POST /v1/cluster/snapshot), a follower
           restarted (time until it serves and has caught up), the leader
           SIGKILLed (time to the first grant on the new leader); then
           every lease must still be held (0 lost)
  storm    every session renewed once, then no more: all their leases
           expire together a TTL later; the lock table must empty while the
           background workload's p99 stays within 500 ms

The report sets each of the scale goals beside what was measured, and
prints the goals as a markdown table too (docs/benchmarks.md). --backend etcd
puts the same lease load on a three-node etcd: a session is an etcd
concurrency.Session, a lease a key put with its lease; the background
workload is the zklike backend; what does not apply is said so.

The exit status is 0 when the run completed, whatever goals were missed,
unless a lease was lost or the FIFO order broke (safety): then 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			self, logw, closeLog, err := benchSetup(cmd, serverLog)
			if err != nil {
				return err
			}
			cfg.Lockgate = self
			defer closeLog()
			cfg.Log, cfg.Progress = logw, cmd.ErrOrStderr()
			cfg.Command = "lockgate-bench " + strings.Join(os.Args[1:], " ")
			ctx, stop := cli.SignalContext()
			defer stop()
			rep, err := scale.RunScale(ctx, cfg)
			if err != nil {
				return err
			}
			if err := writeReport(cmd.OutOrStdout(), rep, jsonOut, htmlOut); err != nil {
				return err
			}
			if failed := rep.Failed(); len(failed) > 0 {
				return fmt.Errorf("safety: %s", strings.Join(failed, "; "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Backend, "backend", provision.Raft, "backend: raft or etcd")
	f.StringSliceVar(&cfg.Servers, "servers", nil, "existing servers instead of starting them (raft: API addresses; etcd: client URLs); the follower restart and leader kill need started ones")
	f.IntVar(&cfg.Leases, "leases", 100000, "leases to hold")
	f.IntVar(&cfg.Sessions, "sessions", 1000, "sessions the leases are held in")
	f.IntVar(&cfg.Waiters, "waiters", 1000, "connections waiting on held keys of their own, and as many on one key (raft)")
	f.DurationVar(&cfg.TTL, "ttl", 20*time.Second, "session TTL")
	f.DurationVar(&cfg.Duration, "duration", time.Minute, "how long every lease is held before the faults and the storm")
	f.DurationVar(&cfg.Idle, "idle", 5*time.Second, "how long the background workload runs on the idle cluster first")
	f.IntVar(&cfg.Background, "background", 4, "background workload clients")
	f.Float64Var(&cfg.BackgroundRate, "background-rate", 200, "background workload acquisitions per second, in all")
	f.DurationVar(&cfg.SampleEvery, "sample", time.Second, "how often the leader's /metrics is sampled")
	f.StringVar(&jsonOut, "json", "", "write the report as JSON to this file")
	f.StringVar(&htmlOut, "html", "", "write an HTML report to this file")
	f.StringVar(&serverLog, "server-log", "", "write the servers' output to this file (default: discard)")
	return cmd
}
