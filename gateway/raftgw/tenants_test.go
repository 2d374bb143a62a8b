package raftgw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	neturl "net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/internal/audit"
	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
)

// Tenants on a raftlock node: what one identity can do to another with
// an ordinary client token — flood sessions, leases, watches; use another
// identity's session id or lock token; read another's keys — and what
// each entry point's permission check refuses.

const (
	victimToken   = "victim-token-0123456789abcdef"
	attackerToken = "attacker-token-0123456789abcdef"
	readerToken   = "reader-token-0123456789abcdef"
	opsToken      = "ops-admin-token-0123456789abcdef"
)

const tenantPolicy = `{
  "identities": {"attacker": {"sessions": 30, "leases": 5, "waiters": 3, "watches": 4}},
  "rules": [
    {"identity": "victim",   "prefix": "victim/",   "allow": "lock"},
    {"identity": "attacker", "prefix": "attacker/", "allow": "lock"},
    {"identity": "reader",   "prefix": "victim/",   "allow": "read"},
    {"identity": "victim",   "prefix": "victim/secret/", "deny": true}
  ]
}`

// tenantNode is one raftlock node (cluster of one) whose gateway knows
// the three identities and the policy; the node holds at most
// maxSessions sessions.
func tenantNode(t *testing.T, policy string, maxSessions int) string {
	t.Helper()
	return tenantServer(t, policy, maxSessions, nil).APIAddr()
}

// tenantServer is tenantNode's server, recording its audit trail in log
// (nil: none).
func tenantServer(t *testing.T, policy string, maxSessions int, log *audit.Log) *raftlock.Server {
	t.Helper()
	toks, err := gateway.NewNamedTokens([]gateway.NamedToken{
		{Identity: "victim", Token: victimToken}, {Identity: "attacker", Token: attackerToken}, {Identity: "reader", Token: readerToken}})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := gateway.NewNamedTokens([]gateway.NamedToken{{Identity: "ops", Token: opsToken}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := gateway.ParsePolicy([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	holder := &gateway.PolicyHolder{}
	holder.Set(p)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := raftlock.StartLocalCluster(ctx, 1, t.TempDir(), func(cfg *raftlock.Config) {
		cfg.RaftAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.ClientTokens = toks
		cfg.AdminTokens = admin
		cfg.MaxSessions = maxSessions
		cfg.Audit = log
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	Serve(c.Servers[0], gateway.Options{Tokens: toks, Policy: holder, Audit: log, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	leaderAPI(t, c)
	return c.Servers[0]
}

// rest sends a JSON request as token and returns the status and body.
func rest(t *testing.T, token, method, url string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	if i := strings.Index(url, "/locks/"); i >= 0 {
		url = url[:i+len("/locks/")] + neturl.PathEscape(url[i+len("/locks/"):])
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

func wsAs(t *testing.T, addr, token string) *websocket.Conn {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/v1/ws", http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws
}

// One identity floods sessions over REST and WebSocket, across
// connections; it stops at its quota, not at the node's limit, and
// another identity still opens sessions and acquires with the default Go
// SDK.
func TestTenantSessionFlood(t *testing.T) {
	t.Parallel()
	addr := tenantNode(t, tenantPolicy, 40)
	opened, refused := 0, ""
	for i := 0; i < 50 && refused == ""; i++ {
		if i%2 == 0 {
			st, m := rest(t, attackerToken, "POST", "http://"+addr+"/sessions", map[string]any{"ttl_ms": 86_400_000})
			if st != http.StatusCreated {
				refused = errCode(m)
				continue
			}
		} else {
			ws := wsAs(t, addr, attackerToken) // a new connection each time
			r := call(t, ws, map[string]any{"commandType": wire.CmdOpenSession, "id": "s", "ttl": 86_400_000})
			if r.Error != nil {
				refused = r.Error.Code
				continue
			}
		}
		opened++
	}
	if opened != 30 || refused != wire.CodeQuotaExceeded {
		t.Fatalf("the attacker opened %d sessions, then was refused %q; want 30, then quota_exceeded", opened, refused)
	}
	if st, m := rest(t, victimToken, "POST", "http://"+addr+"/sessions", map[string]any{"ttl_ms": 60_000}); st != http.StatusCreated {
		t.Fatalf("the victim's session: %d %v", st, m)
	}
	c, err := client.New([]string{addr}, client.Options{Token: victimToken})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := c.Acquire(ctx, "victim/job", lock.AcquireOptions{})
	if err != nil {
		t.Fatalf("the victim's SDK acquire beside the flood: %v", err)
	}
	if lease.Session() == nil {
		t.Errorf("the victim's SDK lease is not in a session: the SDK's own session was refused")
	}
}

// The held-lease quota counts what the replicated state holds: a new
// connection, or REST, does not reset it.
func TestTenantLeaseQuotaAcrossConnections(t *testing.T) {
	t.Parallel()
	addr := tenantNode(t, tenantPolicy, 1000)
	for i := 0; i < 5; i++ {
		ws := wsAs(t, addr, attackerToken)
		r := call(t, ws, map[string]any{"commandType": wire.CmdTryAcquire, "id": "a", "key": fmt.Sprintf("attacker/%d", i), "ttl": 86_400_000})
		want(t, r, "a", wire.TypeGrant, "")
		ws.Close()
	}
	st, m := rest(t, attackerToken, "POST", "http://"+addr+"/locks/attacker/rest", map[string]any{"ttl_ms": 86_400_000})
	if st != http.StatusTooManyRequests || errCode(m) != wire.CodeQuotaExceeded {
		t.Fatalf("REST acquire past the quota: %d %v, want 429 quota_exceeded", st, m)
	}
	if e, _ := m["error"].(map[string]any); e["quota"] != "leases" {
		t.Fatalf("the refusal names quota %v, want leases", e["quota"])
	}
	ws := wsAs(t, addr, attackerToken)
	r := call(t, ws, map[string]any{"commandType": wire.CmdAcquireAll, "id": "m", "keys": []string{"attacker/x", "attacker/y"}, "ttl": 60_000})
	want(t, r, "m", wire.TypeError, wire.CodeQuotaExceeded)
	// The victim is not affected.
	if st, m := rest(t, victimToken, "POST", "http://"+addr+"/locks/victim/a", map[string]any{"ttl_ms": 60_000}); st != http.StatusOK {
		t.Fatalf("victim: %d %v", st, m)
	}
}

// Watches count per identity across connections; waiting acquires too.
func TestTenantWatchAndWaiterQuotas(t *testing.T) {
	t.Parallel()
	addr := tenantNode(t, tenantPolicy, 1000)
	got := 0
	var last wire.Reply
	for c := 0; c < 3; c++ {
		ws := wsAs(t, addr, attackerToken)
		for i := 0; i < 2; i++ {
			id := fmt.Sprintf("w%d", i)
			last = call(t, ws, map[string]any{"commandType": wire.CmdWatch, "id": id, "key": "attacker/", "prefix": true})
			if last.Error != nil {
				break
			}
			got++
		}
	}
	if got != 4 || last.Error == nil || last.Error.Code != wire.CodeQuotaExceeded {
		t.Fatalf("the attacker opened %d watches, last answer %+v; want 4, then quota_exceeded", got, last)
	}
	ws := wsAs(t, addr, victimToken)
	want(t, call(t, ws, map[string]any{"commandType": wire.CmdWatch, "id": "v", "key": "victim/", "prefix": true}), "v", wire.TypeEvent, "")

	// Waiters: the victim holds a key the attacker... may not lock; so the
	// attacker waits on its own key, held by itself.
	aw := wsAs(t, addr, attackerToken)
	want(t, call(t, aw, map[string]any{"commandType": wire.CmdTryAcquire, "id": "h", "key": "attacker/held", "ttl": 60_000}), "h", wire.TypeGrant, "")
	for i := 0; i < 4; i++ {
		if err := aw.WriteJSON(map[string]any{"commandType": wire.CmdAcquire, "id": fmt.Sprintf("q%d", i), "key": "attacker/held", "ttl": 60_000}); err != nil {
			t.Fatal(err)
		}
	}
	// Three wait; one of the four (they are admitted concurrently) is
	// refused, and that is the only answer while the key is held.
	if r := recvWS(t, aw); r.Type != wire.TypeError || r.Error.Code != wire.CodeQuotaExceeded || r.Error.Quota != "waiters" {
		t.Fatalf("the fourth waiting acquire: %+v, want quota_exceeded (waiters)", r)
	}
}

// A session id or a lock token is no bearer secret across identities:
// another identity that presents them is answered as if they were
// unknown, and the owner's leases stay held.
func TestTenantSessionAndLeaseOfAnotherIdentity(t *testing.T) {
	t.Parallel()
	addr := tenantNode(t, tenantPolicy, 1000)
	base := "http://" + addr
	st, m := rest(t, victimToken, "POST", base+"/sessions", map[string]any{"ttl_ms": 60_000})
	if st != http.StatusCreated {
		t.Fatalf("open: %d %v", st, m)
	}
	sid, _ := m["session_id"].(string)
	st, m = rest(t, victimToken, "POST", base+"/locks/victim/s", map[string]any{"session_id": sid})
	if st != http.StatusOK {
		t.Fatalf("acquire in the session: %d %v", st, m)
	}
	lockToken, _ := m["lock_token"].(string)
	fencing := m["fencing_token"]
	st, m = rest(t, victimToken, "POST", base+"/locks/victim/plain", map[string]any{"ttl_ms": 60_000})
	if st != http.StatusOK {
		t.Fatalf("acquire: %d %v", st, m)
	}
	plainToken, plainFencing := m["lock_token"].(string), m["fencing_token"]

	for _, c := range []struct {
		what, method, path string
		body               any
		code               string
	}{
		{"renew the session", "POST", "/sessions/renew", map[string]any{"session_id": sid}, wire.CodeSessionExpired},
		{"acquire in the session", "POST", "/locks/attacker/in", map[string]any{"session_id": sid}, wire.CodeSessionExpired},
		{"close the session", "POST", "/sessions/close", map[string]any{"session_id": sid}, wire.CodeSessionExpired},
		{"release the lease", "DELETE", "/locks/victim/s", map[string]any{"lock_token": lockToken, "fencing_token": fencing}, wire.CodeNotHeld},
		{"renew a lease", "PUT", "/locks/victim/plain", map[string]any{"lock_token": plainToken, "fencing_token": plainFencing}, wire.CodeNotHeld},
		{"release a lease", "DELETE", "/locks/victim/plain", map[string]any{"lock_token": plainToken, "fencing_token": plainFencing}, wire.CodeNotHeld},
	} {
		st, m := rest(t, attackerToken, c.method, base+c.path, c.body)
		if errCode(m) != c.code {
			t.Errorf("the attacker's %s: %d %v, want %s", c.what, st, m, c.code)
		}
	}
	for _, k := range []string{"victim/s", "victim/plain"} {
		if st, m := rest(t, victimToken, "GET", base+"/locks/"+k, nil); st != http.StatusOK {
			t.Errorf("%s after the attacker's tries: %d %v, want still held", k, st, m)
		}
	}
	// The owner still uses both.
	if st, m := rest(t, victimToken, "POST", base+"/sessions/renew", map[string]any{"session_id": sid}); st != http.StatusOK {
		t.Errorf("the victim's renew: %d %v", st, m)
	}
}

// A prefix watch on every key shows an identity only the keys it may read.
func TestTenantPrefixWatchShowsReadableKeys(t *testing.T) {
	t.Parallel()
	addr := tenantNode(t, tenantPolicy, 1000)
	ws := wsAs(t, addr, attackerToken)
	want(t, call(t, ws, map[string]any{"commandType": wire.CmdWatch, "id": "all", "key": "", "prefix": true}), "all", wire.TypeEvent, "")
	base := "http://" + addr
	if st, m := rest(t, victimToken, "POST", base+"/locks/victim/hidden", map[string]any{"ttl_ms": 60_000}); st != http.StatusOK {
		t.Fatalf("victim: %d %v", st, m)
	}
	if st, m := rest(t, attackerToken, "POST", base+"/locks/attacker/seen", map[string]any{"ttl_ms": 60_000}); st != http.StatusOK {
		t.Fatalf("attacker: %d %v", st, m)
	}
	// Events arrive in commit order: the victim's key, if shown, comes first.
	r := recvWS(t, ws)
	if r.Key != "attacker/seen" {
		t.Fatalf("the attacker's prefix watch showed %q (%s) first, want only its own attacker/seen", r.Key, r.Event)
	}
}

// Every entry point refuses an identity the policy does not allow, with
// forbidden (403 over REST).
func TestTenantPermissionsPerEntryPoint(t *testing.T) {
	t.Parallel()
	addr := tenantNode(t, tenantPolicy, 1000)
	base := "http://" + addr
	if st, m := rest(t, victimToken, "POST", base+"/locks/victim/held", map[string]any{"ttl_ms": 60_000}); st != http.StatusOK {
		t.Fatalf("victim: %d %v", st, m)
	}
	for _, c := range []struct {
		what, token, method, path string
		body                      any
	}{
		{"REST acquire of another's prefix", attackerToken, "POST", "/locks/victim/x", map[string]any{"ttl_ms": 1000}},
		{"REST acquire of a denied prefix", victimToken, "POST", "/locks/victim/secret/x", map[string]any{"ttl_ms": 1000}},
		{"REST waiting acquire", attackerToken, "POST", "/locks/victim/held", map[string]any{"ttl_ms": 1000, "wait_ms": 100}},
		{"REST acquireAll with one foreign key", attackerToken, "POST", "/locks", map[string]any{"keys": []string{"attacker/a", "victim/b"}, "ttl_ms": 1000}},
		{"REST inspect", attackerToken, "GET", "/locks/victim/held", nil},
		{"REST acquire by a read-only identity", readerToken, "POST", "/locks/victim/y", map[string]any{"ttl_ms": 1000}},
		{"REST session of an identity that may lock nothing", readerToken, "POST", "/sessions", map[string]any{"ttl_ms": 60_000}},
	} {
		st, m := rest(t, c.token, c.method, base+c.path, c.body)
		if st != http.StatusForbidden || errCode(m) != wire.CodeForbidden {
			t.Errorf("%s: %d %v, want 403 forbidden", c.what, st, m)
		}
	}
	// Nothing the refused calls named was taken.
	if st, _ := rest(t, attackerToken, "GET", base+"/locks/attacker/a", nil); st != http.StatusNotFound {
		t.Errorf("attacker/a after a refused acquireAll: %d, want 404", st)
	}
	if st, m := rest(t, readerToken, "GET", base+"/locks/victim/held", nil); st != http.StatusOK {
		t.Errorf("the reader's inspect: %d %v", st, m)
	}
	ws := wsAs(t, addr, attackerToken)
	for _, c := range []map[string]any{
		{"commandType": wire.CmdTryAcquire, "id": "1", "key": "victim/x"},
		{"commandType": wire.CmdAcquire, "id": "2", "key": "victim/x", "waitMs": 100},
		{"commandType": wire.CmdTryAcquireAll, "id": "3", "keys": []string{"attacker/a", "victim/x"}},
		{"commandType": wire.CmdInspect, "id": "4", "key": "victim/held"},
		{"commandType": wire.CmdWatch, "id": "5", "key": "victim/held"},
		{"commandType": wire.CmdWatch, "id": "6", "key": "victim/", "prefix": true},
	} {
		r := call(t, ws, c)
		if r.Error == nil || r.Error.Code != wire.CodeForbidden {
			t.Errorf("WebSocket %v: %+v, want forbidden", c, r)
		}
	}
	rws := wsAs(t, addr, readerToken)
	if r := call(t, rws, map[string]any{"commandType": wire.CmdOpenSession, "id": "s"}); r.Error == nil || r.Error.Code != wire.CodeForbidden {
		t.Errorf("WebSocket session of a read-only identity: %+v, want forbidden", r)
	}
	// The Go SDK sees lock.ErrForbidden.
	c, err := client.New([]string{addr}, client.Options{Token: attackerToken})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.TryAcquire(ctx, "victim/sdk", lock.AcquireOptions{}); !errors.Is(err, lock.ErrForbidden) {
		t.Errorf("SDK acquire of another's key: %v, want lock.ErrForbidden", err)
	}
}

// An identity's rate refuses acquires past its bucket with a retry time;
// renewals go on.
func TestTenantRate(t *testing.T) {
	t.Parallel()
	addr := tenantNode(t, `{"identities": {"attacker": {"rate": 1, "burst": 3}}}`, 1000)
	base := "http://" + addr
	st, m := rest(t, attackerToken, "POST", base+"/locks/r0", map[string]any{"ttl_ms": 60_000})
	if st != http.StatusOK {
		t.Fatalf("first acquire: %d %v", st, m)
	}
	tok, fencing := m["lock_token"], m["fencing_token"]
	limited := false
	for i := 1; i < 6 && !limited; i++ {
		st, m = rest(t, attackerToken, "POST", base+fmt.Sprintf("/locks/r%d", i), map[string]any{"ttl_ms": 60_000})
		limited = st == http.StatusTooManyRequests && errCode(m) == wire.CodeRateLimited
	}
	if !limited {
		t.Fatalf("6 acquires at a rate of 1/s with a burst of 3 were never rate_limited: last %d %v", st, m)
	}
	if e, _ := m["error"].(map[string]any); e["retry_in_ms"] == nil {
		t.Errorf("rate_limited without retryIn: %v", m)
	}
	for i := 0; i < 5; i++ {
		if st, m := rest(t, attackerToken, "PUT", base+"/locks/r0", map[string]any{"lock_token": tok, "fencing_token": fencing}); st != http.StatusOK {
			t.Fatalf("renewal %d beside the rate limit: %d %v", i, st, m)
		}
	}
	if st, m := rest(t, victimToken, "POST", base+"/locks/v", map[string]any{"ttl_ms": 60_000}); st != http.StatusOK {
		t.Fatalf("another identity: %d %v", st, m)
	}
}

// An admin lists what each identity holds and closes a flooding one's
// sessions and leases without a restart; a client token may do neither.
func TestTenantAdminClose(t *testing.T) {
	t.Parallel()
	addr := tenantNode(t, tenantPolicy, 1000)
	base := "http://" + addr
	for i := 0; i < 4; i++ {
		if st, m := rest(t, attackerToken, "POST", base+"/sessions", map[string]any{"ttl_ms": 86_400_000}); st != http.StatusCreated {
			t.Fatalf("session: %d %v", st, m)
		}
	}
	for i := 0; i < 3; i++ {
		if st, m := rest(t, attackerToken, "POST", base+fmt.Sprintf("/locks/attacker/%d", i), map[string]any{"ttl_ms": 86_400_000}); st != http.StatusOK {
			t.Fatalf("lease: %d %v", st, m)
		}
	}
	if st, m := rest(t, victimToken, "POST", base+"/locks/victim/kept", map[string]any{"ttl_ms": 60_000}); st != http.StatusOK {
		t.Fatalf("victim: %d %v", st, m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := (&raftlock.MembershipClient{Token: attackerToken}).CloseIdentity(ctx, addr, "victim"); err == nil {
		t.Fatal("a client token closed an identity")
	}
	mc := &raftlock.MembershipClient{Token: opsToken}
	l, err := mc.ListIdentities(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	usage := map[string]raftlock.IdentityUsage{}
	for _, u := range l.Identities {
		usage[u.Identity] = u
	}
	if u := usage["attacker"]; u.Sessions != 4 || u.Leases != 3 {
		t.Fatalf("attacker holds %+v, want 4 sessions and 3 leases (all: %+v)", u, l.Identities)
	}
	rep, err := mc.CloseIdentity(ctx, addr, "attacker")
	if err != nil || rep.Sessions != 4 || rep.Leases != 3 {
		t.Fatalf("close: %+v %v, want 4 sessions and 3 leases", rep, err)
	}
	if l, err = mc.ListIdentities(ctx, addr); err != nil {
		t.Fatal(err)
	}
	for _, u := range l.Identities {
		if u.Identity == "attacker" {
			t.Fatalf("attacker still holds %+v", u)
		}
	}
	if st, m := rest(t, victimToken, "GET", base+"/locks/victim/kept", nil); st != http.StatusOK {
		t.Fatalf("the victim's lease after the close: %d %v", st, m)
	}
}

// The console's lock table and a key's detail show an identity only the
// keys it may read; an admin sees them all.
func TestTenantConsoleShowsReadableKeys(t *testing.T) {
	t.Parallel()
	addr := tenantNode(t, tenantPolicy, 1000)
	base := "http://" + addr
	for _, c := range []struct{ token, key string }{{victimToken, "victim/v1"}, {attackerToken, "attacker/a1"}} {
		if st, m := rest(t, c.token, "POST", base+"/locks/"+c.key, map[string]any{"ttl_ms": 60_000}); st != http.StatusOK {
			t.Fatalf("%s: %d %v", c.key, st, m)
		}
	}
	keysSeen := func(token string) []string {
		t.Helper()
		st, m := rest(t, token, "GET", base+"/v1/console/locks", nil)
		if st != http.StatusOK {
			t.Fatalf("console locks: %d %v", st, m)
		}
		var keys []string
		ls, _ := m["locks"].([]any)
		for _, l := range ls {
			keys = append(keys, l.(map[string]any)["key"].(string))
		}
		return keys
	}
	if got := keysSeen(attackerToken); len(got) != 1 || got[0] != "attacker/a1" {
		t.Errorf("the attacker's console shows %v, want only attacker/a1", got)
	}
	if got := keysSeen(opsToken); len(got) != 2 {
		t.Errorf("the admin's console shows %v, want both keys", got)
	}
	if st, m := rest(t, attackerToken, "GET", base+"/v1/console/lock?key=victim%2Fv1", nil); st != http.StatusForbidden {
		t.Errorf("the attacker's detail of victim/v1: %d %v, want 403", st, m)
	}
	if st, m := rest(t, victimToken, "GET", base+"/v1/console/lock?key=victim%2Fv1", nil); st != http.StatusOK {
		t.Errorf("the victim's detail of victim/v1: %d %v", st, m)
	}
}

// The default quotas leave a raftlock cluster's own limits to many
// identities: one identity alone can take at most a hundredth of the
// sessions and a tenth of a node's watch slots.
func TestDefaultQuotasBelowClusterCaps(t *testing.T) {
	q := gateway.DefaultQuotas
	if q.Sessions*100 > raftlock.DefaultMaxSessions || q.Watches*10 > raftlock.DefaultMaxWatchers || q.Waiters > raftlock.DefaultMaxWaitersPerKey {
		t.Fatalf("default quotas %+v against the cluster's sessions %d, watch slots %d, waiters per key %d",
			q, raftlock.DefaultMaxSessions, raftlock.DefaultMaxWatchers, raftlock.DefaultMaxWaitersPerKey)
	}
}
