package cli

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/backend/raftlock/store"
)

func newRecoverCmd() *cobra.Command {
	var (
		rf         raftFlags
		id         string
		raftAddr   string
		advertise  string
		members    map[string]string
		tokenFloor uint64
	)
	cmd := &cobra.Command{
		Use:   "recover",
		Short: "Turn a surviving raftlock node into a new cluster after a majority is lost for good",
		Long: `Turn the data directory of a surviving raftlock node into a new cluster,
when a majority of the voters is lost for good (two of three: their hosts or
disks are gone). Such a cluster cannot elect a leader, and no membership
change can pass without one. If the lost nodes can come back with their
data, bring them back instead: nothing is lost then.

Run it on the stopped node, with the --data-dir, --id and --store it runs
with. It refuses a directory a running node holds and one without state.
It replays everything the directory holds (entries that may not have
committed included) into a snapshot whose configuration is this node alone
as the only voter (or --members), and empties the log. The fencing counter
in that snapshot is raised above every token the old cluster can have
granted: above the counter, the state machine's clock and this host's
clock now, in nanoseconds (or --token-floor N, if higher: every token after
the recovery is above N). Held leases are kept; their holders may still be
alive, and their tokens are below the floor like any other.

What it costs: entries only the lost nodes had are gone (grants, releases,
data writes); a lease granted by them is not held here, and its key can be
granted again, with a higher token, so a resource that checks fencing
tokens refuses the lost grant's writes. That needs this host's clock not to
be behind the lost leader's by more than the time elapsed since; give
--token-floor above the highest token you know of if in doubt.

Next steps:
  1. Start the node as usual on the same data directory: lockgate node --id ID
     --data-dir DIR (and its other flags, no --bootstrap or --join). It is a
     cluster of one and elects itself leader.
  2. Add fresh nodes the usual way: lockgate node --id NEW-ID with an empty
     data directory and --join THIS-NODE'S-API-ADDRESS, one at a time.
  3. Never start the lost nodes again with their old data directories: wipe
     them, and rejoin those hosts as fresh nodes with new ids.
Recover one directory only. Every other member named in --members must start
with an empty data directory (and --join this node's API address, which
records its own API address): it receives the state from this node, which
leads once a majority of --members runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, err := store.ParseKind(rf.store)
			if err != nil {
				return err
			}
			addr := raftAddr
			if advertise != "" {
				addr = advertise
			}
			rep, err := raftlock.RecoverDataDir(rf.dataDir, raftlock.RecoverOptions{
				ID: id, RaftAddr: addr, Members: members, Store: kind, TokenFloor: tokenFloor,
				Logger: slog.Default(), RaftLogOutput: cmd.ErrOrStderr(),
			})
			if err != nil {
				return err
			}
			printRecoverReport(cmd, id, rep)
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVar(&id, "id", "", "server id the node runs with (required)")
	cmd.Flags().StringVar(&raftAddr, "raft-addr", "", "this node's Raft address in the new configuration, as peers dial it (default: its address in the configuration the data directory holds)")
	cmd.Flags().StringVar(&advertise, "raft-advertise", "", "the node's --raft-advertise, if it has one: its address in the new configuration (wins over --raft-addr)")
	cmd.Flags().StringToStringVar(&members, "members", nil, "the new configuration's voters, `id=raftAddr,...` (this node is added if missing; the others must start with empty data directories); none: this node alone")
	cmd.Flags().Uint64Var(&tokenFloor, "token-floor", 0, "every fencing token granted after the recovery is above `N` (when N is above the floor computed from the state and this host's clock)")
	cmd.MarkFlagRequired("id")
	return cmd
}

// printRecoverReport says what recover did and what to do next.
func printRecoverReport(cmd *cobra.Command, id string, rep *raftlock.RecoverReport) {
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "recovered %s (--store %s) for node %s\n", rep.DataDir, rep.Store, id)
	fmt.Fprintf(out, "  state:           log index %d, term %d (snapshot %s), %d lease holder(s) kept\n",
		rep.LastIndex, rep.LastTerm, rep.SnapshotID, rep.Leases)
	fmt.Fprintf(out, "  fencing counter: %d -> %d (the next token is above it)\n", rep.CounterBefore, rep.CounterAfter)
	fmt.Fprintf(out, "  configuration:   %s (was %s)\n", raftlock.FormatConfiguration(rep.Configuration), raftlock.FormatConfiguration(rep.Previous))
	if len(rep.DroppedMembers) > 0 {
		fmt.Fprintf(out, "  member directory: dropped %s\n", strings.Join(rep.DroppedMembers, ", "))
	}
	fmt.Fprintf(out, "next: start it with `lockgate node --id %s --data-dir %s` and its usual flags (no --bootstrap, no --join);\n", id, rep.DataDir)
	if len(rep.Configuration.Servers) == 1 {
		fmt.Fprintln(out, "  it leads a cluster of one. Add fresh nodes with empty data directories and --join, one at a time.")
	} else {
		fmt.Fprintln(out, "  start the other members with empty data directories and --join pointing at it; it leads once a majority of them runs.")
	}
	fmt.Fprintln(out, "  Never start the lost nodes with their old data directories.")
}
