package raftgw

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/audit"
)

// The audit trail of a raftlock node and its gateway records a grant, a
// release, an expiry, a force-release, a session's open and expiry, and a
// refusal, each with the identity that caused it; and it holds none of the
// secrets that went by (bearer tokens, lock tokens, session ids, values).
func TestAuditTrail(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := audit.Open(path, audit.Options{Node: "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	s := tenantServer(t, tenantPolicy, 1000, log)
	base := "http://" + s.APIAddr()
	var secrets []string
	grant := func(token, key string, body map[string]any) map[string]any {
		t.Helper()
		st, m := rest(t, token, "POST", base+"/locks/"+key, body)
		if st != http.StatusOK {
			t.Fatalf("acquire %s: %d %v", key, st, m)
		}
		secrets = append(secrets, m["lock_token"].(string))
		return m
	}
	m := grant(victimToken, "victim/a", map[string]any{"ttl_ms": 60_000, "value": "value-secret-1"})
	if st, r := rest(t, victimToken, "DELETE", base+"/locks/victim/a", map[string]any{"lock_token": m["lock_token"], "fencing_token": m["fencing_token"]}); st != http.StatusNoContent && st != http.StatusOK {
		t.Fatalf("release: %d %v", st, r)
	}
	grant(victimToken, "victim/e", map[string]any{"ttl_ms": 50})
	st, r := rest(t, victimToken, "POST", base+"/sessions", map[string]any{"ttl_ms": 100})
	if st != http.StatusCreated {
		t.Fatalf("session: %d %v", st, r)
	}
	sid := r["session_id"].(string)
	secrets = append(secrets, sid)
	grant(victimToken, "victim/s", map[string]any{"session_id": sid})
	grant(attackerToken, "attacker/f", map[string]any{"ttl_ms": 60_000})
	if err := s.Node.ForceRelease(audit.WithCaller(context.Background(), audit.Caller{Identity: "ops", Remote: "198.51.100.7:4000"}), "attacker/f"); err != nil {
		t.Fatal(err)
	}
	if st, _ := rest(t, attackerToken, "POST", base+"/locks/victim/x", map[string]any{"ttl_ms": 1000}); st != http.StatusForbidden {
		t.Fatalf("the attacker's acquire of victim/x: %d, want 403", st)
	}

	type want struct {
		op       audit.Op
		identity string
		key      string
		result   string
	}
	wants := []want{
		{audit.OpGrant, "victim", "victim/a", "ok"},
		{audit.OpRelease, "victim", "victim/a", "ok"},
		{audit.OpExpire, "victim", "victim/e", "ok"},
		{audit.OpSessionOpen, "victim", "", "ok"},
		{audit.OpSessionExpire, "victim", "", "ok"},
		{audit.OpExpire, "victim", "victim/s", "ok"},
		{audit.OpForceRelease, "ops", "attacker/f", "ok"},
		{audit.OpGrant, "attacker", "victim/x", "forbidden"},
	}
	has := func(evs []audit.Event, w want) bool {
		return slices.ContainsFunc(evs, func(e audit.Event) bool {
			return e.Op == w.op && e.Identity == w.identity && e.Result == w.result &&
				(w.key == "" || slices.Contains(e.Keys, w.key)) && e.Node != "" && !e.Time.IsZero()
		})
	}
	// The expiries come when the leader's timers fire: wait for them.
	deadline := time.Now().Add(15 * time.Second)
	var evs []audit.Event
	for {
		if err := log.Flush(); err != nil {
			t.Fatal(err)
		}
		if evs, err = audit.ReadFile(path); err != nil {
			t.Fatal(err)
		}
		missing := slices.DeleteFunc(slices.Clone(wants), func(w want) bool { return has(evs, w) })
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit trail lacks %+v; it has %+v", missing, evs)
		}
		time.Sleep(20 * time.Millisecond) // polling a file: no event to await
	}
	for _, e := range evs {
		if e.Op == audit.OpGrant && e.Result == "ok" && e.Remote == "" {
			t.Errorf("a grant without the caller's address: %+v", e)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range append(secrets, victimToken, attackerToken, "value-secret-1") {
		if strings.Contains(string(data), secret) {
			t.Errorf("the audit trail holds a secret: %q", secret)
		}
	}
}
