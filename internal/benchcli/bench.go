package benchcli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/bench/campaign"
	"github.com/lockgate/lockgate/bench/election"
	"github.com/lockgate/lockgate/bench/faults"
	"github.com/lockgate/lockgate/bench/latency"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/report"
	"github.com/lockgate/lockgate/internal/cli"
)

func newBenchElectionCmd() *cobra.Command {
	var (
		cfg              election.ElectionConfig
		endpoints        []string
		jsonOut, htmlOut string
		serverLog        string
	)
	cmd := &cobra.Command{
		Use:   "election",
		Short: "Measure leader election failover: kill the leader's process, time the next leader",
		Long: `Start a three-node raftlock cluster of 'lockgate node' processes on free
127.0.0.1 ports (or use --endpoints), run --campaigners campaigner processes
(--campaigner elect: 'lockgate elect --ttl TTL -- sh -c "echo leading …;
exec sleep …"', the command users run; builtin: 'lockgate-bench campaign',
lock/election's Campaign through the Go SDK), observe the election with lock/election's Observe, and
SIGKILL the leader's process --kills times, starting a new campaigner after
each kill. For each kill it reports the time from the SIGKILL to the next
leader observed (and to the observer seeing no leader, and to the next
leader's process saying it leads), then the p50 and max beside the bound on
a failover: the lease TTL plus one commit, the commit being the p50 of an
uncontended acquire on the same endpoints measured in the same run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			self, logw, closeLog, err := benchSetup(cmd, serverLog)
			if err != nil {
				return err
			}
			cfg.Lockgate = self
			if cfg.Bench, err = os.Executable(); err != nil {
				return fmt.Errorf("finding lockgate-bench for the builtin campaigners: %w", err)
			}
			ctx, stop := cli.SignalContext()
			defer stop()
			errw := cmd.ErrOrStderr()
			defer closeLog()
			cfg.Log, cfg.Progress = logw, errw
			cfg.Endpoints = endpoints
			if len(endpoints) == 0 {
				fmt.Fprintf(errw, "starting a %d-node raftlock cluster\n", provision.RaftNodes)
				s, err := provision.Provision(ctx, []string{provision.Raft}, provision.ProvisionOptions{Lockgate: self, Log: logw})
				if err != nil {
					return err
				}
				defer s.Close()
				cfg.Endpoints, cfg.Backend = s.Spec.Raft, provision.Raft
			} else if cfg.Backend == "" {
				cfg.Backend = "endpoints " + strings.Join(endpoints, ",")
			}
			cfg.Command = "lockgate-bench " + strings.Join(os.Args[1:], " ")
			rep, err := election.RunElection(ctx, cfg)
			if err != nil {
				return err
			}
			return writeReport(cmd.OutOrStdout(), rep, jsonOut, htmlOut)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&endpoints, "endpoints", nil, "gateway-protocol endpoints to campaign on (default: start a raftlock cluster)")
	f.IntVar(&cfg.Campaigners, "campaigners", 3, "campaigner processes at once")
	f.StringVar(&cfg.Campaigner, "campaigner", election.CampaignerElect, "campaigner command: elect (lockgate elect) or builtin (lockgate-bench campaign)")
	f.IntVar(&cfg.Kills, "kills", 20, "leaders to kill")
	f.DurationVar(&cfg.TTL, "ttl", 2*time.Second, "the leader's lease TTL")
	f.IntVar(&cfg.CommitSamples, "commit-samples", 200, "uncontended acquires that measure the commit latency (half before the kills, half after)")
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed of the waits before the kills")
	f.StringVar(&jsonOut, "json", "", "write the report as JSON to this file")
	f.StringVar(&htmlOut, "html", "", "write an HTML report to this file")
	f.StringVar(&serverLog, "server-log", "", "write the servers' and campaigners' output to this file (default: discard)")
	return cmd
}

// newBenchCampaignCmd is one campaigner of 'lockgate-bench election' (hidden).
func newBenchCampaignCmd() *cobra.Command {
	var (
		cfg       election.CampaignConfig
		endpoints []string
	)
	cmd := &cobra.Command{
		Use:    "campaign",
		Short:  "Campaign for an election and hold the leadership (a campaigner of lockgate-bench election)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.Endpoints = endpoints
			ctx, stop := cli.SignalContext()
			defer stop()
			return election.Campaign(ctx, cfg, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&endpoints, "endpoints", nil, "gateway-protocol endpoints")
	f.StringVar(&cfg.Key, "key", "", "the election's key")
	f.StringVar(&cfg.Owner, "owner", "", "this campaigner's owner id, published as its value")
	f.DurationVar(&cfg.TTL, "ttl", 2*time.Second, "the leader's lease TTL")
	cmd.MarkFlagRequired("endpoints")
	cmd.MarkFlagRequired("key")
	cmd.MarkFlagRequired("owner")
	return cmd
}

func newBenchLatencyCmd() *cobra.Command {
	var (
		backends, workloads, vias []string
		caches                    []string
		cfg                       latency.LatencyConfig
		affinity                  = latency.DefaultAffinity()
		modes                     = latency.DefaultModes()
		servers, jsonOut, htmlOut string
		serverLog, compareOld     string
		margin                    float64
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
handoff (contended, measured from a release to the next waiter's grant),
affinity (--clients clients, each cycling on --affinity-keys keys of its own
and, with probability --shared, on one of --shared-keys keys every client
shares; ops/s counts acquisitions), wanted (--clients/2 pairs: the holder of a
key waits for its lease's Wanted signal while the waiter queues; latency is
from the waiter's Acquire to the holder hearing it, shown beside the floor of
one commit and one round trip; a backend whose Locker does not signal wanted
is skipped with a note), and the other primitives: rw (--clients clients, one
key, each acquire shared with probability --rw-shared, else exclusive;
acquisitions/s set beside contended's, goal ≥ 5×), semaphore (--clients
clients, one key of --permits permits; beside contended's) and multikey
(each client alternates an AcquireAll of --multi-keys keys of its own with a
single-key acquire; AcquireAll's p50 over the single acquire's, goal ≤ 1.3×).
A backend without the primitive has an "unsupported" row, not an error.
--cache on,off runs the gateway path's SDK clients with the lease cache on
(client.Options.CacheLeases) and off, each workload's rows side by side, and
sets the cache-on row beside the cache-off row as ratios (acquisitions/s on
over off, p50 and p99 off over on) with the caches' hits, misses and
reclaims. The direct path has no SDK cache: its cache-on runs are skipped
with a note. A cache-on target's clients are closed and reopened after each
round, so that the leases their caches kept are released before anything
else is measured.
--duration is the measured time of each backend × path × workload, split over
--rounds; reported latencies are the medians of the rounds' percentiles.
--rate makes the loop open: operations start on a fixed schedule and latency
counts from the scheduled start, so a slow server cannot hide its queueing.

Every run also measures this machine's physical floor, a round at a time with
the backends: a 4 KiB append + fdatasync in the raftlock nodes' data
filesystem (--floor-dir) and a loopback TCP round trip. From them each
backend's commit, cycle and handoff floors follow its replication model, and
every run's p50 and ops/s are shown as multiples of its floor (FLOOR rows and
columns; docs/benchmarks.md explains the model).
Besides lockgate's own backends (raft, redlock, postgres, etcd), --backend
takes the peer libraries their users would otherwise pick, measured through
the same workloads in the same rounds: etcd-mutex (etcd's concurrency.Mutex),
redsync and redislock (on the same Redis servers), pg-advisory
(pg_advisory_lock) and zookeeper (go-zookeeper's lock recipe on a 3-server
ZooKeeper ensemble). A backend may name its mode, name:variant (etcd:lease,
redlock:single); the report states every row's mode and what it guarantees,
and sets each of ours beside its peers as ratios.
Every run also reports what it cost (RESOURCES rows, "resources" in the
JSON): over its measured rounds, the CPU time of the server processes the
bench started for its backend (each with everything it forked, e.g.
PostgreSQL's backends; raftlock, etcd and ZooKeeper per node, with the
leader's apart), of the bench process (the clients, and the gateway on
the gateway path), per operation, and their peak resident memory.
Servers given by --servers are not the bench's: their columns say "not
measured".
--servers uses existing servers for some backends, e.g.
  --servers 'redlock=127.0.0.1:6379;postgres=postgres://u@h/db;etcd=http://h:2379;raft=h:50051,h:50052'
--compare OLD.json sets this run's same-run ratios beside those of an
earlier --json report, as 'lockgate-bench compare OLD.json NEW.json' does,
and exits 1 when one got worse by more than --compare-margin.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.Backends, cfg.Workloads, cfg.Vias, cfg.Caches, cfg.Affinity, cfg.Modes = backends, workloads, vias, caches, affinity, modes
			spec, err := provision.ParseSpec(servers)
			if err != nil {
				return err
			}
			// The old report is read before the run, so that a wrong path
			// does not cost a run.
			var old *latency.Report
			if compareOld != "" {
				if old, err = latency.LoadReport(compareOld); err != nil {
					return err
				}
				if err := checkMargin(margin); err != nil {
					return err
				}
			}
			if err := provision.CheckBackends(backends); err != nil {
				return err
			}
			self, logw, closeLog, err := benchSetup(cmd, serverLog)
			if err != nil {
				return err
			}
			defer closeLog()
			ctx, stop := cli.SignalContext()
			defer stop()
			errw := cmd.ErrOrStderr()
			fmt.Fprintf(errw, "starting servers for %s\n", strings.Join(backends, ", "))
			t0 := time.Now()
			popts := provision.ProvisionOptions{Existing: spec, Lockgate: self, Log: logw}
			if cfg.Trace {
				sink, err := startTraceSink(errw, &popts)
				if err != nil {
					return err
				}
				defer sink()
			}
			s, err := provision.Provision(ctx, backends, popts)
			if err != nil {
				return err
			}
			defer s.Close()
			fmt.Fprintf(errw, "servers ready in %v\n", time.Since(t0).Round(time.Millisecond))
			cfg.Progress = errw
			rep, err := latency.RunLatency(ctx, s, cfg)
			if err != nil {
				return err
			}
			rep.Command = "lockgate-bench " + strings.Join(os.Args[1:], " ")
			if err := writeReport(cmd.OutOrStdout(), rep, jsonOut, htmlOut); err != nil {
				return err
			}
			if old == nil {
				return nil
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return compareReports(cmd.OutOrStdout(), old, rep, margin)
		},
	}
	f := cmd.Flags()
	f.StringVar(&compareOld, "compare", "", "after the run, set its same-run ratios beside this earlier --json report's; exit 1 when one got worse by more than --compare-margin")
	f.Float64Var(&margin, "compare-margin", latency.DefaultMargin, "with --compare: how much worse (a fraction: 0.15 is 15%) a ratio may get")
	f.StringSliceVar(&backends, "backend", provision.Ours, "backends to measure, name or name:variant: "+strings.Join(provision.Backends, ",")+
		" (variants: "+strings.Join(provision.Variants(), ",")+")")
	f.StringSliceVar(&workloads, "workload", []string{latency.Sequential, latency.Parallel, latency.Contended}, "workloads: "+strings.Join(latency.Workloads, ","))
	f.StringSliceVar(&vias, "via", []string{provision.Direct}, "paths: direct (the backend's Go Locker) and/or gateway (SDK → WebSocket gateway → backend)")
	f.StringSliceVar(&caches, "cache", []string{latency.CacheOff}, "SDK lease cache on the gateway path: on and/or off (direct runs are cache off)")
	f.IntVar(&cfg.Clients, "clients", 32, "clients of the parallel, contended, handoff and affinity workloads; twice the wanted workload's pairs")
	f.IntVar(&affinity.Keys, "affinity-keys", latency.DefaultAffinityKeys, "affinity: keys each client has of its own")
	f.IntVar(&affinity.SharedKeys, "shared-keys", latency.DefaultAffinitySharedKeys, "affinity: keys in the pool every client shares")
	f.Float64Var(&affinity.Shared, "shared", latency.DefaultAffinityShared, "affinity: probability (0 to 1) that a cycle takes a shared key instead of one of its own")
	f.Float64Var(&modes.SharedFraction, "rw-shared", latency.DefaultSharedFraction, "rw: probability (0 to 1) that an acquire is shared")
	f.IntVar(&modes.Permits, "permits", latency.DefaultPermits, "semaphore: permits of the key")
	f.IntVar(&modes.Keys, "multi-keys", latency.DefaultMultiKeys, "multikey: keys of each AcquireAll")
	f.DurationVar(&cfg.Duration, "duration", 5*time.Second, "measured time per backend × path × workload, split over the rounds")
	f.IntVar(&cfg.Rounds, "rounds", 3, "rounds, interleaved across backends")
	f.DurationVar(&cfg.Warmup, "warmup", time.Second, "unrecorded warm-up per backend × path")
	f.Float64Var(&cfg.Rate, "rate", 0, "open loop: total operations per second (0: closed loop)")
	f.StringVar(&cfg.FloorDir, "floor-dir", "", "directory to measure the floor's fdatasync in (default: the raftlock nodes' data directory, else the temporary directory)")
	f.StringVar(&servers, "servers", "", "existing servers per backend instead of starting them (see above)")
	f.StringVar(&jsonOut, "json", "", "write the report as JSON to this file")
	f.StringVar(&htmlOut, "html", "", "write a self-contained HTML report to this file")
	f.StringVar(&serverLog, "server-log", "", "write the servers' output to this file (default: discard)")
	f.BoolVar(&cfg.Trace, "trace", false, "also measure raft with every request traced (variant raft:traced, beside raft:cluster in the same rounds): the nodes export OpenTelemetry traces to a local OTLP sink that discards them")
	f.Float64Var(&cfg.TraceFraction, "trace-fraction", 1, "with --trace: the fraction of raft:traced's requests that carry a sampled trace context (a deployment sampling that fraction); the others go untraced")
	return cmd
}

// startTraceSink readies a traced latency run: a local OTLP sink, the
// nodes' --otlp-endpoint naming it, and the sampler that records only
// requests whose caller's span is sampled (the traced variant's). The
// returned stop reports what the sink received and closes it.
func startTraceSink(errw io.Writer, popts *provision.ProvisionOptions) (stop func(), err error) {
	sink, err := latency.StartTraceSink()
	if err != nil {
		return nil, err
	}
	// The nodes inherit the bench's environment.
	os.Setenv("OTEL_TRACES_SAMPLER", latency.TraceSampler)
	popts.RaftArgs = []string{"--otlp-endpoint", sink.URL}
	fmt.Fprintf(errw, "traces: the raft nodes export to %s (sampler %s)\n", sink.URL, latency.TraceSampler)
	return func() {
		fmt.Fprintf(errw, "traces: the sink received %d exports, %d bytes\n", sink.Requests.Load(), sink.Bytes.Load())
		sink.Close()
	}, nil
}

func newBenchChaosCmd() *cobra.Command {
	var (
		cfg                campaign.ChaosConfig
		faultNames         []string
		jsonOut, htmlOut   string
		serverLog, linPath string
		historyOut         string
	)
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Run a Jepsen-style fault campaign against one backend and check the history",
		Long: `Start the backend's servers behind in-process TCP proxies (and, for raft,
proxies between the nodes), run --clients clients over --keys keys that
acquire → write to a fenced store and to an unfenced one → hold → release,
inject the --faults on a schedule seeded by --seed (one at a time, each healed
before the next), and check the recorded history:

  overlaps               two clients believed they held a key at once
  stale writes accepted  the fenced store took a write behind a newer token (must be 0)
  stale writes rejected  the fence at work
  unfenced conflicts     writes the unfenced store took out of order
  tokens reused          a fencing token granted twice for a key (must be 0);
  token regressions      or lower than one granted before it was requested (must be 0)
  linearizable           porcupine, over each key's acquire/release history on its
                         own, 30 s at most per key, 90 s and 4 GiB of heap in all: a
                         key that runs out of time or memory is not checked (the
                         report says which budget), and fails the campaign unless
                         --tolerate-unchecked allows that fraction of the keys
  unavailable, recovery  time without a grant; time from each heal to the next grant
  availability           per fault kind, the median and worst time from the fault's
                         start, and from its heal, to the next grant

The workload is sized to keep the servers busy: --clients clients (default 32,
16 on PostgreSQL) over --keys keys (default half the clients) hold each lock
for up to --hold (20 ms; one hold in 16 up to 10 times longer, at most TTL/2)
and pause up to --think (0) between cycles; a lease lives --ttl (2 s, longer
than a Raft election) and is never renewed.

Faults: kill (SIGKILL and restart; raft: the leader or a random node),
pause (SIGSTOP for 0.5–2 × TTL), partition (proxies cut: isolate a raft node,
cut clients from a minority of servers), clock (raft: a node's leader clock
jumps forward; redlock: a quorum's clocks, emulated), client-pause (a client
stalls 1.5 × TTL after checking its deadline, then writes).

--mode rw and --mode semaphore run the same faults over these
primitives: shared holders read (they write to no store), exclusive ones
write as above, and the overlap check judges the modes — an exclusive
holder alone, or shared holders only, at most --permits of them; an
exclusive grant's token must be above every shared grant's received before
it. Keys with shared holds are left out of the linearizability search,
whose model is a mutex's. A backend without the primitive is refused at
once (unsupported).

--mode multi: 10 clients (default) on --keys keys (default 5) Inspect a
key, AcquireAll 2–3 keys, or take one key exclusive or shared, or a permit
of a semaphore on a key of its own; besides the per-key checkers the whole
history is searched jointly (joint_*: an AcquireAll one operation with one
linearization point, every Inspect legal against the holders at its
point). It needs the multikey, shared and semaphore features.

--mode election: the clients (default 8) campaign with lock/election on
--keys election keys (default 2), lead for a short random time writing with
their term's token, then resign or crash (their client closed, the lease
left to run out) and campaign again; --observers per key (default 2) run
election.Observe on clients of their own. Two leaders at once by a leader's
own deadline count as overlaps; an observer must report leader tokens in
increasing order, only tokens a grant carried, and every term requested
after its watch was in sync unless that watch broke before reporting it or
a later term (counted as missed during re-watch). It needs watches.

The campaign prints its seed and the command that reproduces it. The exit
status is 1 when a checker failed (an overlap where no fault injected was
expected to break mutual exclusion, a stale write accepted, a token reused or
going back, a history that is not linearizable where no server fault was
expected to break the lock), or when the campaign was not valid: a fault
expected to break mutual exclusion (client-pause; clock on redlock) produced
no overlap. The campaign writes its whole history (operations, fault
timeline, configuration) as JSON before the checkers run (a checker killed
for its memory leaves it on disk), to --history, by default next to --json or
--html (NAME-history.json) or to chaos-history-SEED.json, and again with the
verdicts after; without --history it is removed when the campaign passed.
'lockgate-bench check FILE' runs the checkers on it again, '--key K' on one
key only.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.Faults = faultNames
			self, logw, closeLog, err := benchSetup(cmd, serverLog)
			if err != nil {
				return err
			}
			cfg.Lockgate = self
			defer closeLog()
			cfg.Log = logw
			cfg.Progress = cmd.ErrOrStderr()
			cfg.Command = "lockgate-bench " + strings.Join(os.Args[1:], " ")
			if !cmd.Flags().Changed("seed") {
				cfg.Command += fmt.Sprintf(" --seed %d", cfg.Seed)
			}
			ctx, stop := cli.SignalContext()
			defer stop()
			cfg.History = historyPath(historyOut, jsonOut, htmlOut, cfg.Seed)
			rep, err := campaign.RunChaos(ctx, cfg)
			if err != nil {
				return err
			}
			rep.DropHistory(historyOut != "")
			if err := writeReport(cmd.OutOrStdout(), rep, jsonOut, htmlOut); err != nil {
				return err
			}
			if !rep.Linearizable || linPath != "" {
				p := linPath
				if p == "" {
					p = "linearizability.html"
					if htmlOut != "" {
						p = strings.TrimSuffix(htmlOut, ".html") + "-linearizability.html"
					}
				}
				if err := report.WriteFile(p, rep.WriteLinearizability); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "porcupine's visualisation of the lock history: %s\n", p)
			}
			failures := rep.Failures()
			if p := rep.HistoryFile; p != "" {
				if err := rep.SaveHistory(p); err != nil {
					return fmt.Errorf("writing the history: %w", err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "the whole history: %s (lockgate-bench check %s)\n", p, p)
			}
			switch {
			case len(failures) > 0:
				return fmt.Errorf("campaign failed (seed %d): %s", rep.Seed, strings.Join(failures, "; "))
			case !rep.Valid:
				return errors.New("invalid campaign: the faults expected to break mutual exclusion produced no overlap")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Backend, "backend", provision.Raft, "backend: "+strings.Join(provision.Backends, ", "))
	f.StringSliceVar(&faultNames, "faults", []string{faults.Kill, faults.Pause, faults.Partition}, "faults: "+strings.Join(faults.Names, ",")+", or "+faults.All+" (every fault that applies to the backend and that it promises to survive; add the ones that break it by design, e.g. client-pause, by name)")
	f.DurationVar(&cfg.Duration, "duration", 60*time.Second, "campaign length: faults are injected within it; the clients run on until 5 s after the last heal so that its recovery is seen")
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed of the fault schedule and the clients' choices")
	f.IntVar(&cfg.Clients, "clients", 0, "clients (default 32; 16 on PostgreSQL, whose 100 connections their pools share)")
	f.IntVar(&cfg.Keys, "keys", 0, "keys the clients contend for (default half the clients)")
	f.DurationVar(&cfg.TTL, "ttl", 2*time.Second, "lease TTL (etcd's smallest is 2s; keep it above the election time)")
	f.DurationVar(&cfg.Hold, "hold", 20*time.Millisecond, "longest hold of a lock after the writes (each drawn uniformly below it)")
	f.DurationVar(&cfg.Think, "think", 0, "longest pause between a release and the next acquire (each drawn uniformly below it; 0: none)")
	f.Float64Var(&cfg.CacheShare, "cache-share", campaign.DefaultCacheShare, "share of the clients that run with the SDK's lease cache (raft, --mode exclusive; negative: none)")
	f.StringVar(&cfg.Mode, "mode", campaign.ChaosExclusive, "how clients hold their keys: "+strings.Join(campaign.ChaosModes, ", ")+
		" (rw: shared with probability --rw-shared, else exclusive; semaphore: one of --permits permits, on clients/8 keys by default)")
	f.Float64Var(&cfg.SharedFraction, "rw-shared", 0.5, "--mode rw: probability (above 0, at most 1) that an acquire is shared")
	f.IntVar(&cfg.Permits, "permits", 3, "--mode semaphore: the permits of each key")
	f.IntVar(&cfg.Observers, "observers", campaign.DefaultObservers, "--mode election: observers per election key")
	f.StringVar(&historyOut, "history", "", "write the whole history (JSON) here, before the checkers run and again with their verdicts; without it, it goes next to --json/--html or to chaos-history-SEED.json, removed if the campaign passes")
	f.Float64Var(&cfg.Budget.TolerateUnchecked, "tolerate-unchecked", 0, "fraction of the keys whose linearizability search may run out of its time or memory budget with the campaign passing (default 0: none)")
	f.StringVar(&jsonOut, "json", "", "write the verdicts as JSON to this file")
	f.StringVar(&htmlOut, "html", "", "write an HTML report (timeline of faults and verdicts) to this file")
	f.StringVar(&linPath, "linearizability-html", "", "write porcupine's visualisation here (always written, next to --html, when the history is not linearizable)")
	f.StringVar(&serverLog, "server-log", "", "write the servers' output to this file (default: discard)")
	return cmd
}

// historyPath is where a campaign's history goes: --history, else next to
// the JSON or HTML report, else chaos-history-SEED.json.
func historyPath(history, jsonOut, htmlOut string, seed uint64) string {
	switch {
	case history != "":
		return history
	case jsonOut != "":
		return strings.TrimSuffix(jsonOut, ".json") + "-history.json"
	case htmlOut != "":
		return strings.TrimSuffix(htmlOut, ".html") + "-history.json"
	}
	return fmt.Sprintf("chaos-history-%d.json", seed)
}

// reportWriter is what every bench command's result can be written as.
type reportWriter interface {
	tableJSONWriter
	WriteHTML(io.Writer) error
}

// tableJSONWriter is a report with a table and a JSON form.
type tableJSONWriter interface {
	WriteTable(io.Writer) error
	WriteJSON(io.Writer) error
}

// writeTableJSON writes rep's table to w and its JSON to jsonOut (none
// when "").
func writeTableJSON(w io.Writer, rep tableJSONWriter, jsonOut string) error {
	if err := rep.WriteTable(w); err != nil {
		return err
	}
	if jsonOut == "" {
		return nil
	}
	return report.WriteFile(jsonOut, rep.WriteJSON)
}

// benchSetup finds the lockgate binary the bench runs as its servers
// (lockgateBinary) and opens --server-log (path "" discards the servers'
// output).
func benchSetup(cmd *cobra.Command, path string) (lockgate string, log io.Writer, closeLog func() error, err error) {
	if lockgate, err = lockgateBinary(cmd); err != nil {
		return "", nil, nil, err
	}
	if path == "" {
		return lockgate, nil, func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return "", nil, nil, err
	}
	return lockgate, f, f.Close, nil
}

// writeReport prints rep's table to w, then writes its JSON and HTML to
// the files named (none when empty).
func writeReport(w io.Writer, rep reportWriter, jsonOut, htmlOut string) error {
	if err := rep.WriteTable(w); err != nil {
		return err
	}
	for _, out := range []struct {
		path  string
		write func(io.Writer) error
	}{{jsonOut, rep.WriteJSON}, {htmlOut, rep.WriteHTML}} {
		if out.path == "" {
			continue
		}
		if err := report.WriteFile(out.path, out.write); err != nil {
			return err
		}
	}
	return nil
}
