package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// defaultEndpoints are the API addresses of `lockgate cluster`'s nodes.
var defaultEndpoints = []string{"127.0.0.1:50051", "127.0.0.1:50052", "127.0.0.1:50053"}

// exitCode makes Main exit with a status without printing an error (the
// command already reported, or the status is a child's).
type exitCode int

func (e exitCode) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// ExitLeaseLost is `lockgate run`'s status when the lease was lost while
// the command ran (the command was stopped): EX_TEMPFAIL.
const ExitLeaseLost = 75

type clientFlags struct {
	endpoints []string
	clientID  string
	timeout   time.Duration
	sec       clientSecurity
}

func (f *clientFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringSliceVar(&f.endpoints, "endpoints", defaultEndpoints, "gateway addresses (any raftlock node, or lockgate serve)")
	cmd.Flags().StringVar(&f.clientID, "client-id", "", "owner id recorded with the lock (default: a random one)")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 10*time.Second, "how long a request may take")
	f.sec.register(cmd)
}

func (f *clientFlags) dial() (*client.Client, error) {
	tlsCfg, token, err := f.sec.resolve()
	if err != nil {
		return nil, err
	}
	return client.New(f.endpoints, client.Options{ClientID: f.clientID, RequestTimeout: f.timeout, TLSConfig: tlsCfg, Token: token})
}

// dialFor is dial for a command that needs --key.
func (f *clientFlags) dialFor(key string) (*client.Client, error) {
	if key == "" {
		return nil, errors.New("--key is required")
	}
	return f.dial()
}

// do runs one request with a connected client, bounded by --timeout.
func (f *clientFlags) do(op func(context.Context, *client.Client) error) error {
	c, err := f.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	return op(ctx, c)
}

// leaseJSON is what `lock acquire` prints and `lock renew|release` accept.
type leaseJSON struct {
	Key          string `json:"key"`
	Owner        string `json:"owner"`
	LockToken    string `json:"lock_token"`
	FencingToken uint64 `json:"fencing_token"`
	TTLMS        int64  `json:"ttl_ms"`
}

func newLockCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lock",
		Short: "Acquire, renew, release or inspect a lock from the shell",
		Long: `Acquire, renew, release or inspect a lock through a gateway. acquire prints
the lease as JSON; pass its lock_token and fencing_token to renew and release.
The lease outlives the command until its TTL: renew it, or use lockgate run.`,
	}
	cmd.AddCommand(newLockAcquireCmd(), newLockLeaseCmd("renew"), newLockLeaseCmd("release"), newLockInspectCmd(), newLockWatchCmd())
	return cmd
}

func newLockAcquireCmd() *cobra.Command {
	var (
		cf    clientFlags
		ttl   time.Duration
		wait  time.Duration
		value string
		hold  holdFlags
	)
	cmd := &cobra.Command{
		Use:   "acquire KEY",
		Short: "Acquire KEY and print the lease as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			opts, err := hold.options(lock.AcquireOptions{TTL: ttl, Value: []byte(value)})
			if err != nil {
				return err
			}
			var lease *lock.Lease
			if wait > 0 {
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				defer cancel()
				lease, err = c.Acquire(ctx, args[0], opts)
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), cf.timeout)
				defer cancel()
				lease, err = c.TryAcquire(ctx, args[0], opts)
			}
			if err != nil {
				return err
			}
			return printJSON(cmd, leaseJSON{Key: lease.Key, Owner: lease.Owner, LockToken: lease.Handle,
				FencingToken: uint64(lease.Token), TTLMS: lease.TTL().Milliseconds()})
		},
	}
	cf.register(cmd)
	cmd.Flags().DurationVar(&ttl, "ttl", 30*time.Second, "lease TTL")
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for the lock (0: fail at once if held)")
	cmd.Flags().StringVar(&value, "value", "", "value stored with the lock")
	hold.register(cmd)
	return cmd
}

func newLockLeaseCmd(verb string) *cobra.Command {
	var (
		cf           clientFlags
		lockToken    string
		fencingToken uint64
		ttl          time.Duration
	)
	cmd := &cobra.Command{
		Use:   verb + " KEY --lock-token T --fencing-token N",
		Short: map[string]string{"renew": "Renew a lease", "release": "Release a lease"}[verb],
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			lease := kit.NewLease(kit.Grant{Key: args[0], Handle: lockToken, Token: lock.Token(fencingToken), TTL: ttl, Sent: time.Now()})
			return cf.do(func(ctx context.Context, c *client.Client) error {
				if verb == "renew" {
					if err := c.Renew(ctx, lease, ttl); err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "renewed %s for %v\n", args[0], ttl)
					return nil
				}
				if err := c.Release(ctx, lease); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "released %s\n", args[0])
				return nil
			})
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVar(&lockToken, "lock-token", "", "the lease's lock_token (required)")
	cmd.Flags().Uint64Var(&fencingToken, "fencing-token", 0, "the lease's fencing_token (required)")
	cmd.MarkFlagRequired("lock-token")
	cmd.MarkFlagRequired("fencing-token")
	if verb == "renew" {
		cmd.Flags().DurationVar(&ttl, "ttl", 30*time.Second, "new TTL")
	} else {
		ttl = lock.DefaultTTL
	}
	return cmd
}

func newLockInspectCmd() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "inspect KEY",
		Short: "Show who holds KEY",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return cf.do(func(ctx context.Context, c *client.Client) error {
				info, err := c.Inspect(ctx, args[0])
				if err != nil {
					return err
				}
				out := map[string]any{"key": info.Key, "owner": info.Owner, "fencing_token": info.Token, "waiters": info.Waiters}
				if info.Value != nil {
					out["value"] = string(info.Value)
				}
				if !info.Expires.IsZero() {
					out["expires_in_ms"] = max(time.Until(info.Expires).Milliseconds(), 0)
				}
				out["mode"] = info.Mode.String()
				if info.Permits > 0 {
					out["permits"] = info.Permits
				}
				if len(info.Holders) > 0 {
					hs := make([]map[string]any, len(info.Holders))
					for i, h := range info.Holders {
						hs[i] = map[string]any{"owner": h.Owner, "fencing_token": h.Token,
							"expires_in_ms": max(time.Until(h.Expires).Milliseconds(), 0)}
						if h.Value != nil {
							hs[i]["value"] = string(h.Value)
						}
					}
					out["holders"] = hs
				}
				return printJSON(cmd, out)
			})
		},
	}
	cf.register(cmd)
	return cmd
}

func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newRunCmd() *cobra.Command {
	var (
		cf        clientFlags
		key       string
		ttl       time.Duration
		wait      time.Duration
		killAfter time.Duration
		hold      holdFlags
	)
	cmd := &cobra.Command{
		Use:   "run --key K [--ttl D] [--shared | --permits N] -- CMD [ARGS...]",
		Short: "Run a command while holding a lock",
		Long: `Acquire --key (waiting up to --wait), run CMD while the lock is held and
renewed, and release it when CMD exits. CMD gets the fencing token in
LOCKGATE_FENCING_TOKEN (and the key in LOCKGATE_LOCK_KEY): pass it to every
write to a fenced resource. If the lease is lost while CMD runs, CMD gets
SIGTERM (SIGKILL after --kill-after) and lockgate exits with status 75;
otherwise it exits with CMD's status. Like flock(1), etcdctl lock, consul lock.

--shared holds the key as one of many readers (a read-write lock: an
exclusive holder waits for every reader, and readers queued behind a
waiting exclusive holder wait for it); --permits N holds one of N permits
of a semaphore. --lock-delay D keeps the key from anyone for D after a
lease of this command expires (not after a release). Each needs a backend
that offers it; others refuse with "not supported".`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.dialFor(key)
			if err != nil {
				return err
			}
			defer c.Close()
			actx, cancel := context.WithTimeout(context.Background(), wait)
			opts, err := hold.options(lock.AcquireOptions{TTL: ttl, AutoRenew: true})
			if err != nil {
				cancel()
				return err
			}
			lease, err := c.Acquire(actx, key, opts)
			cancel()
			if err != nil {
				return fmt.Errorf("acquiring %q: %w", key, err)
			}
			return holdWhile(cmd, lease, args, killAfter, "releasing", func() error {
				rctx, rcancel := context.WithTimeout(context.Background(), cf.timeout)
				defer rcancel()
				return c.Release(rctx, lease)
			})
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVar(&key, "key", "", "the lock to hold (required)")
	cmd.Flags().DurationVar(&ttl, "ttl", 15*time.Second, "lease TTL; renewed every TTL/3 while CMD runs")
	cmd.Flags().DurationVar(&wait, "wait", time.Minute, "how long to wait for the lock")
	cmd.Flags().DurationVar(&killAfter, "kill-after", 5*time.Second, "after the lease is lost: SIGKILL CMD if it has not exited this long after SIGTERM")
	hold.register(cmd)
	return cmd
}

// holdFlags are how a lease holds its key: --shared, --permits, --lock-delay.
type holdFlags struct {
	shared    bool
	permits   int
	lockDelay time.Duration
}

func (h *holdFlags) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&h.shared, "shared", false, "hold the key shared (a read lock) instead of exclusively")
	cmd.Flags().IntVar(&h.permits, "permits", 0, "hold one of N permits of a semaphore on the key")
	cmd.Flags().DurationVar(&h.lockDelay, "lock-delay", 0, "after this lease expires (not when released), nobody gets the key for this long")
}

// options adds the flags to opts; --shared and --permits exclude each
// other (a semaphore's permits are already shared holds).
func (h *holdFlags) options(opts lock.AcquireOptions) (lock.AcquireOptions, error) {
	if h.shared && h.permits != 0 {
		return opts, errors.New("--shared and --permits exclude each other: a permit is a shared hold already")
	}
	if h.shared {
		opts.Mode = lock.ModeShared
	}
	opts.Permits, opts.LockDelay = h.permits, h.lockDelay
	return opts, nil
}

// holdWhile runs the command while lease holds (runHolding), then, unless
// the lease was lost, gives it up with end (its failure reported as
// "lockgate: <what> <key>: …"), and returns the command's exit status as
// an exitCode (nil for 0).
func holdWhile(cmd *cobra.Command, lease *lock.Lease, args []string, killAfter time.Duration, what string, end func() error, env ...string) error {
	code, lost := runHolding(cmd, lease, args, killAfter, env...)
	if !lost {
		if err := end(); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "lockgate: %s %q: %v\n", what, lease.Key, err)
		}
	}
	if code != 0 {
		return exitCode(code)
	}
	return nil
}

// runHolding runs the command while lease holds and returns its exit status,
// or ExitLeaseLost (and true) when the lease was lost and the command
// stopped. env adds variables to the command's environment.
func runHolding(cmd *cobra.Command, lease *lock.Lease, args []string, killAfter time.Duration, env ...string) (int, bool) {
	child := exec.Command(args[0], args[1:]...)
	child.Stdin, child.Stdout, child.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	child.Env = append(os.Environ(),
		"LOCKGATE_FENCING_TOKEN="+strconv.FormatUint(uint64(lease.Token), 10),
		"LOCKGATE_LOCK_KEY="+lease.Key)
	child.Env = append(child.Env, env...)
	if err := child.Start(); err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "lockgate: %v\n", err)
		return 127, false
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	lost := false
	for {
		select {
		case err := <-exited:
			if lost {
				return ExitLeaseLost, true
			}
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return 128 + int(ws.Signal()), false
				}
				return ee.ExitCode(), false
			}
			if err != nil {
				return 1, false
			}
			return 0, false
		case s := <-sigs:
			child.Process.Signal(s) // pass Ctrl-C and SIGTERM on to the command
		case <-lease.Done():
			if lost {
				continue
			}
			lost = true
			fmt.Fprintf(cmd.ErrOrStderr(), "lockgate: lease on %q lost (%v); stopping the command\n", lease.Key, lease.Err())
			child.Process.Signal(syscall.SIGTERM)
			time.AfterFunc(killAfter, func() { child.Process.Kill() })
		}
	}
}
