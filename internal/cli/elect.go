package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/election"
)

func newElectCmd() *cobra.Command {
	var (
		cf        clientFlags
		key       string
		value     string
		ttl       time.Duration
		wait      time.Duration
		killAfter time.Duration
	)
	cmd := &cobra.Command{
		Use:   "elect --key K [--value V] -- CMD [ARGS...]",
		Short: "Run a command while this process leads an election",
		Long: `Campaign in the election on --key (lock/election: the leader is the
exclusive holder of the key, its value --value, e.g. this process's
address), waiting up to --wait (0: for ever). Once leading, run CMD with the
leadership's fencing token in LOCKGATE_FENCING_TOKEN (the term: pass it with
every write), the key in LOCKGATE_LOCK_KEY and the value in
LOCKGATE_LEADER_VALUE. If leadership is lost while CMD runs, CMD gets
SIGTERM (SIGKILL after --kill-after) and lockgate exits with status 75;
when CMD exits, lockgate resigns and exits with CMD's status. A leader
that dies without resigning is succeeded once its --ttl runs out. Like
etcdctl elect and Kubernetes' leader election.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.dialFor(key)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, stop := SignalContext()
			if wait > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, wait)
				defer cancel()
			}
			lead, err := election.Campaign(ctx, c, key, []byte(value), election.WithTTL(ttl))
			stop()
			if err != nil {
				return fmt.Errorf("campaigning for %q: %w", key, err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "lockgate: leading %q (fencing token %d)\n", key, lead.Token())
			return holdWhile(cmd, lead.Lease, args, killAfter, "resigning", func() error {
				rctx, rcancel := context.WithTimeout(context.Background(), cf.timeout)
				defer rcancel()
				return lead.Resign(rctx)
			}, "LOCKGATE_LEADER_VALUE="+value)
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVar(&key, "key", "", "the election (required)")
	cmd.Flags().StringVar(&value, "value", "", "this candidate's value, published while it leads (e.g. its address)")
	cmd.Flags().DurationVar(&ttl, "ttl", 15*time.Second, "leadership lease TTL, renewed every TTL/3: how soon a dead leader is succeeded")
	cmd.Flags().DurationVar(&wait, "wait", 0, "give up campaigning after this long (0: wait until elected)")
	cmd.Flags().DurationVar(&killAfter, "kill-after", 5*time.Second, "after leadership is lost: SIGKILL CMD if it has not exited this long after SIGTERM")
	return cmd
}

// leaderJSON is one line of `lockgate observe --json`.
type leaderJSON struct {
	Key          string `json:"key"`
	Leader       bool   `json:"leader"`
	Owner        string `json:"owner,omitempty"`
	Value        string `json:"value,omitempty"`
	FencingToken uint64 `json:"fencing_token,omitempty"`
	Revision     uint64 `json:"revision,omitempty"`
}

func newObserveCmd() *cobra.Command {
	var (
		cf      clientFlags
		key     string
		asJSON  bool
		count   int
		forTime time.Duration
	)
	cmd := &cobra.Command{
		Use:   "observe --key K",
		Short: "Print an election's leader and every change of it",
		Long: `Print the leader of the election on --key (or that there is none), then
one line per change, until interrupted (or after --count lines, or --for).
The watch is re-established after a lost connection or a leader change of
the cluster, without repeating a leader. Needs a backend with watches.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.dialFor(key)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, stop := streamContext(forTime)
			defer stop()
			leaders, err := election.Observe(ctx, c, key)
			if err != nil {
				return err
			}
			n := 0
			for l := range leaders {
				if err := printLeader(cmd.OutOrStdout(), l, asJSON); err != nil {
					return err
				}
				if n++; count > 0 && n >= count {
					return nil
				}
			}
			return nil
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVar(&key, "key", "", "the election (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON lines")
	cmd.Flags().IntVar(&count, "count", 0, "exit after this many lines (0: until interrupted)")
	cmd.Flags().DurationVar(&forTime, "for", 0, "exit after this long (0: until interrupted)")
	return cmd
}

func printLeader(w io.Writer, l election.Leader, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(leaderJSON{Key: l.Key, Leader: l.Present, Owner: l.Owner,
			Value: string(l.Value), FencingToken: uint64(l.Token), Revision: l.Revision})
	}
	var err error
	if l.Present {
		_, err = fmt.Fprintf(w, "%s: leader %q value %q fencing token %d\n", l.Key, l.Owner, l.Value, l.Token)
	} else {
		_, err = fmt.Fprintf(w, "%s: no leader\n", l.Key)
	}
	return err
}

// eventJSON is one line of `lockgate lock watch`.
type eventJSON struct {
	Type         string `json:"type"`
	Key          string `json:"key"`
	Owner        string `json:"owner,omitempty"`
	FencingToken uint64 `json:"fencing_token,omitempty"`
	Value        string `json:"value,omitempty"`
	Mode         string `json:"mode,omitempty"`
	Permits      int    `json:"permits,omitempty"`
	Revision     uint64 `json:"revision,omitempty"`
	Error        string `json:"error,omitempty"`
}

func newLockWatchCmd() *cobra.Command {
	var (
		cf      clientFlags
		count   int
		forTime time.Duration
	)
	cmd := &cobra.Command{
		Use:   "watch KEY",
		Short: "Print KEY's holders, then every grant, release and expiry, as JSON lines",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, stop := streamContext(forTime)
			defer stop()
			events, err := lock.Watch(ctx, c, args[0])
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			n := 0
			for ev := range events {
				j := eventJSON{Type: ev.Type.String(), Key: ev.Key, Owner: ev.Owner, FencingToken: uint64(ev.Token),
					Value: string(ev.Value), Permits: ev.Permits, Revision: ev.Revision}
				if ev.Type != lock.EventSynced && ev.Type != lock.EventError {
					j.Mode = ev.Mode.String()
				}
				if ev.Err != nil {
					j.Error = ev.Err.Error()
				}
				if err := enc.Encode(j); err != nil {
					return err
				}
				if ev.Type == lock.EventError {
					return ev.Err
				}
				if n++; count > 0 && n >= count {
					return nil
				}
			}
			return nil
		},
	}
	cf.register(cmd)
	cmd.Flags().IntVar(&count, "count", 0, "exit after this many events (0: until interrupted)")
	cmd.Flags().DurationVar(&forTime, "for", 0, "exit after this long (0: until interrupted)")
	return cmd
}

// streamContext is the context of a command that prints a stream until it
// is interrupted (SIGINT, SIGTERM) or, when forTime > 0, for that long.
func streamContext(forTime time.Duration) (context.Context, context.CancelFunc) {
	ctx, stop := SignalContext()
	if forTime <= 0 {
		return ctx, stop
	}
	ctx, cancel := context.WithTimeout(ctx, forTime)
	return ctx, func() { cancel(); stop() }
}
