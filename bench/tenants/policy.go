package tenants

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// TenantQuota is one identity's quotas as the policy file gives them:
// sessions open, leases held, waiting acquires and watches open (each
// cluster-wide), and a token bucket of Rate requests/s with Burst (0:
// unlimited). Keep-alives and renewals are never rate-limited.
type TenantQuota struct {
	Sessions int     `json:"sessions"`
	Leases   int     `json:"leases"`
	Waiters  int     `json:"waiters"`
	Watches  int     `json:"watches"`
	Rate     float64 `json:"rate"`
	Burst    int     `json:"burst"`
}

// TenantRule is one rule of the policy: identity ("*": every one) may do
// Allow (read, lock, admin) on keys starting with Prefix, or not (Deny).
type TenantRule struct {
	Identity string `json:"identity"`
	Prefix   string `json:"prefix"`
	Allow    string `json:"allow,omitempty"`
	Deny     bool   `json:"deny,omitempty"`
}

// TenantsPolicy is the policy file the benchmark gives the nodes
// (--policy-file).
type TenantsPolicy struct {
	Defaults   TenantQuota            `json:"defaults"`
	Identities map[string]TenantQuota `json:"identities"`
	Rules      []TenantRule           `json:"rules"`
}

// DefaultTenantsPolicy is the benchmark's policy: the gateway's default
// quotas for everyone, small ones and a rate for the attacker, each
// identity allowed to lock its own prefix and everyone to read.
func DefaultTenantsPolicy() TenantsPolicy {
	return TenantsPolicy{
		Defaults: TenantQuota{Sessions: 1000, Leases: 100000, Waiters: 10000, Watches: 1000},
		Identities: map[string]TenantQuota{
			TenantAttacker: {Sessions: 200, Leases: 2000, Waiters: 500, Watches: 100, Rate: 500, Burst: 1000},
		},
		Rules: []TenantRule{
			{Identity: TenantVictim, Prefix: victimPrefix, Allow: "lock"},
			{Identity: TenantAttacker, Prefix: attackerPrefix, Allow: "lock"},
			{Identity: "*", Prefix: "", Allow: "read"},
		},
	}
}

// QuotaOf returns identity's quotas: its own, else the defaults.
func (p TenantsPolicy) QuotaOf(identity string) TenantQuota {
	if q, ok := p.Identities[identity]; ok {
		return q
	}
	return p.Defaults
}

// ReadTenantsPolicy reads a policy file; unknown fields are errors.
func ReadTenantsPolicy(path string) (TenantsPolicy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return TenantsPolicy{}, err
	}
	var p TenantsPolicy
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return TenantsPolicy{}, fmt.Errorf("policy %s: %w", path, err)
	}
	return p, nil
}

// tenantsFiles are the files the nodes are started with, and the
// identities' tokens.
type tenantsFiles struct {
	Tokens, Admin, Policy string // paths; Policy "" without a policy
	VictimToken           string
	AttackerToken         string
}

// nodeArgs are the `lockgate node` flags that point at the files.
func (f tenantsFiles) nodeArgs() []string {
	args := []string{"--auth-tokens-file", f.Tokens, "--admin-tokens-file", f.Admin}
	if f.Policy != "" {
		args = append(args, "--policy-file", f.Policy)
	}
	return args
}

// newTenantToken returns 32 random bytes in hex.
func newTenantToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// writeTenantsFiles writes into dir the clients' tokens file — "NAME
// TOKEN" lines for victim and attacker, or bare tokens without a policy
// (named), a binary that predates identities reads them — an admin
// tokens file (client tokens close the open join of a loopback cluster),
// and, with named, the policy file.
func writeTenantsFiles(dir string, policy TenantsPolicy, named bool) (tenantsFiles, error) {
	var f tenantsFiles
	var err error
	if f.VictimToken, err = newTenantToken(); err != nil {
		return f, err
	}
	if f.AttackerToken, err = newTenantToken(); err != nil {
		return f, err
	}
	admin, err := newTenantToken()
	if err != nil {
		return f, err
	}
	var toks strings.Builder
	toks.WriteString("# lockgate-bench tenants: the clients' identities and their bearer tokens\n")
	for _, id := range []struct{ name, token string }{{TenantVictim, f.VictimToken}, {TenantAttacker, f.AttackerToken}} {
		if named {
			fmt.Fprintf(&toks, "%s %s\n", id.name, id.token)
		} else {
			fmt.Fprintf(&toks, "# %s\n%s\n", id.name, id.token)
		}
	}
	f.Tokens, f.Admin = filepath.Join(dir, "tokens"), filepath.Join(dir, "admin-tokens")
	if err := os.WriteFile(f.Tokens, []byte(toks.String()), 0o600); err != nil {
		return f, err
	}
	if err := os.WriteFile(f.Admin, []byte("# lockgate-bench tenants: the nodes' admin token (join)\n"+admin+"\n"), 0o600); err != nil {
		return f, err
	}
	if named {
		data, err := json.MarshalIndent(policy, "", "  ")
		if err != nil {
			return f, err
		}
		f.Policy = filepath.Join(dir, "policy.json")
		if err := os.WriteFile(f.Policy, append(data, '\n'), 0o600); err != nil {
			return f, err
		}
	}
	return f, nil
}
