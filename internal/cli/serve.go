package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/gateway/raftgw"
	"github.com/lockgate/lockgate/internal/backends"
	"github.com/lockgate/lockgate/internal/certfile"
	"github.com/lockgate/lockgate/internal/netguard"
	"github.com/lockgate/lockgate/lock"
)

func newServeCmd() *cobra.Command {
	var (
		backend    string
		listen     string
		dataDir    string
		nodes      int
		redisAddrs []string
		pgURL      string
		etcdEPs    []string
		sec        securityFlags
		prof       pprofFlags
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the lock gateway over a backend",
		Long: `Run the WebSocket/REST gateway (docs/protocol.md) on --listen over a backend.

--backend raft (the default) embeds a local raftlock cluster of --nodes
servers and serves the gateway on --listen over whichever node leads; no
external servers are needed. The embedded nodes take free loopback ports
for Raft and their own APIs (logged at start) and keep them across restarts
from the same --data-dir (DATA-DIR/serve-addrs.json). Without --data-dir the
cluster lives in a temporary directory that is removed at exit.

--backend redlock serves it over Redlock on the independent Redis masters of
--redis-addrs (one address: plain single-Redis locking).

--backend postgres serves it over PostgreSQL row locks (INSERT … ON CONFLICT)
in the database of --postgres-url; the lock table is created if missing.

--backend etcd serves it over the ZooKeeper lock recipe on the etcd cluster of
--etcd-endpoints.

docs/backends.md compares what each backend guarantees.

With --tls-cert and --tls-key the gateway serves only TLS (https://, wss://);
with --auth-tokens-file every request except /healthz and /readyz needs a
bearer token. With either, --backend raft does not serve the embedded nodes'
own gateways, and the embedded nodes speak mutual TLS among themselves with
a CA made in memory at start. See docs/security.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := sec.check(); err != nil {
				return err
			}
			stopProf, err := prof.start()
			if err != nil {
				return err
			}
			defer stopProf()
			stopTraces, err := sec.tracing.start(cmd.Context())
			if err != nil {
				return err
			}
			defer stopTraces()
			if _, err := sec.tenancy.openAudit("serve"); err != nil {
				return err
			}
			defer sec.tenancy.closeAudit()
			if backend != backends.Raft {
				spec := backends.Spec{Redlock: redisAddrs, Postgres: pgURL, Etcd: etcdEPs}
				info, err := backends.ForServing(backend)
				if err != nil {
					return fmt.Errorf("--backend: %w", err)
				}
				if !spec.Has(info.Ref) {
					return fmt.Errorf("--backend %s needs %s", backend, serveServerFlags[info.Name])
				}
				return serveLocker(cmd, listen, &sec, "backend "+backends.Describe(info.Ref, spec)+" ("+info.Mode+")",
					func(ctx context.Context) (lock.Locker, error) {
						return backends.Open(ctx, info.Ref, spec, backends.Options{})
					})
			}
			// --backend raft runs a cluster of its own rather than
			// reaching existing servers: the one backend serve does not
			// open through backends.Open.
			if nodes < 1 || nodes > 9 {
				return fmt.Errorf("--nodes %d: want 1 to 9", nodes)
			}
			ctx, stop := SignalContext()
			defer stop()
			if dataDir == "" {
				dir, err := os.MkdirTemp("", "lockgate-serve-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				dataDir = dir
			}
			startCtx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			// A secured gateway must not sit beside open doors: the
			// embedded nodes then talk mutual TLS with a CA that exists
			// only in this process, and serve no gateway of their own.
			var internal *certfile.MemoryCA
			if sec.secure() {
				var err error
				if internal, err = certfile.NewMemoryCA("lockgate serve internal CA"); err != nil {
					return err
				}
			}
			addrs, err := loadEmbeddedAddrs(dataDir)
			if err != nil {
				return err
			}
			var tlsErr error
			c, err := raftlock.StartLocalCluster(startCtx, nodes, dataDir, func(cfg *raftlock.Config) {
				cfg.Logger = slog.Default()
				cfg.Audit = sec.tenancy.log
				addrs.configure(cfg)
				if internal != nil {
					// Each node its own certificate; the internal CA
					// verifies peers, as servers and as clients.
					cert, err := internal.Issue("127.0.0.1", "localhost")
					tlsErr = errors.Join(tlsErr, err)
					cfg.TLS = &raftlock.TLS{Certificate: cert, RootCAs: internal.Pool(), ClientCAs: internal.Pool()}
				}
			})
			if err = errors.Join(err, tlsErr); err != nil {
				if c != nil {
					c.Shutdown()
				}
				return err
			}
			defer c.Shutdown()
			if err := addrs.save(c); err != nil {
				return err
			}
			for _, n := range c.Nodes() {
				slog.Info("embedded raftlock node", "id", n.ID(), "raft", n.RaftAddr(), "api", n.APIAddr())
			}
			if internal == nil {
				for _, s := range c.Servers {
					defer raftgw.Serve(s, sec.tracing.apply(gateway.Options{Logger: slog.Default()})).Close()
					fmt.Fprintf(cmd.OutOrStdout(), "web console of embedded node %s: http://%s/ui/\n", s.ID(), s.APIAddr())
				}
			} else {
				slog.Info("no web console: the embedded nodes of a secured serve serve no API of their own; run `lockgate node` for one (docs/console.md)")
			}
			return serveGateway(ctx, cmd, listen, &sec, c.Locker(), fmt.Sprintf("backend raft, %d nodes in %s", nodes, dataDir))
		},
	}
	cmd.Flags().StringVar(&backend, "backend", backends.Raft, "lock backend: "+strings.Join(backends.Ours, ", ")+" (or name:variant, e.g. redlock:single)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:50050", "address of the gateway")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "raft: directory of the embedded cluster (default: a temporary one)")
	cmd.Flags().IntVar(&nodes, "nodes", 3, "raft: servers in the embedded cluster")
	cmd.Flags().StringSliceVar(&redisAddrs, "redis-addrs", nil, "redlock: addresses of the N independent Redis masters (N=1: single Redis)")
	cmd.Flags().StringVar(&pgURL, "postgres-url", "", "postgres: connection URL of the database holding the lock table")
	cmd.Flags().StringSliceVar(&etcdEPs, "etcd-endpoints", nil, "etcd: client URLs of the etcd cluster")
	sec.register(cmd, false)
	registerNetFlags(cmd)
	prof.register(cmd)
	sec.tracing.register(cmd)
	return cmd
}

// serveServerFlags says, per backend that serve reaches over existing
// servers, which flag names them: the hint when it is missing.
var serveServerFlags = map[string]string{
	backends.Redlock:  "--redis-addrs host:port[,host:port...]",
	backends.Postgres: "--postgres-url postgres://user@host:port/db",
	backends.Etcd:     "--etcd-endpoints http://host:port[,...]",
}

// serveLocker serves the gateway over the Locker that open returns.
func serveLocker(cmd *cobra.Command, listen string, sec *securityFlags, what string, open func(context.Context) (lock.Locker, error)) error {
	ctx, stop := SignalContext()
	defer stop()
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := open(openCtx)
	if err != nil {
		return err
	}
	defer l.Close()
	return serveGateway(ctx, cmd, listen, sec, l, what)
}

// serveGateway serves a gateway over l on listen (TLS and tokens as sec
// says) until ctx ends (SIGINT or SIGTERM).
func serveGateway(ctx context.Context, cmd *cobra.Command, listen string, sec *securityFlags, l lock.Locker, what string) error {
	tlsCfg, err := sec.serverTLS()
	if err != nil {
		return err
	}
	toks, _, err := sec.tokens(ctx)
	if err != nil {
		return err
	}
	lim, err := netLimits(cmd)
	if err != nil {
		return err
	}
	ln, err := listenGuarded(listen, lim, tlsCfg, slog.Default().With("listener", "gateway"))
	if err != nil {
		return fmt.Errorf("--listen %s: %w", listen, err)
	}
	gwOpts, err := sec.gatewayOptions(ctx, toks)
	if err != nil {
		ln.Close()
		return err
	}
	g := gateway.New(l, gwOpts)
	defer g.Close()
	srv := netguard.NewServer(g, lim, slog.NewLogLogger(slog.Default().Handler(), slog.LevelDebug))
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("gateway stopped", "err", err)
		}
	}()
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	auth := "no authentication"
	if toks != nil {
		auth = fmt.Sprintf("%d bearer tokens", toks.Len())
	}
	fmt.Fprintf(cmd.OutOrStdout(), "lockgate gateway on %s (%s; %s, %s)\n", ln.Addr(), what, scheme, auth)
	<-ctx.Done()
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shut)
}
