package cli

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/audit"
)

// --policy-file is re-read on SIGHUP: a valid file replaces the policy in
// force, an invalid one leaves it, and both reloads are in the audit
// trail.
func TestPolicyReloadOnHangUp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.json")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"identities": {"a": {"sessions": 5}}}`)
	f := tenancyFlags{policyFile: path, auditFile: filepath.Join(dir, "audit.jsonl"), auditMaxBytes: audit.DefaultMaxBytes, auditFiles: 1}
	log, err := f.openAudit("n1")
	if err != nil {
		t.Fatal(err)
	}
	defer f.closeAudit()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h, err := f.policy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if q := h.Get().Quotas("a"); q.Sessions != 5 {
		t.Fatalf("loaded: %+v", q)
	}
	// reloads waits for the audit trail to hold n policy reloads.
	reloads := func(n int) []audit.Event {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			log.Flush()
			evs, _ := audit.ReadFile(f.auditFile)
			var got []audit.Event
			for _, e := range evs {
				if e.Op == audit.OpPolicyReload {
					got = append(got, e)
				}
			}
			if len(got) >= n {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d policy reloads audited, want %d", len(got), n)
			}
			time.Sleep(10 * time.Millisecond) // the signal's handling has no hook to await
		}
	}
	write(`{"identities": {"a": {"sessions": 7}}}`)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	if evs := reloads(1); evs[0].Result != audit.ResultOK {
		t.Fatalf("reload: %+v", evs[0])
	}
	if q := h.Get().Quotas("a"); q.Sessions != 7 {
		t.Fatalf("after the reload: %+v, want 7 sessions", q)
	}
	write(`{"identities": {"a": {"sessions": 0}}}`) // invalid: below the minimum
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	if evs := reloads(2); evs[1].Result == audit.ResultOK {
		t.Fatalf("an invalid policy's reload audited as %+v", evs[1])
	}
	if q := h.Get().Quotas("a"); q.Sessions != 7 {
		t.Fatalf("after an invalid file: %+v, want the previous policy kept", q)
	}
}
