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
	root := NewRoot(stdout, stderr)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		var code exitCode
		if errors.As(err, &code) {
			return int(code)
		}
		fmt.Fprintln(stderr, "lockgate:", err)
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
	var g globalFlags
	root := &cobra.Command{
		Use:   "lockgate",
		Short: "A distributed lock service with pluggable backends",
		Long: `lockgate grants leases on keys, each with a fencing token, through one
contract implemented by four backends: a native Raft lock service (raftlock),
Redlock over Redis, PostgreSQL, and the ZooKeeper lock recipe on etcd.`,
		SilenceUsage:  true, // a failed command prints its error, not the usage
		SilenceErrors: true, // Main prints the error once
		// Every command's settings: flag > LOCKGATE_* environment >
		// --config file > default (config.go).
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			origins, err := resolveConfig(cmd, os.LookupEnv, os.Environ(), stderr)
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
	root.AddCommand(newVersionCmd(), newNodeCmd(), newClusterCmd(), newPeersCmd(), newServeCmd(), newLockCmd(), newRunCmd(), newElectCmd(), newObserveCmd(), newDemoCmd(), newStoreCmd(), newBenchCmd(),
		newConfigCmd(), newHealthcheckCmd())
	root.AddCommand(newRecoverCmd())
	root.AddCommand(newFormatCmd())
	root.AddCommand(newSnapshotCmd())
	root.AddCommand(newAdminCmd())
	// cobra adds `completion bash|zsh|fish|powershell` only inside Execute;
	// adding it here makes it visible to Find (tests, config print).
	root.InitDefaultCompletionCmd()
	return root
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
