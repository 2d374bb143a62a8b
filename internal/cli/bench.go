package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/bench"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the backends side by side (latency)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newBenchLatencyCmd())
	return cmd
}

func newBenchLatencyCmd() *cobra.Command {
	var (
		backends, workloads, vias []string
		cfg                       bench.LatencyConfig
		servers, jsonOut, htmlOut string
		serverLog                 string
	)
	cmd := &cobra.Command{
		Use:   "latency",
		Short: "Measure acquire/release latency and throughput of every backend in one run",
		Long: `Start the servers every chosen backend needs (five redis-server, one
PostgreSQL, a three-node etcd, a three-node raftlock cluster of 'lockgate node'
processes) on free 127.0.0.1 ports, run the workloads against each backend in
rounds interleaved across backends, and print a table; --json and --html write
the full report. The servers are stopped when the run ends.

Workloads: sequential (one client, one key), parallel (--clients clients, a
key each), contended (--clients clients, one key; latency includes the wait),
handoff (contended, measured from a release to the next waiter's grant).
--duration is the measured time of each backend × path × workload, split over
--rounds; reported latencies are the medians of the rounds' percentiles.
--rate makes the loop open: operations start on a fixed schedule and latency
counts from the scheduled start, so a slow server cannot hide its queueing.
--servers uses existing servers for some backends, e.g.
  --servers 'redlock=127.0.0.1:6379;postgres=postgres://u@h/db;etcd=http://h:2379;raft=h:50051,h:50052'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.Backends, cfg.Workloads, cfg.Vias = backends, workloads, vias
			spec, err := bench.ParseSpec(servers)
			if err != nil {
				return err
			}
			if err := bench.CheckBackends(backends); err != nil {
				return err
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("finding the lockgate binary for the raftlock nodes: %w", err)
			}
			var logw io.Writer
			if serverLog != "" {
				f, err := os.Create(serverLog)
				if err != nil {
					return err
				}
				defer f.Close()
				logw = f
			}
			ctx, stop := signalContext()
			defer stop()
			errw := cmd.ErrOrStderr()
			fmt.Fprintf(errw, "starting servers for %s\n", strings.Join(backends, ", "))
			t0 := time.Now()
			s, err := bench.Provision(ctx, backends, bench.ProvisionOptions{Existing: spec, Lockgate: self, Log: logw})
			if err != nil {
				return err
			}
			defer s.Close()
			fmt.Fprintf(errw, "servers ready in %v\n", time.Since(t0).Round(time.Millisecond))
			cfg.Progress = errw
			rep, err := bench.RunLatency(ctx, s, cfg)
			if err != nil {
				return err
			}
			rep.Command = "lockgate " + strings.Join(os.Args[1:], " ")
			if err := rep.WriteTable(cmd.OutOrStdout()); err != nil {
				return err
			}
			if jsonOut != "" {
				if err := bench.WriteFile(jsonOut, rep.WriteJSON); err != nil {
					return err
				}
			}
			if htmlOut != "" {
				if err := bench.WriteFile(htmlOut, rep.WriteHTML); err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&backends, "backend", bench.Backends, "backends to measure: "+strings.Join(bench.Backends, ","))
	f.StringSliceVar(&workloads, "workload", []string{bench.Sequential, bench.Parallel, bench.Contended}, "workloads: "+strings.Join(bench.Workloads, ","))
	f.StringSliceVar(&vias, "via", []string{bench.Direct}, "paths: direct (the backend's Go Locker) and/or gateway (SDK → WebSocket gateway → backend)")
	f.IntVar(&cfg.Clients, "clients", 32, "clients of the parallel, contended and handoff workloads")
	f.DurationVar(&cfg.Duration, "duration", 5*time.Second, "measured time per backend × path × workload, split over the rounds")
	f.IntVar(&cfg.Rounds, "rounds", 3, "rounds, interleaved across backends")
	f.DurationVar(&cfg.Warmup, "warmup", time.Second, "unrecorded warm-up per backend × path")
	f.Float64Var(&cfg.Rate, "rate", 0, "open loop: total operations per second (0: closed loop)")
	f.StringVar(&servers, "servers", "", "existing servers per backend instead of starting them (see above)")
	f.StringVar(&jsonOut, "json", "", "write the report as JSON to this file")
	f.StringVar(&htmlOut, "html", "", "write a self-contained HTML report to this file")
	f.StringVar(&serverLog, "server-log", "", "write the servers' output to this file (default: discard)")
	return cmd
}
