package cli

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/internal/audit"
)

// tenancyFlags are the tenants' settings of `serve` and `node`: the policy
// file (docs/security.md, "Tenants").
type tenancyFlags struct {
	policyFile    string
	auditFile     string
	auditMaxBytes int64
	auditFiles    int
	// log is the audit log once open (openAudit).
	log *audit.Log
}

func (f *tenancyFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.policyFile, "policy-file", "",
		"JSON policy of the tenants: each identity's permissions on key prefixes and its quotas (docs/security.md); re-read on SIGHUP. Without it every identity may lock every key, with the default quotas")
	fl.StringVar(&f.auditFile, "audit-log", "", "file of the audit trail: one JSON line per grant, release, expiry, force-release, session open, close and expiry, membership change, backup and policy reload, with the identity and address of who asked (docs/security.md); its directory must exist")
	fl.Int64Var(&f.auditMaxBytes, "audit-max-bytes", audit.DefaultMaxBytes, "size at which --audit-log is rotated (FILE.1, FILE.2, …)")
	fl.IntVar(&f.auditFiles, "audit-files", audit.DefaultMaxFiles, "rotated audit files kept besides the current one")
}

// openAudit opens --audit-log for node (nil without the flag); the caller
// closes it with closeAudit.
func (f *tenancyFlags) openAudit(node string) (*audit.Log, error) {
	if f.auditFile == "" || f.log != nil {
		return f.log, nil
	}
	if f.auditMaxBytes <= 0 || f.auditFiles < 0 {
		return nil, fmt.Errorf("--audit-max-bytes must be positive and --audit-files at least 0")
	}
	log, err := audit.Open(f.auditFile, audit.Options{MaxBytes: f.auditMaxBytes, MaxFiles: f.auditFiles, Node: node})
	if err != nil {
		return nil, fmt.Errorf("--audit-log: %w", err)
	}
	f.log = log
	return log, nil
}

// closeAudit writes out and closes the audit log, if open.
func (f *tenancyFlags) closeAudit() {
	if f.log != nil {
		if err := f.log.Close(); err != nil {
			slog.Error("audit log", "file", f.auditFile, "err", err)
		}
	}
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
	onHangUp(ctx, func() {
		p, err := gateway.LoadPolicy(f.policyFile)
		if err != nil {
			slog.Error("SIGHUP: policy file not reloaded; the previous policy stays in force", "file", f.policyFile, "err", err)
			f.log.Record(audit.Event{Op: audit.OpPolicyReload, Result: "invalid", Detail: f.policyFile})
			return
		}
		h.Set(p)
		slog.Info("SIGHUP: policy file reloaded", "file", f.policyFile)
		f.log.Record(audit.Event{Op: audit.OpPolicyReload, Result: audit.ResultOK, Detail: f.policyFile})
	})
	return h, nil
}
