package benchcli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/bench/tenants"
	"github.com/lockgate/lockgate/internal/cli"
)

func newBenchTenantsCmd() *cobra.Command {
	var (
		cfg                 tenants.TenantsConfig
		policyFile, jsonOut string
		serverLog           string
	)
	cmd := &cobra.Command{
		Use:   "tenants",
		Short: "Measure whether one tenant flooding at its quotas hurts another (noisy neighbour)",
		Long: `Start three 'lockgate node' processes on free 127.0.0.1 ports with a tokens
file of two identities, victim and attacker ("NAME TOKEN" lines, random
tokens), an admin tokens file, and a policy file (--policy-file): the
attacker gets small quotas and a rate (sessions 200, leases 2000, waiters
500, watches 100, 500 requests/s with a burst of 1000; --policy FILE gives
another policy), each identity may lock its own prefix (victim/, attacker/)
and everyone may read. Then two phases of --duration/2 each:

  alone   the victim's workload by itself: --seq-workers Go SDK clients
          acquiring and releasing keys of their own (victim/seq-N),
          --hot-workers contending for victim/hot (holding it --hold), each
          client with its session (the SDK's default), and one prefix watch
          on victim/ that must keep receiving events
  beside  the same workload while the attacker floods at and beyond every
          quota, each flood over --attack-conns connections: sessions over
          WebSocket (a client closed and a new one connected every 16
          sessions, all kept alive) and REST (POST /sessions, renewed),
          leases over WebSocket (in the clients' sessions) and REST (POST
          /locks/{key}), waiting acquires on a key it holds (REST: wait_ms,
          tickets), prefix watches (--attacker-watch-prefix, default its own
          keys, whose churn every watch receives); once every flood has been
          refused (at most 40% into the phase) a hammer of try-acquires on
          its own keys as fast as answers come (--hammer-rate paces it); and
          every 50 ms a try-acquire of victim/hot, which the policy forbids

A flood that is refused waits 100 ms (20 ms after rate_limited) and asks
again; one that is never refused stops at twice its quota. Each victim
acquire is timed (HdrHistogram; sequential and contended apart) and
bounded by 10 s; the first cycle of each client in a phase (its
connection and session) is not measured.

The summary gives, per phase, the victim's acquires and those granted, p50,
p99 and max latency of both kinds, leases lost (ended before their release),
sessions kept, watch events, breaks and the longest gap between events; for
the attacker, per flood its requests, those carried out, the most it held,
refusals by code (quota_exceeded, rate_limited, too_many_sessions,
forbidden, the connections' own limits) and errors; per quota the most held
and the count held when first refused. --json writes the report.

The goal: the victim loses nothing (every acquire granted, no lease,
session or watch lost, none of its keys granted to the attacker) and its
p99 beside the attacker is at most 2× its p99 alone, sequential and
contended each. The exit status is 0 when the run completed, whether the
goal was met or not (the last line says which), and 1 when it could not run.
All processes run on this machine, the bench's own clients too: the
attacker's client work competes for the same cores as the nodes.

--no-policy is the control run: bare tokens and no --policy-file, so
nothing limits the attacker (its floods stop at twice the quotas) and the
goal is expected to fail.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if policyFile != "" {
				if cfg.NoPolicy {
					return fmt.Errorf("--policy and --no-policy exclude each other")
				}
				p, err := tenants.ReadTenantsPolicy(policyFile)
				if err != nil {
					return err
				}
				cfg.Policy = &p
			}
			self, logw, closeLog, err := benchSetup(cmd, serverLog)
			if err != nil {
				return err
			}
			defer closeLog()
			ctx, stop := cli.SignalContext()
			defer stop()
			cfg.Binary, cfg.Log, cfg.Progress = self, logw, cmd.ErrOrStderr()
			cfg.Command = "lockgate-bench " + strings.Join(os.Args[1:], " ")
			rep, err := tenants.RunTenants(ctx, cfg)
			if err != nil {
				return err
			}
			if err := writeTableJSON(cmd.OutOrStdout(), rep, jsonOut); err != nil {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&cfg.Duration, "duration", tenants.DefaultTenantsDuration, "both phases, half each (at least 4s)")
	f.IntVar(&cfg.SeqWorkers, "seq-workers", tenants.DefaultTenantsSeqWorkers, "victim workers acquiring and releasing keys of their own")
	f.IntVar(&cfg.HotWorkers, "hot-workers", tenants.DefaultTenantsHotWorkers, "victim workers contending for one key")
	f.DurationVar(&cfg.Hold, "hold", tenants.DefaultTenantsHold, "how long a contending victim worker holds the key")
	f.IntVar(&cfg.AttackConns, "attack-conns", tenants.DefaultTenantsAttackConns, "connections each of the attacker's floods spreads over")
	f.Float64Var(&cfg.HammerRate, "hammer-rate", 0, "pace the attacker's hammer to this many requests/s (0: as fast as answers come)")
	f.StringVar(&cfg.WatchPrefix, "attacker-watch-prefix", "attacker/", "the prefix the attacker's watches watch")
	f.StringVar(&policyFile, "policy", "", "a policy file (JSON) for the nodes instead of the built-in one; it must let victim lock victim/ and attacker lock attacker/")
	f.BoolVar(&cfg.NoPolicy, "no-policy", false, "the control run: no policy file and bare tokens, nothing limits the attacker")
	f.StringVar(&jsonOut, "json", "", "write the report as JSON to this file")
	f.StringVar(&serverLog, "server-log", "", "write the nodes' output to this file (default: discard)")
	return cmd
}
