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
	var (
		listen, data string
		sec          securityFlags
		insecure     bool
	)
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Run the fenced data store",
		Long: `Run the fenced data store: an HTTP server that accepts writes guarded by
fencing tokens and rejects stale ones (a token lower than the highest already
accepted for the key), so a lock holder paused past its lease cannot
overwrite the next holder's data.

  POST /write       {"clientID", "fencingToken": {"key", "value"}, "data"}
                    → 200 {"success": true}, or 409 stale_token
  GET  /read/{key}  the latest accepted write of key
  GET  /stats       accepted and rejected counts
  GET  /healthz

Accepted writes are fsynced to --data (an append-only, checksummed log)
before they are acknowledged; a restart replays the file, cuts off a torn
tail (a write cut short by a crash) and refuses a file with a damaged
record. Ctrl-C (SIGINT) or SIGTERM shuts it down cleanly.

With --auth-tokens-file every request but /healthz needs
"Authorization: Bearer <token>" (401 otherwise; the file is re-read on
SIGHUP), as with the gateway. A --listen address that is not loopback needs
--auth-tokens-file, or --insecure-no-auth on a network where every host is
trusted: whoever can write to the store can write the highest fencing token
of a key and lock every legitimate writer out for good.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := sec.check(); err != nil {
				return err
			}
			if err := checkStoreAuth(listen, sec.tokensFile != "", insecure); err != nil {
				return err
			}
			ctx, stop := SignalContext()
			defer stop()
			logger := slog.Default()
			toks, _, err := sec.tokens(ctx)
			if err != nil {
				return err
			}
			tlsCfg, err := sec.serverTLS()
			if err != nil {
				return err
			}
			hopts := fencedstore.HandlerOptions{Logger: logger}
			if toks != nil {
				hopts.Authorize = toks.Authorized
			} else if insecure && !netguard.Loopback(listen) {
				logger.Warn("INSECURE: the fenced store serves without authentication on an address other hosts can reach (--insecure-no-auth)", "listen", listen)
			}
			s, err := fencedstore.Open(data, fencedstore.Options{Logger: logger})
			if err != nil {
				return err
			}
			lim, err := netLimits(cmd)
			if err != nil {
				s.Close()
				return err
			}
			ln, err := listenGuarded(listen, lim, tlsCfg, logger.With("listener", "store"))
			if err != nil {
				s.Close()
				return err
			}
			srv := netguard.NewServer(fencedstore.NewHandler(s, hopts), lim, nil)
			serveErr := make(chan error, 1)
			go func() { serveErr <- srv.Serve(ln) }()
			st := s.Stats()
			scheme := "http"
			if tlsCfg != nil {
				scheme = "https"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "fenced store listening on %s://%s (data %s: %d keys, %d accepted, %d rejected)\n",
				scheme, ln.Addr(), data, st.Keys, st.Accepted, st.Rejected)

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
	sec.register(cmd, false)
	cmd.Flags().BoolVar(&insecure, "insecure-no-auth", false, "INSECURE: serve without --auth-tokens-file on an address that is not loopback; anyone who reaches it can write the highest fencing token of a key and lock out every legitimate writer (only for a network where every host is trusted)")
	registerNetFlags(cmd)
	cmd.MarkFlagRequired("data")
	return cmd
}

// ErrStoreNoAuth: `lockgate store` on an address other hosts can reach,
// without tokens and without --insecure-no-auth.
var ErrStoreNoAuth = errors.New("the fenced store would accept anyone's writes")

// checkStoreAuth refuses to serve the store without authentication where
// other hosts can reach it: secure by default, as the gateway's Raft port.
func checkStoreAuth(listen string, tokens, insecure bool) error {
	if tokens || insecure || netguard.Loopback(listen) {
		return nil
	}
	return fmt.Errorf("%w: --listen %s is not a loopback address and no --auth-tokens-file is given, so anyone who reaches it could write the highest fencing token of a key and lock every legitimate writer out; "+
		"give --auth-tokens-file FILE (one token per line; clients send Authorization: Bearer <token>), "+
		"or --insecure-no-auth to serve without authentication on a network where every host is trusted", ErrStoreNoAuth, listen)
}
