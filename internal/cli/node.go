package cli

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/backend/raftlock/store"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/gateway/raftgw"
	"github.com/lockgate/lockgate/internal/certfile"
)

// raftFlags are the settings shared by `node` and `cluster`.
type raftFlags struct {
	dataDir string
	store   string
}

func (f *raftFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.dataDir, "data-dir", "", "directory for the Raft log, stable store and snapshots (required)")
	cmd.Flags().StringVar(&f.store, "store", string(store.KindAuto),
		"durable Raft store: auto (the kind the data directory holds; "+string(store.Default)+" for a new one), wal or bolt (see docs/raftlock-store.md)")
	cmd.MarkFlagRequired("data-dir")
}

// SignalContext is canceled by an interrupt or SIGTERM: a command stops
// cleanly on either.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func newNodeCmd() *cobra.Command {
	var (
		rf        raftFlags
		id        string
		raftAddr  string
		apiAddr   string
		bootstrap bool
		join      []string
		apiListen string
		advertise string
		raftDial  map[string]string
		faults    bool
		insecure  bool
		sec       securityFlags
		prof      pprofFlags
	)
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run one raftlock server",
		Long: `Run one raftlock server: the Raft transport on --raft-addr (default
127.0.0.1:8080+id) and the API — the WebSocket/REST gateway, the membership
endpoints, /metrics — on --api-addr (default 127.0.0.1:50050+id). A follower
redirects lock requests to the leader.
Start the first server of a new cluster with --bootstrap and the others with
--join pointing at any member's API address. A restarted server needs
neither. Ctrl-C (SIGINT) or SIGTERM shuts it down cleanly.

With --tls-cert, --tls-key and --tls-ca the Raft transport and the API
serve only TLS, and nodes authenticate each other with certificates from
the cluster CA (--tls-ca; --tls-client-ca if peers' client certificates
come from another CA): the Raft port admits no other party. Without TLS,
a Raft address that is not loopback needs --insecure-raft-no-peer-auth.
With --auth-tokens-file every API request except /healthz and /readyz
needs a bearer token. Join and remove need an admin credential: a peer
certificate, or a token from --admin-tokens-file (the node presents the
file's first token to its peers); with neither, they are open only on a
loopback API without client tokens. See docs/security.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if bootstrap && len(join) > 0 {
				return errors.New("--bootstrap and --join exclude each other: bootstrap forms a new cluster, join enters an existing one")
			}
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
			nodeTLS, err := sec.nodeTLS()
			if err != nil {
				return err
			}
			kind, err := store.ParseKind(rf.store)
			if err != nil {
				return err
			}
			cfg := raftlock.DefaultConfig(id)
			cfg.DataDir = rf.dataDir
			cfg.Store = kind
			cfg.Bootstrap = bootstrap
			if raftAddr != "" {
				cfg.RaftAddr = raftAddr
			}
			if apiAddr != "" {
				cfg.APIAddr = apiAddr
			}
			cfg.APIListen = apiListen
			cfg.RaftAdvertise = advertise
			cfg.PeerDial = raftDial
			cfg.FaultInjection = faults
			cfg.Logger = slog.Default()
			cfg.RaftLogOutput = cmd.ErrOrStderr()
			cfg.TLS = nodeTLS
			if cfg.HTTPLimits, err = netLimits(cmd); err != nil {
				return err
			}
			cfg.InsecureNoPeerAuth = insecure
			if cfg.Audit, err = sec.tenancy.openAudit(id); err != nil {
				return err
			}
			defer sec.tenancy.closeAudit()
			ctx, stop := SignalContext()
			defer stop()
			toks, _, err := sec.tokens(ctx)
			if err != nil {
				return err
			}
			admin, first, err := sec.adminTokens(ctx)
			if err != nil {
				return err
			}
			// Only non-nil sets: a nil *gateway.Tokens in the interface
			// would read as configured.
			if toks != nil {
				cfg.ClientTokens = toks
			}
			if admin != nil {
				cfg.AdminTokens = admin
				cfg.MembershipToken = first
			}
			s, err := raftlock.StartServer(ctx, cfg, join)
			if err != nil {
				return err
			}
			gwOpts, err := sec.gatewayOptions(ctx, toks)
			if err != nil {
				s.Shutdown()
				return err
			}
			gw := raftgw.Serve(s, gwOpts)
			defer gw.Close()
			scheme := "http"
			if nodeTLS != nil {
				scheme = "https"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "raftlock node %s: raft %s, api %s, web console %s://%s/ui/\n", id, s.RaftAddr(), s.APIAddr(), scheme, s.APIAddr())
			select {
			case <-ctx.Done():
			case <-s.Node.Halted():
				// It met a format it does not read: it stopped rather
				// than diverge, and says so with a non-zero exit.
				s.Shutdown()
				return fmt.Errorf("node %s stopped: %w", id, s.Node.HaltErr())
			}
			slog.Info("shutting down", "node", id)
			return s.Shutdown()
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVar(&id, "id", "", "server id, unique in the cluster and stable across restarts (required)")
	cmd.Flags().StringVar(&raftAddr, "raft-addr", "", "Raft transport address (default 127.0.0.1:8080+id)")
	cmd.Flags().StringVar(&advertise, "raft-advertise", "", "Raft address peers dial, when it differs from --raft-addr (a 0.0.0.0 bind, NAT, a container name); keep it stable across restarts")
	cmd.Flags().StringVar(&apiAddr, "api-addr", "", "API address, as clients and peers dial it (default 127.0.0.1:50050+id)")
	cmd.Flags().BoolVar(&bootstrap, "bootstrap", false, "form a new cluster with this server as its first member")
	cmd.Flags().StringSliceVar(&join, "join", nil, "API address(es) of existing members to join through")
	cmd.Flags().StringVar(&apiListen, "api-listen", "", "address the API listens on, when clients reach it at --api-addr through a proxy (default --api-addr)")
	cmd.Flags().StringToStringVar(&raftDial, "raft-dial", nil, "dial these peers' Raft addresses through other addresses (proxies): raftaddr=dialaddr,...")
	cmd.Flags().BoolVar(&insecure, "insecure-raft-no-peer-auth", false, "INSECURE: run the Raft transport without TLS on an address that is not loopback; anyone who reaches it can rewrite the lock table (only for a network where every host is trusted)")
	cmd.Flags().BoolVar(&faults, "fault-injection", false, "serve POST /v1/debug/clock to skew this node's clock (chaos testing only; never in production)")
	sec.register(cmd, true)
	registerNetFlags(cmd)
	prof.register(cmd)
	sec.tracing.register(cmd)
	cmd.MarkFlagRequired("id")
	return cmd
}

func newClusterCmd() *cobra.Command {
	var (
		rf    raftFlags
		nodes int
	)
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Run a local raftlock cluster in one process",
		Long: `Run --nodes raftlock servers in this process, with ids 1..N, Raft on
127.0.0.1:8080+id and the API (gateway and membership) on 127.0.0.1:50050+id,
each in DATA-DIR/node-<id>.
Node 1 bootstraps and the others join it; run again on the same --data-dir to
restart the cluster from disk. Ctrl-C shuts every node down cleanly.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if nodes < 1 || nodes > 9 {
				return fmt.Errorf("--nodes %d: want 1 to 9", nodes)
			}
			kind, err := store.ParseKind(rf.store)
			if err != nil {
				return err
			}
			ctx, stop := SignalContext()
			defer stop()
			startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			c, err := raftlock.StartLocalCluster(startCtx, nodes, rf.dataDir, func(cfg *raftlock.Config) {
				cfg.Store = kind
				cfg.Logger = slog.Default()
			})
			if err != nil {
				return err
			}
			l, err := c.Leader(startCtx)
			if err != nil {
				c.Shutdown()
				return err
			}
			for _, s := range c.Servers {
				defer raftgw.Serve(s, gateway.Options{Logger: slog.Default()}).Close()
			}
			out := cmd.OutOrStdout()
			for _, n := range c.Nodes() {
				fmt.Fprintf(out, "node %s: raft %s, api %s, web console http://%s/ui/\n", n.ID(), n.RaftAddr(), n.APIAddr(), n.APIAddr())
			}
			fmt.Fprintf(out, "leader: node %s (api %s)\n", l.ID(), l.APIAddr())
			<-ctx.Done()
			slog.Info("shutting down the cluster")
			c.Shutdown()
			return nil
		},
	}
	rf.register(cmd)
	cmd.Flags().IntVar(&nodes, "nodes", 3, "number of servers")
	return cmd
}

func newPeersCmd() *cobra.Command {
	var (
		addr    string
		asJSON  bool
		timeout time.Duration
		tlsCA   string
	)
	cmd := &cobra.Command{
		Use:   "peers",
		Short: "Print a raftlock cluster's members and its leader",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			mc := &raftlock.MembershipClient{}
			if tlsCA != "" {
				pool, err := certfile.LoadPool(tlsCA)
				if err != nil {
					return fmt.Errorf("--tls-ca: %w", err)
				}
				mc.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
			}
			pl, err := mc.FetchPeers(ctx, addr)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(pl)
			}
			leader := pl.LeaderID
			if leader == "" {
				leader = "(none known)"
			}
			fmt.Fprintf(out, "leader: %s  term: %d  (answered by node %s)\n", leader, pl.Term, pl.AnsweredBy)
			ids := make([]string, 0, len(pl.PeerAddress))
			for id := range pl.PeerAddress {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tRAFT\tAPI\tROLE")
			for _, id := range ids {
				role := "voter"
				if !contains(pl.Voters, id) {
					role = "nonvoter"
				}
				if id == pl.LeaderID {
					role = "leader"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", id, pl.PeerAddress[id], pl.APIAddress[id], role)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:50051", "API address of any member")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the peer list as JSON")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for the answer")
	cmd.Flags().StringVar(&tlsCA, "tls-ca", "", "PEM CA file to trust: ask a node that serves TLS (over https)")
	return cmd
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}
