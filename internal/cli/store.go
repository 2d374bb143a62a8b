package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/fencedstore"
	"github.com/lockgate/lockgate/internal/netguard"
)

func newStoreCmd() *cobra.Command {
	var listen, data string
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Run the fenced data store",
		Long: `Run seed 000's data store: an HTTP server that accepts writes guarded by
fencing tokens and rejects stale ones (a token lower than the highest already
accepted for the key), so a lock holder paused past its lease cannot
overwrite the next holder's data.

  POST /write       {"clientID", "fencingToken": {"key", "value"}, "data"}
                    → 200 {"success": true}, or 409 stale_token
  GET  /read/{key}  the latest accepted write of key
  GET  /stats       accepted and rejected counts
  GET  /healthz

Accepted writes are fsynced to --data (an append-only, checksummed log)
before they are acknowledged; a restart replays the file and cuts off a torn
tail. Ctrl-C (SIGINT) or SIGTERM shuts it down cleanly.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signalContext()
			defer stop()
			logger := slog.Default()
			s, err := fencedstore.Open(data, fencedstore.Options{Logger: logger})
			if err != nil {
				return err
			}
			lim, err := netLimits(cmd)
			if err != nil {
				s.Close()
				return err
			}
			ln, err := listenGuarded(listen, lim, nil, logger.With("listener", "store"))
			if err != nil {
				s.Close()
				return err
			}
			srv := netguard.NewServer(fencedstore.NewHandler(s, fencedstore.HandlerOptions{Logger: logger}), lim, nil)
			serveErr := make(chan error, 1)
			go func() { serveErr <- srv.Serve(ln) }()
			st := s.Stats()
			fmt.Fprintf(cmd.OutOrStdout(), "fenced store listening on http://%s (data %s: %d keys, %d accepted, %d rejected)\n",
				ln.Addr(), data, st.Keys, st.Accepted, st.Rejected)

			select {
			case err = <-serveErr:
			case <-ctx.Done():
				slog.Info("shutting down the fenced store")
				shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err = srv.Shutdown(shutdownCtx)
				cancel()
				<-serveErr
			}
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			return errors.Join(err, s.Close())
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8000", "HTTP listen address")
	cmd.Flags().StringVar(&data, "data", "", "data file (created if missing) (required)")
	registerNetFlags(cmd)
	cmd.MarkFlagRequired("data")
	return cmd
}
