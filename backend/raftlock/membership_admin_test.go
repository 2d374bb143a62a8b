package raftlock

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// tokenSet is a TokenSet for tests.
type tokenSet []string

func (s tokenSet) Valid(tok string) bool {
	for _, t := range s {
		if t == tok {
			return true
		}
	}
	return false
}

const (
	adminToken  = "admin-token-0123456789"
	clientToken = "client-token-0123456789"
)

// TestMembershipNeedsAdmin: with admin tokens and client tokens
// configured, a join with a client token is 403, one without a token 401,
// one with an unknown token 401, and none changes the configuration; a node
// presenting the admin token joins, and the admin token removes it.
func TestMembershipNeedsAdmin(t *testing.T) {
	admin := func(cfg *Config) {
		cfg.AdminTokens = tokenSet{adminToken}
		cfg.ClientTokens = tokenSet{clientToken}
		cfg.MembershipToken = adminToken
	}
	c := startCluster(t, 1, admin)
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bogus := JoinArgs{ServerID: "9", ServerAddr: "127.0.0.1:1", APIAddr: "127.0.0.1:2"}
	for name, tc := range map[string]struct {
		token string
		code  int
	}{
		"client token":  {clientToken, http.StatusForbidden},
		"no token":      {"", http.StatusUnauthorized},
		"unknown token": {"unknown-token-0123456789", http.StatusUnauthorized},
	} {
		t.Run(name, func(t *testing.T) {
			var rep Reply
			code, err := (&MembershipClient{Token: tc.token}).postJSON(ctx, l.APIAddr(), PathJoin, 0, bogus, &rep)
			if err != nil || code != tc.code {
				t.Fatalf("join: %d %+v, %v; want %d", code, rep, err, tc.code)
			}
			if !strings.Contains(rep.Error, "--admin-tokens-file") {
				t.Errorf("refusal %q does not name --admin-tokens-file", rep.Error)
			}
			code, err = (&MembershipClient{Token: tc.token}).postJSON(ctx, l.APIAddr(), PathRemove, 0, RemoveArgs{ServerID: l.ID()}, &rep)
			if err != nil || code != tc.code {
				t.Fatalf("remove: %d %+v, %v; want %d", code, rep, err, tc.code)
			}
			requireNotMember(t, l, "9")
			// The other admin endpoints: a snapshot, a collection.
			for _, path := range []string{PathSnapshot, PathGC} {
				code, err = (&MembershipClient{Token: tc.token}).postJSON(ctx, l.APIAddr(), path, 0, struct{}{}, &rep)
				if err != nil || code != tc.code {
					t.Fatalf("%s: %d, %v; want %d", path, code, err, tc.code)
				}
			}
		})
	}
	for _, path := range []string{PathSnapshot, PathGC} {
		var rep map[string]any
		code, err := (&MembershipClient{Token: adminToken}).postJSON(ctx, l.APIAddr(), path, 0, struct{}{}, &rep)
		if err != nil || code != http.StatusOK {
			t.Fatalf("%s with the admin token: %d %v, %v", path, code, rep, err)
		}
	}

	cfg := DefaultConfig("2")
	fastConfig(t)(&cfg)
	admin(&cfg)
	cfg.DataDir = t.TempDir()
	s2, err := StartServer(ctx, cfg, []string{l.APIAddr()})
	if err != nil {
		t.Fatalf("join with the admin token: %v", err)
	}
	t.Cleanup(func() { s2.Shutdown() })
	awaitPeers(t, l.APIAddr(), []string{"1", "2"})
	if _, err := (&MembershipClient{Token: clientToken}).Remove(ctx, []string{l.APIAddr()}, "2"); err == nil {
		t.Fatal("remove with a client token succeeded")
	}
	if _, err := (&MembershipClient{Token: adminToken}).Remove(ctx, []string{l.APIAddr()}, "2"); err != nil {
		t.Fatalf("remove with the admin token: %v", err)
	}
	requireNotMember(t, l, "2")
}

// TestMembershipPolicy is the decision table of membership requests,
// including the non-loopback addresses no test can listen on.
func TestMembershipPolicy(t *testing.T) {
	peer := func(r *http.Request) {
		r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{}}}}
	}
	bearer := func(tok string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
	}
	none := func(*http.Request) {}
	for _, tc := range []struct {
		name   string
		policy membershipPolicy
		req    func(*http.Request)
		code   int // 0: allowed
		names  string
	}{
		{"dev mode: loopback, no credentials at all", membershipPolicy{loopbackAPI: true}, none, 0, ""},
		{"no admin credential off loopback", membershipPolicy{}, none, http.StatusForbidden, "--admin-tokens-file"},
		{"no admin credential off loopback, any token", membershipPolicy{}, bearer(clientToken), http.StatusForbidden, "--tls-ca"},
		{"no admin credential, client tokens on loopback", membershipPolicy{loopbackAPI: true, client: tokenSet{clientToken}},
			bearer(clientToken), http.StatusForbidden, "--admin-tokens-file"},
		{"admin token", membershipPolicy{admin: tokenSet{adminToken}}, bearer(adminToken), 0, ""},
		{"client token", membershipPolicy{admin: tokenSet{adminToken}, client: tokenSet{clientToken}}, bearer(clientToken), http.StatusForbidden, "admin"},
		{"no credential", membershipPolicy{admin: tokenSet{adminToken}}, none, http.StatusUnauthorized, "--admin-tokens-file"},
		{"wrong token", membershipPolicy{admin: tokenSet{adminToken}}, bearer("x"), http.StatusUnauthorized, "--admin-tokens-file"},
		{"verified peer certificate", membershipPolicy{peerAuth: true}, peer, 0, ""},
		{"peer auth, no certificate", membershipPolicy{peerAuth: true}, none, http.StatusUnauthorized, "certificate"},
		{"peer auth, client token", membershipPolicy{peerAuth: true, client: tokenSet{clientToken}}, bearer(clientToken), http.StatusForbidden, "certificate"},
		{"peer auth and admin token", membershipPolicy{peerAuth: true, admin: tokenSet{adminToken}}, bearer(adminToken), 0, ""},
	} {
		r := httptest.NewRequest(http.MethodPost, PathJoin, nil)
		tc.req(r)
		code, msg := tc.policy.decide(r)
		if code != tc.code || !strings.Contains(msg, tc.names) {
			t.Errorf("%s: %d %q; want %d naming %q", tc.name, code, msg, tc.code, tc.names)
		}
	}
}

// TestMembershipJoinValidated: a join whose server id or addresses the
// state machine would refuse is answered 400 before the Raft configuration
// changes (AddVoter runs before the member directory records the API
// address, so an unchecked id would leave a voter nobody can describe).
func TestMembershipJoinValidated(t *testing.T) {
	c := startCluster(t, 1)
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, a := range map[string]JoinArgs{
		"id over the state machine's key limit": {ServerID: strings.Repeat("9", 2000), ServerAddr: "127.0.0.1:1", APIAddr: "127.0.0.1:2"},
		"id with a control character":           {ServerID: "9\n", ServerAddr: "127.0.0.1:1", APIAddr: "127.0.0.1:2"},
		"raft address without a port":           {ServerID: "9", ServerAddr: "127.0.0.1", APIAddr: "127.0.0.1:2"},
		"api address over the limit":            {ServerID: "9", ServerAddr: "127.0.0.1:1", APIAddr: strings.Repeat("a", 300) + ":2"},
		"missing api address":                   {ServerID: "9", ServerAddr: "127.0.0.1:1"},
	} {
		t.Run(name, func(t *testing.T) {
			var rep Reply
			code, err := (&MembershipClient{}).postJSON(ctx, l.APIAddr(), PathJoin, 0, a, &rep)
			if err != nil || code != http.StatusBadRequest {
				t.Fatalf("join %+.80v: %d %+v, %v; want 400", a, code, rep, err)
			}
			requireNotMember(t, l, a.ServerID)
		})
	}
}
