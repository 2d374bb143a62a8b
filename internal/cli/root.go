// Package cli holds lockgate's cobra commands. cmd/lockgate calls Main.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
)

// Main runs the command line args and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	return Execute(NewRoot(stdout, stderr), args, stderr)
}

// Execute runs root, a root NewProgram built, on args and returns the
// process exit code: an error is printed once, after the program's name.
func Execute(root *cobra.Command, args []string, stderr io.Writer) int {
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		var code exitCode
		if errors.As(err, &code) {
			return int(code)
		}
		fmt.Fprintln(stderr, root.Name()+":", err)
		return 1
	}
	return 0
}

// globalFlags are the flags every command takes.
type globalFlags struct {
	logLevel string
	config   string
}

// NewRoot builds the root command with every subcommand. Output goes to
// stdout and stderr so that tests can capture it.
func NewRoot(stdout, stderr io.Writer) *cobra.Command {
	root := NewProgram("lockgate", "A distributed lock service with pluggable backends",
		`lockgate grants leases on keys, each with a fencing token, through one
contract implemented by four backends: a native Raft lock service (raftlock),
Redlock over Redis, PostgreSQL, and the ZooKeeper lock recipe on etcd.`, stdout, stderr,
		func() *cobra.Command { return NewRoot(io.Discard, io.Discard) })
	root.AddCommand(newNodeCmd(), newClusterCmd(), newPeersCmd(), newServeCmd(), newLockCmd(), newRunCmd(), newElectCmd(), newObserveCmd(), newDemoCmd(), newStoreCmd(), newBenchMovedCmd(),
		newHealthcheckCmd())
	root.AddCommand(newRecoverCmd())
	root.AddCommand(newFormatCmd())
	root.AddCommand(newSnapshotCmd())
	root.AddCommand(newAdminCmd())
	return root
}

// NewProgram builds the root command of one of lockgate's programs
// (lockgate, lockgate-bench), named use: the flags every command takes,
// one configuration precedence for every setting (flag > LOCKGATE_*
// environment > --config file > default: config.go), logging, `version`
// `config` and `completion`. The caller adds the program's commands;
// fresh builds another root of the same program (`config print` resolves
// in one).
func NewProgram(use, short, long string, stdout, stderr io.Writer, fresh func() *cobra.Command) *cobra.Command {
	var g globalFlags
	root := &cobra.Command{
		Use:           use,
		Short:         short,
		Long:          long,
		SilenceUsage:  true, // a failed command prints its error, not the usage
		SilenceErrors: true, // Execute prints the error once
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			origins, err := resolveConfig(cmd, fresh, os.LookupEnv, os.Environ(), stderr)
			if err != nil {
				return err
			}
			cmd.SetContext(context.WithValue(cmd.Context(), originsKey{}, origins))
			return setupLogging(stderr, g.logLevel)
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.PersistentFlags().StringVar(&g.config, "config", "", "YAML file of settings named like the flags (precedence: flag > LOCKGATE_* environment > file > default)")
	root.AddCommand(newVersionCmd(), newConfigCmd(fresh))
	// cobra adds `completion bash|zsh|fish|powershell` only inside Execute;
	// adding it here makes it visible to Find (tests, config print).
	root.InitDefaultCompletionCmd()
	return root
}

// newBenchMovedCmd answers `lockgate bench …`: the bench is a program of
// its own, which this binary does not link.
func newBenchMovedCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "bench",
		Short:              "Moved: the bench is its own program, lockgate-bench",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return fmt.Errorf("the bench is a program of its own: run lockgate-bench %s (from a source tree: go run ./cmd/lockgate-bench %s)",
				strings.Join(args, " "), strings.Join(args, " "))
		},
	}
}

// originsKey keys the settings' origins in a running command's context.
type originsKey struct{}

// originsFrom returns the origins PersistentPreRunE stored in ctx.
func originsFrom(ctx context.Context) map[string]origin {
	if ctx == nil {
		return nil
	}
	o, _ := ctx.Value(originsKey{}).(map[string]origin)
	return o
}

// setupLogging installs a structured (log/slog) logger on stderr.
func setupLogging(w io.Writer, level string) error {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToLower(level))); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})))
	// go-redis prints its connection pool's dial failures to stderr, a
	// line per failed dial: a Redis master down for a second (a fault
	// campaign, a restart) would flood the terminal. Each backend reports
	// what a caller needs in its errors; the pool's lines go to debug.
	redis.SetLogger(redisLog{})
	return nil
}

// redisLog routes go-redis's internal log lines to slog at debug level.
type redisLog struct{}

func (redisLog) Printf(ctx context.Context, format string, v ...any) {
	slog.DebugContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}
