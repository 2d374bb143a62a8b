package gateway

import (
	"strings"
	"testing"
)

// The policy's rules: a deny that applies refuses whatever else applies;
// otherwise the longest prefix decides, a rule naming the identity before
// "*", then the higher permission; no rule, no permission; without rules,
// lock everywhere.
func TestPolicyPerm(t *testing.T) {
	p, err := ParsePolicy([]byte(`{"rules": [
		{"identity": "*",       "prefix": "",            "allow": "read"},
		{"identity": "billing", "prefix": "billing/",    "allow": "lock"},
		{"identity": "*",       "prefix": "billing/",    "allow": "admin"},
		{"identity": "billing", "prefix": "billing/pii/", "deny": true},
		{"identity": "ops",     "prefix": "",            "allow": "admin"},
		{"identity": "ops",     "prefix": "secret/",     "deny": true}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		identity, key string
		want          Perm
	}{
		{"billing", "billing/x", PermLock},     // named beats * at equal length
		{"guest", "billing/x", PermAdmin},      // only the * rule of that length
		{"billing", "billing/pii/1", PermNone}, // deny
		{"billing", "other", PermRead},         // the catch-all
		{"ops", "anything", PermAdmin},         // named "" beats * ""
		{"ops", "secret/k", PermNone},          // deny beats the longer-applying allow
	} {
		if got := p.Perm(c.identity, c.key); got != c.want {
			t.Errorf("Perm(%s, %s) = %s, want %s", c.identity, c.key, got, c.want)
		}
	}
	none, _ := ParsePolicy([]byte(`{"rules": []}`))
	if none.Perm("x", "k") != PermNone || none.Reaches("x", PermRead, "") {
		t.Error("empty rules must allow nothing")
	}
	var nilPolicy *Policy
	if nilPolicy.Perm("x", "k") != PermLock || nilPolicy.Quotas("x") != DefaultQuotas {
		t.Error("no policy: lock everywhere, default quotas")
	}
	quotas, _ := ParsePolicy([]byte(`{"defaults": {"sessions": 5}, "identities": {"big": {"leases": 7, "rate": 10}}}`))
	if q := quotas.Quotas("anyone"); q.Sessions != 5 || q.Leases != DefaultQuotaLeases {
		t.Errorf("defaults: %+v", q)
	}
	if q := quotas.Quotas("big"); q.Sessions != 5 || q.Leases != 7 || q.Rate != 10 || q.Burst != 10 {
		t.Errorf("an identity's override: %+v", q)
	}
	if quotas.HasRules() || !quotas.Names("big") || quotas.Names("anyone") {
		t.Error("HasRules/Names")
	}
}

// Reaches: a prefix watch on "" by an identity that may read only
// "mine/" is admitted (and filtered); one on "theirs/" is not.
func TestPolicyReaches(t *testing.T) {
	p, err := ParsePolicy([]byte(`{"rules": [{"identity": "a", "prefix": "mine/", "allow": "read"}, {"identity": "a", "prefix": "mine/x/", "deny": true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		prefix string
		want   bool
	}{{"", true}, {"mine/", true}, {"mine/a", true}, {"theirs/", false}, {"mine/x/", false}} {
		if got := p.Reaches("a", PermRead, c.prefix); got != c.want {
			t.Errorf("Reaches(a, read, %q) = %v, want %v", c.prefix, got, c.want)
		}
	}
}

// A malformed policy is refused with where it is wrong.
func TestPolicyRefused(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{`{"rules": [{"identity": "a", "prefix": "", "allow": "write"}]}`, "rules[0]"},
		{`{"rules": [{"identity": "a", "prefix": "", "allow": "read", "deny": true}]}`, "either allows or denies"},
		{`{"rules": [{"identity": "bad name", "prefix": "", "allow": "read"}]}`, "letters, digits"},
		{`{"identities": {"a": {"sessions": 0}}}`, "identities.a"},
		{`{"defaults": {"leases": -1}}`, "defaults"},
		{`{"unknown": 1}`, "unknown field"},
		{`{} {}`, "after the JSON object"},
	} {
		_, err := ParsePolicy([]byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error mentioning %q", c.doc, err, c.want)
		}
	}
}
