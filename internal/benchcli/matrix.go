package benchcli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/bench/faults"
	"github.com/lockgate/lockgate/bench/matrix"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/internal/cli"
)

func newBenchMatrixCmd() *cobra.Command {
	var (
		short                       bool
		backends, faultNames        []string
		jsonOut, htmlOut, serverLog string
		campaign, latency           time.Duration
		seed                        uint64
	)
	cmd := &cobra.Command{
		Use:   "matrix",
		Short: "Every backend and peer library: latency side by side, then one fault campaign per backend × fault",
		Long: `Run the whole comparison in one command: the latency workloads
(sequential, parallel, contended) over every backend and peer library in the
same rounds, then, for each backend, its servers behind proxies and one
chaos campaign per fault that applies to it. The report (--html, one page)
holds the latency table and CDFs, the modes and guarantees of every row,
ours beside the peers as ratios, a faults × backends grid (overlaps, stale
writes the fenced store accepted, linearizability, unavailability, recovery)
and a decision table derived from them.

--short is the short form: 2 s of latency per backend × workload and 8 s
campaigns, about 8 minutes on a 2-core machine.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg := matrix.ShortMatrix()
			if !short {
				cfg.Latency.Duration, cfg.Latency.Rounds, cfg.Latency.Clients = 15*time.Second, 3, 32
				cfg.Latency.Warmup = time.Second
				cfg.Campaign = 60 * time.Second
			}
			if cmd.Flags().Changed("campaign") {
				cfg.Campaign = campaign
			}
			if cmd.Flags().Changed("latency-duration") {
				cfg.Latency.Duration = latency
			}
			cfg.Backends, cfg.Faults, cfg.Seed = backends, faultNames, seed
			self, err := lockgateBinary(cmd)
			if err != nil {
				return err
			}
			cfg.Lockgate = self
			if serverLog != "" {
				f, err := os.Create(serverLog)
				if err != nil {
					return err
				}
				defer f.Close()
				cfg.Log = f
			} else {
				cfg.Log = io.Discard
			}
			cfg.Progress = cmd.ErrOrStderr()
			cfg.Command = "lockgate-bench " + strings.Join(os.Args[1:], " ")
			ctx, stop := cli.SignalContext()
			defer stop()
			t0 := time.Now()
			rep, err := matrix.RunMatrix(ctx, cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "matrix done in %v\n", time.Since(t0).Round(time.Second))
			return writeReport(cmd.OutOrStdout(), rep, jsonOut, htmlOut)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&short, "short", false, "the short form (about 8 minutes): 2 s latency runs, 8 s campaigns")
	f.StringSliceVar(&backends, "backend", provision.Backends, "backends and peers, name or name:variant")
	f.StringSliceVar(&faultNames, "faults", matrix.MatrixFaults, "faults, a campaign each: "+strings.Join(faults.Names, ","))
	f.DurationVar(&campaign, "campaign", 0, "length of each campaign (default 60s; 8s with --short)")
	f.DurationVar(&latency, "latency-duration", 0, "measured time per backend × workload (default 15s over 3 rounds; 2s, 1 round, with --short)")
	f.Uint64Var(&seed, "seed", 1, "seed of the fault schedules and the clients' choices")
	f.StringVar(&jsonOut, "json", "", "write the report as JSON to this file")
	f.StringVar(&htmlOut, "html", "", "write the report as one self-contained HTML page to this file")
	f.StringVar(&serverLog, "server-log", "", "write the servers' output to this file (default: discard)")
	return cmd
}
