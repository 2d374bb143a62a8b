package cli

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/backend/raftlock/store"
)

func newSnapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Back up a raftlock cluster, inspect a backup, restore one onto a new cluster",
		Long: `Back up a raftlock cluster's state (save), check and describe a backup
(inspect), and build a new cluster from one (restore), on the same hosts or
new ones.

A backup is one file: a header (applied index, fencing counter, cluster id,
counts of leases, sessions, data keys and members, the leader that took it
and when) and the state machine's snapshot, under a SHA-256 of the whole.
It holds every lease's secret handle: keep it as private as a data
directory.

A restore never brings back a lease: a restored cluster starts with no
leases, sessions or lock-delays, keeps the data keys, and grants every
fencing token above every token granted before the restore, by the
original cluster (after the backup too) and by any earlier restore of the
same backup. See docs/operations.md, "Backups and restore".`,
	}
	cmd.AddCommand(newSnapshotSaveCmd(), newSnapshotInspectCmd(), newSnapshotRestoreCmd())
	return cmd
}

func newSnapshotSaveCmd() *cobra.Command {
	var (
		af      adminClientFlags
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "save --endpoints ADDR[,ADDR] FILE",
		Short: "Take a backup of a raftlock cluster from its leader into FILE",
		Long: `Take a backup of a raftlock cluster's state from its leader and write it to
FILE. Any member's API address will do: a follower names the leader, and
the command asks it. The leader makes sure its state is current (it checks
that a quorum still follows it, then waits until every committed entry is
applied) and answers a snapshot of it with a header.

The backup needs an admin credential, as join and remove do: an admin
token (--admin-token-file: the first token of a file in the nodes'
--admin-tokens-file format), or a client certificate from the cluster CA
(--tls-cert, --tls-key; --tls-ca to trust the nodes). A node with neither
configured answers only on a loopback API without client tokens.

FILE is written atomically: into a temporary file beside it, synced, read
back and verified (checksum, snapshot, header), and only then renamed over
FILE. A failed save leaves FILE as it was. The header is printed.`,
		Example: `  lockgate snapshot save --endpoints 10.0.0.1:50051,10.0.0.2:50052 \
    --admin-token-file /etc/lockgate/admin-token /backups/lockgate-$(date +%F).backup`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mc, err := af.client()
			if err != nil {
				return err
			}
			ctx, stop := SignalContext()
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			bk, from, err := saveBackupFile(ctx, mc, af.endpoints, args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "saved a backup from the leader at %s\n", from)
			printBackup(out, args[0], bk)
			return nil
		},
	}
	af.register(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long the backup may take, transfer included")
	return cmd
}

// saveBackupFile fetches a backup into a temporary file beside path,
// syncs and verifies it, and renames it to path.
func saveBackupFile(ctx context.Context, mc *raftlock.MembershipClient, endpoints []string, path string) (*raftlock.Backup, string, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, "", fmt.Errorf("%s is a directory: give the backup file's path", path)
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*") // mode 0600
	if err != nil {
		return nil, "", err
	}
	renamed := false
	defer func() {
		if !renamed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	from, err := mc.Backup(ctx, endpoints, tmp)
	if err != nil {
		return nil, "", err
	}
	if err := tmp.Sync(); err != nil {
		return nil, "", fmt.Errorf("syncing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return nil, "", fmt.Errorf("closing %s: %w", tmp.Name(), err)
	}
	bk, err := raftlock.ReadBackupFile(tmp.Name())
	if err != nil {
		return nil, "", fmt.Errorf("the backup received does not verify (%s left unchanged): %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return nil, "", err
	}
	renamed = true
	if d, err := os.Open(dir); err == nil {
		err = d.Sync() // the rename survives a crash
		d.Close()
		if err != nil {
			return nil, "", fmt.Errorf("syncing %s: %w", dir, err)
		}
	}
	return bk, from, nil
}

func newSnapshotInspectCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Verify a backup and print what it holds",
		Long: `Verify a backup file and print its header: when and by which leader it was
taken, its applied index, fencing counter and state machine clock, its
cluster id, and how many leases, sessions, lock-delays, data keys and
members it holds, with the member directory.

Verification reads the whole file: its framing, its SHA-256 (any flipped
byte fails it), the snapshot (which must decode) and the header (which must
describe the snapshot). A file that fails exits non-zero and says why:
"checksum mismatch", "truncated", "bad magic" (not a backup), a snapshot
that does not decode, or a header that does not match it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bk, err := raftlock.ReadBackupFile(args[0])
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(backupJSON{File: args[0], Bytes: bk.Size, SHA256: hex.EncodeToString(bk.Checksum[:]),
					Verified: true, Header: bk.Header, MemberDirectory: bk.MemberDirectory})
			}
			printBackup(cmd.OutOrStdout(), args[0], bk)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the verified header as JSON")
	return cmd
}

// backupJSON is `snapshot inspect --json`.
type backupJSON struct {
	File            string                `json:"file"`
	Bytes           int                   `json:"bytes"`
	SHA256          string                `json:"sha256"`
	Verified        bool                  `json:"verified"`
	Header          raftlock.BackupHeader `json:"header"`
	MemberDirectory map[string]string     `json:"memberDirectory"`
}

// printBackup prints a verified backup's header.
func printBackup(w io.Writer, path string, bk *raftlock.Backup) {
	h := bk.Header
	fmt.Fprintf(w, "backup %s: %d bytes, SHA-256 %x, verified\n", path, bk.Size, bk.Checksum)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "  %s:\t"+format+"\n", append([]any{k}, a...)...) }
	row("taken", "%s by leader %s (term %d), in %.3f s", h.Taken.Format(time.RFC3339Nano), h.LeaderID, h.Term, h.Seconds)
	row("applied index", "%d", h.AppliedIndex)
	row("fencing counter", "%d", h.FencingCounter)
	row("state clock", "%s (unix ns %d)", time.Unix(0, h.FSMClock).UTC().Format(time.RFC3339Nano), h.FSMClock)
	if h.ClusterID == "" {
		row("cluster id", "none (a cluster never restored)")
	} else {
		row("cluster id", "%s", h.ClusterID)
	}
	row("formats", "backup %d, snapshot %d, cluster gate %d", raftlock.BackupVersion, h.SnapshotFormat, h.GateFormat)
	row("leases", "%d", h.Leases)
	row("sessions", "%d", h.Sessions)
	row("lock-delays", "%d", h.LockDelays)
	row("data keys", "%d", h.DataKeys)
	ids := make([]string, 0, len(bk.MemberDirectory))
	for id := range bk.MemberDirectory {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for i, id := range ids {
		ids[i] = id + "=" + bk.MemberDirectory[id]
	}
	row("members", "%d: %s", h.Members, strings.Join(ids, ", "))
	tw.Flush()
}

func newSnapshotRestoreCmd() *cobra.Command {
	var (
		rf         raftFlags
		id         string
		members    []string
		tokenFloor uint64
	)
	cmd := &cobra.Command{
		Use:   "restore FILE --data-dir DIR --id ID --members id=raftAddr=apiAddr,...",
		Short: "Write a member's data directory of a new cluster restored from a backup",
		Long: `Write the data directory of member --id of a NEW cluster restored from the
backup FILE. --members names every member of the new cluster with the
address peers dial for its Raft transport (its --raft-advertise, else
--raft-addr) and the address clients dial for its API (its --api-addr):
the hosts, ids and ports may all differ from the original cluster's. Run it
once per member, on that member's host, with the same FILE and --members;
then start every member with 'lockgate node --id ID --data-dir DIR' at
those addresses, without --bootstrap or --join.

The restored state is written into one directory: the seed's, the member
with the lowest id. Every other member's directory starts without state:
it waits for the seed, votes for it, and receives the state from it over
Raft, as a node that joined would. So the members cannot disagree whatever
the order or time of the restores; the cluster forms once the seed and a
majority of the members run.

What the seed's state holds: the backup's data keys and format gate; no
leases, sessions or lock-delays (they belonged to the original cluster's
time: their holders must acquire again); a new random cluster id; the new
members' API addresses; and a fencing counter raised above every token
granted before: above the backup's counter, the backup's clock and this
host's clock now, in nanoseconds since 1970 (a cluster grants far fewer
than one token per nanosecond), or --token-floor N if higher. That holds
if this host's clock is not behind the clocks of the hosts that granted
those tokens by more than the time since; if in doubt, give --token-floor
above the highest token you know of.

It verifies the backup first and refuses a data directory that is not
empty; a failed restore leaves the directory as it found it.`,
		Example: `  lockgate snapshot restore backup.lgb --data-dir /var/lib/lockgate --id a \
    --members a=10.0.1.1:8081=10.0.1.1:50051,b=10.0.1.2:8081=10.0.1.2:50051,c=10.0.1.3:8081=10.0.1.3:50051
  lockgate node --id a --data-dir /var/lib/lockgate --raft-addr 10.0.1.1:8081 --api-addr 10.0.1.1:50051 ...`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, err := store.ParseKind(rf.store)
			if err != nil {
				return err
			}
			ms, err := raftlock.ParseRestoreMembers(members)
			if err != nil {
				return fmt.Errorf("--members: %w", err)
			}
			rep, err := raftlock.RestoreDataDir(args[0], raftlock.RestoreOptions{
				DataDir: rf.dataDir, ID: id, Members: ms, TokenFloor: tokenFloor, Store: kind,
			})
			if err != nil {
				return err
			}
			printRestoreReport(cmd.OutOrStdout(), args[0], rep)
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVar(&id, "id", "", "server id of the member whose data directory this is: one of --members (required)")
	cmd.Flags().StringSliceVar(&members, "members", nil, "every member of the new cluster, `id=raftAddr=apiAddr,...`: the same list for every member's restore (required)")
	cmd.Flags().Uint64Var(&tokenFloor, "token-floor", 0, "every fencing token the restored cluster grants is above `N`, when N is above the floor computed from the backup and this host's clock (the seed's restore uses it: the member with the lowest id)")
	cmd.MarkFlagRequired("id")
	cmd.MarkFlagRequired("members")
	return cmd
}

// printRestoreReport says what restore wrote and what to do next.
func printRestoreReport(w io.Writer, path string, rep *raftlock.RestoreReport) {
	h := rep.Backup.Header
	fmt.Fprintf(w, "restored %s (SHA-256 %x, taken %s by leader %s at index %d) into %s (--store %s) for member %s\n",
		path, rep.Backup.Checksum, h.Taken.Format(time.RFC3339), h.LeaderID, h.AppliedIndex, rep.DataDir, rep.Store, rep.ID)
	voters := make([]string, len(rep.Members))
	for i, m := range rep.Members {
		voters[i] = m.ID + "=" + m.RaftAddr
	}
	if rep.Seeded() {
		fmt.Fprintf(w, "  this member is the seed (the lowest id): its directory holds the restored state\n")
		fmt.Fprintf(w, "  cluster id:      %s (new)\n", rep.ClusterID)
		fmt.Fprintf(w, "  fencing counter: %d in the backup -> %d: every token this cluster grants is above it\n", h.FencingCounter, rep.Counter)
		fmt.Fprintf(w, "  dropped:         %d lease(s), %d session(s), %d lock-delay(s) of the original cluster\n", h.Leases, h.Sessions, h.LockDelays)
		fmt.Fprintf(w, "  kept:            the backup's %d data key(s) (the service's own, such as the format gate, among them)\n", h.DataKeys)
		fmt.Fprintf(w, "  raft:            snapshot %s at index %d, term %d; voters %s\n", rep.SnapshotID, rep.Index, rep.Term, strings.Join(voters, ","))
	} else {
		fmt.Fprintf(w, "  this member starts without state: it receives the restored state from member %s (the seed, the lowest id) once both run;\n", rep.Seed)
		fmt.Fprintf(w, "  restore member %s's directory from the same backup and --members too\n", rep.Seed)
	}
	for _, m := range rep.Members {
		if m.ID == rep.ID {
			fmt.Fprintf(w, "next: lockgate node --id %s --data-dir %s --raft-addr %s --api-addr %s\n", m.ID, rep.DataDir, m.RaftAddr, m.APIAddr)
			fmt.Fprintf(w, "  with its usual TLS and token flags (and --raft-advertise %s if it binds another address), without --bootstrap or --join;\n", m.RaftAddr)
		}
	}
	fmt.Fprintf(w, "  the cluster forms once the seed (%s) and a majority of its %d members run\n", rep.Seed, len(rep.Members))
}
