package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/internal/certfile"
)

// adminClientFlags are how an operator's command reaches a raftlock
// cluster with an admin credential: the members' API addresses, an admin
// token file, and TLS (a CA to trust, a client certificate from the
// cluster CA).
type adminClientFlags struct {
	endpoints       []string
	adminTokenFile  string
	tlsCA           string
	tlsCert, tlsKey string
}

func (f *adminClientFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringSliceVar(&f.endpoints, "endpoints", []string{"127.0.0.1:50051"}, "API address(es) of cluster members, tried in order")
	fl.StringVar(&f.adminTokenFile, "admin-token-file", "", "file whose first token line is an admin bearer token (the nodes' --admin-tokens-file format)")
	fl.StringVar(&f.tlsCA, "tls-ca", "", "PEM CA file to trust: the nodes serve TLS (https)")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "PEM client certificate from the cluster CA: an admin credential (needs --tls-key)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
}

// client returns the membership client the flags describe.
func (f *adminClientFlags) client() (*raftlock.MembershipClient, error) {
	if len(f.endpoints) == 0 {
		return nil, errors.New("--endpoints: give at least one member's API address")
	}
	mc := &raftlock.MembershipClient{}
	if f.adminTokenFile != "" {
		tok, err := firstToken(f.adminTokenFile)
		if err != nil {
			return nil, err
		}
		mc.Token = tok
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if f.tlsCA != "" || f.tlsCert != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if f.tlsCA != "" {
			pool, err := certfile.LoadPool(f.tlsCA)
			if err != nil {
				return nil, fmt.Errorf("--tls-ca: %w", err)
			}
			cfg.RootCAs = pool
		}
		if f.tlsCert != "" {
			cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
			if err != nil {
				return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		mc.TLS = cfg
	}
	return mc, nil
}

// run calls fn with the flags' client and a context bounded by timeout.
func (f *adminClientFlags) run(cmd *cobra.Command, timeout time.Duration, fn func(context.Context, *raftlock.MembershipClient) error) error {
	mc, err := f.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	return fn(ctx, mc)
}

// firstToken reads the first token of a token file (one per line, #
// comments).
func firstToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--admin-token-file: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			return line, nil
		}
	}
	return "", fmt.Errorf("--admin-token-file %s: no token in it", path)
}
