package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
)

// DefaultHealthURL is what `lockgate healthcheck` probes without --url: the
// gateway of `lockgate serve --listen 0.0.0.0:50050` in the container image.
const DefaultHealthURL = "http://127.0.0.1:50050/healthz"

func newHealthcheckCmd() *cobra.Command {
	var (
		url     string
		timeout time.Duration
		caFile  string
	)
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Exit 0 if an HTTP health endpoint answers 2xx, 1 otherwise",
		Long: `Probe an HTTP health endpoint (GET --url) and exit 0 if it answers 2xx within
--timeout, 1 otherwise. The container image has no shell or curl; Docker's
HEALTHCHECK and docker-compose's healthcheck run this instead.

Every lockgate server has a /healthz: a node's and a gateway's on their API
address, the fenced store's on its --listen. /readyz on a node or gateway is
stricter: 503 until the backend can serve (a raftlock node: until it knows a
leader). /healthz answers without a bearer token.

For a server that serves only TLS, probe https://… and give --tls-ca (the
same setting, LOCKGATE_TLS_CA, as the server's own CA file); the server's
certificate must then name the host of --url (127.0.0.1 in a container).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			client, err := probeClient(caFile)
			if err != nil {
				return err
			}
			if err := probe(ctx, client, url); err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), "unhealthy:", err)
				return exitCode(1)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "healthy:", url)
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "url", DefaultHealthURL, "health endpoint to GET")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long the probe may take")
	cmd.Flags().StringVar(&caFile, "tls-ca", "", "PEM CA file to verify an https --url with (default: the system roots)")
	return cmd
}

// probeClient is an HTTP client that trusts the CAs of caFile, if given.
func probeClient(caFile string) (*http.Client, error) {
	if caFile == "" {
		return http.DefaultClient, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", caFile)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}

// probe GETs url and wants a 2xx answer.
func probe(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s: %s", url, resp.Status, body)
	}
	return nil
}
