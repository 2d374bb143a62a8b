package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/gateway"
)

// tenancyFlags are the tenants' settings of `serve` and `node`: the policy
// file (docs/security.md, "Tenants").
type tenancyFlags struct {
	policyFile string
}

func (f *tenancyFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.policyFile, "policy-file", "",
		"JSON policy of the tenants: each identity's permissions on key prefixes and its quotas (docs/security.md); re-read on SIGHUP. Without it every identity may lock every key, with the default quotas")
}

// policy loads --policy-file (an empty holder without it: the defaults)
// and reloads it on SIGHUP until ctx ends; a reload that fails keeps the
// policy in force.
func (f *tenancyFlags) policy(ctx context.Context) (*gateway.PolicyHolder, error) {
	h := &gateway.PolicyHolder{}
	if f.policyFile == "" {
		return h, nil
	}
	p, err := gateway.LoadPolicy(f.policyFile)
	if err != nil {
		return nil, fmt.Errorf("--policy-file: %w", err)
	}
	h.Set(p)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				p, err := gateway.LoadPolicy(f.policyFile)
				if err != nil {
					slog.Error("SIGHUP: policy file not reloaded; the previous policy stays in force", "file", f.policyFile, "err", err)
					continue
				}
				h.Set(p)
				slog.Info("SIGHUP: policy file reloaded", "file", f.policyFile)
			}
		}
	}()
	return h, nil
}
