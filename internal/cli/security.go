package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/internal/certfile"
)

// securityFlags are the TLS and token settings of `serve` and `node`
// (docs/security.md).
type securityFlags struct {
	cert, key       string
	ca, clientCA    string // node only
	tokensFile      string
	adminTokensFile string // node only
	allowedOrigins  []string
	node            bool
	tenancy         tenancyFlags
	tracing         tracingFlags // OpenTelemetry traces (otel.go): node and serve register them
}

func (f *securityFlags) register(cmd *cobra.Command, node bool) {
	f.node = node
	fl := cmd.Flags()
	fl.StringVar(&f.cert, "tls-cert", "", "PEM certificate file: serve the API only over TLS (needs --tls-key)")
	fl.StringVar(&f.key, "tls-key", "", "PEM private key file of --tls-cert")
	if node {
		fl.StringVar(&f.ca, "tls-ca", "", "PEM file of the cluster CA: verifies the other nodes' certificates, server and client (mutual TLS); required with --tls-cert unless --tls-client-ca is given")
		fl.StringVar(&f.clientCA, "tls-client-ca", "", "PEM CA file that verifies peers' client certificates (Raft transport, join and remove), when it differs from --tls-ca")
		fl.StringVar(&f.adminTokensFile, "admin-tokens-file", "", "file of admin bearer tokens, same format as --auth-tokens-file: they authorize join and remove (client tokens never do); the node presents the first to its peers; re-read on SIGHUP")
	}
	fl.StringVar(&f.tokensFile, "auth-tokens-file", "", "file of bearer tokens, one per line (# comments): every request but /healthz and /readyz needs one; re-read on SIGHUP")
	fl.StringSliceVar(&f.allowedOrigins, "allowed-origins", nil, "Origins (scheme://host[:port], or *) whose browser pages may open WebSocket connections and send state-changing REST requests; default: the node's own origin, and for WebSocket pages that present a token of --auth-tokens-file or connect to a loopback address (docs/security.md)")
	f.tenancy.register(cmd)
}

// gatewayOptions are the gateway's security options from the flags: the
// tokens, and the policy (re-read on SIGHUP until ctx ends).
func (f *securityFlags) gatewayOptions(ctx context.Context, toks *gateway.Tokens) (gateway.Options, error) {
	policy, err := f.tenancy.policy(ctx)
	if err != nil {
		return gateway.Options{}, err
	}
	return f.tracing.apply(gateway.Options{Logger: slog.Default(), Tokens: toks, AllowedOrigins: f.allowedOrigins, Policy: policy, Audit: f.tenancy.log}), nil
}

// check validates the combination of flags before anything starts.
func (f *securityFlags) check() error {
	switch {
	case f.cert != "" && f.key == "":
		return errors.New("--tls-cert needs --tls-key (the certificate's private key): give both, or neither for plaintext")
	case f.key != "" && f.cert == "":
		return errors.New("--tls-key needs --tls-cert (the certificate of that key): give both, or neither for plaintext")
	case f.cert == "" && f.ca != "":
		return errors.New("--tls-ca needs --tls-cert and --tls-key: it verifies peers of a node that speaks TLS")
	case f.cert == "" && f.clientCA != "":
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key: peers are verified over TLS")
	case f.node && f.cert != "" && f.ca == "" && f.clientCA == "":
		return errors.New("--tls-cert needs --tls-ca (the CA that signed the nodes' certificates): peers must present a certificate from it; " +
			"the system's public roots would admit anyone holding a public certificate")
	}
	return nil
}

// secure reports whether TLS or tokens are on.
func (f *securityFlags) secure() bool { return f.cert != "" || f.tokensFile != "" }

// serverTLS is the gateway listener's TLS configuration, or nil. A
// rotated certificate and key are picked up without a restart.
func (f *securityFlags) serverTLS() (*tls.Config, error) {
	if f.cert == "" {
		return nil, nil
	}
	keys, err := certfile.Load(f.cert, f.key)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s / --tls-key %s: %w", f.cert, f.key, err)
	}
	keys.OnReload = logCertReload(f.cert)
	return &tls.Config{GetCertificate: keys.GetCertificate, MinVersion: tls.VersionTLS12}, nil
}

// nodeTLS is a node's TLS, or nil: its certificate and key are served
// from the files and picked up when rotated; the CA files are read once.
// --tls-ca (the cluster CA) verifies peers' server certificates and,
// without --tls-client-ca, their client certificates too; one of them is
// required (raftlock.ErrNoPeerCA, also checked by check).
func (f *securityFlags) nodeTLS() (*raftlock.TLS, error) {
	if f.cert == "" {
		return nil, nil
	}
	if f.key == "" {
		return nil, errors.New("--tls-cert needs --tls-key (the certificate's private key)")
	}
	if f.ca == "" && f.clientCA == "" {
		return nil, fmt.Errorf("--tls-cert needs --tls-ca or --tls-client-ca: %w", raftlock.ErrNoPeerCA)
	}
	keys, err := certfile.Load(f.cert, f.key)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s / --tls-key %s: %w", f.cert, f.key, err)
	}
	keys.OnReload = logCertReload(f.cert)
	t := &raftlock.TLS{Certificate: *keys.Current(), Keys: keys}
	if f.ca != "" {
		if t.RootCAs, err = certfile.LoadPool(f.ca); err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
	}
	if f.clientCA != "" {
		if t.ClientCAs, err = certfile.LoadPool(f.clientCA); err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
	}
	return t, nil
}

func logCertReload(file string) func(error) {
	return func(err error) {
		if err != nil {
			slog.Error("TLS certificate reload failed", "file", file, "err", err)
			return
		}
		slog.Info("TLS certificate reloaded", "file", file)
	}
}

// tokens loads --auth-tokens-file (nil without it) and reloads it on
// SIGHUP until ctx ends; a reload that fails keeps the previous tokens.
// first is the file's first token.
func (f *securityFlags) tokens(ctx context.Context) (toks *gateway.Tokens, first string, err error) {
	return loadTokens(ctx, "--auth-tokens-file", f.tokensFile)
}

// adminTokens loads --admin-tokens-file like tokens; first is what the
// node presents to its peers with its membership RPCs.
func (f *securityFlags) adminTokens(ctx context.Context) (toks *gateway.Tokens, first string, err error) {
	return loadTokens(ctx, "--admin-tokens-file", f.adminTokensFile)
}

// loadTokens reads the tokens file path of flag (nil without it) and
// reloads it on SIGHUP until ctx ends; a reload that fails keeps the
// previous tokens.
func loadTokens(ctx context.Context, flag, path string) (toks *gateway.Tokens, first string, err error) {
	if path == "" {
		return nil, "", nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", flag, err)
	}
	list, err := gateway.ParseNamedTokens(bytes.NewReader(data))
	if err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", flag, path, err)
	}
	if toks, err = gateway.NewNamedTokens(list); err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", flag, path, err)
	}
	onHangUp(ctx, func() {
		if err := toks.Reload(path); err != nil {
			slog.Error("SIGHUP: tokens file not reloaded; the previous tokens stay in force", "flag", flag, "err", err)
			return
		}
		slog.Info("SIGHUP: tokens file reloaded", "flag", flag, "file", path, "tokens", toks.Len())
	})
	return toks, list[0].Token, nil
}

// onHangUp calls reload at every SIGHUP until ctx ends (the files a
// server re-reads: tokens, the policy).
func onHangUp(ctx context.Context, reload func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				reload()
			}
		}
	}()
}

// clientSecurity are the TLS and token flags of the client commands.
type clientSecurity struct {
	ca        string
	token     string
	tokenFile string
}

func (f *clientSecurity) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.ca, "tls-ca", "", "PEM CA file to trust: speak TLS (wss://) to the gateways (wss:// or https:// endpoints use TLS with the system's roots without it)")
	fl.StringVar(&f.token, "token", "", "bearer token for a gateway with --auth-tokens-file (visible in the process list: prefer --token-file)")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token (its first non-comment line)")
}

// resolve returns the client TLS configuration (nil: none asked) and token.
func (f *clientSecurity) resolve() (*tls.Config, string, error) {
	if f.token != "" && f.tokenFile != "" {
		return nil, "", errors.New("--token and --token-file exclude each other: give one")
	}
	var cfg *tls.Config
	if f.ca != "" {
		pool, err := certfile.LoadPool(f.ca)
		if err != nil {
			return nil, "", fmt.Errorf("--tls-ca: %w", err)
		}
		cfg = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	token := f.token
	if f.tokenFile != "" {
		data, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, "", fmt.Errorf("--token-file: %w", err)
		}
		list, err := gateway.ParseTokens(bytes.NewReader(data))
		if err != nil {
			return nil, "", fmt.Errorf("--token-file %s: %w", f.tokenFile, err)
		}
		if len(list) == 0 {
			return nil, "", fmt.Errorf("--token-file %s holds no token", f.tokenFile)
		}
		token = list[0]
	}
	return cfg, token, nil
}
