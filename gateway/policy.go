package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync/atomic"
)

// A policy says what each identity may do on which keys, and how much of
// the cluster it may hold (docs/security.md, "Tenants"). It is a JSON file
// every node reads at start and again on SIGHUP; a file rather than
// replicated state because it serves every backend alike, needs no
// bootstrap (who may change the policy before there is one), and lives in
// the operator's configuration management next to the tokens files it
// names identities from.
//
//	{
//	  "defaults":   {"sessions": 1000, "leases": 100000, "waiters": 10000, "watches": 1000},
//	  "identities": {"batch": {"sessions": 50, "rate": 200, "burst": 400}},
//	  "rules": [
//	    {"identity": "billing", "prefix": "billing/", "allow": "lock"},
//	    {"identity": "*",       "prefix": "",         "allow": "read"},
//	    {"identity": "batch",   "prefix": "billing/", "deny": true}
//	  ]
//	}
//
// Rules: a rule applies to its identity ("*": every identity) on every key
// that starts with its prefix. A deny that applies refuses, whatever else
// applies; otherwise the most specific applying rule gives the
// permission (the longest prefix; at equal length a rule naming the
// identity before "*", then the higher permission). No applying rule: no
// permission. Without "rules" every identity may lock every key (and so
// read it), as a gateway without a policy allows.

// Perm is a permission on keys: each includes the ones below it.
type Perm uint8

// The permissions.
const (
	PermNone Perm = iota
	// PermRead: inspect, watch, see in the console.
	PermRead
	// PermLock: acquire, renew, release; sessions; and read.
	PermLock
	// PermAdmin: force-release in the console; and lock.
	PermAdmin
)

func (p Perm) String() string {
	switch p {
	case PermRead:
		return "read"
	case PermLock:
		return "lock"
	case PermAdmin:
		return "admin"
	}
	return "none"
}

func parsePerm(s string) (Perm, bool) {
	for p := PermRead; p <= PermAdmin; p++ {
		if s == p.String() {
			return p, true
		}
	}
	return PermNone, false
}

// Quotas bound what one identity holds, cluster-wide where the backend
// replicates who holds what (raftlock), per gateway otherwise.
type Quotas struct {
	// Sessions open, leases held (each key of a shared or multi-key
	// grant counts one), acquires waiting, watches open.
	Sessions, Leases, Waiters, Watches int
	// Rate and Burst are a token bucket of requests per second
	// (acquires, try-acquires, inspects, watches, session opens); 0:
	// unlimited. Renewals, keep-alives, releases and closes are never
	// counted.
	Rate  float64
	Burst int
}

// Defaults of Quotas: one identity can take at most a hundredth of the
// cluster's sessions (raftlock's DefaultMaxSessions is 100,000) and a
// tenth of a node's watch slots (10,000), so that the cluster's own caps
// are never what stops a well-behaved client. No rate by default: a
// single identity at full speed is what the latency benchmark measures;
// give each tenant one in the policy.
const (
	DefaultQuotaSessions = 1000
	DefaultQuotaLeases   = 100000
	DefaultQuotaWaiters  = 10000
	DefaultQuotaWatches  = 1000
)

// DefaultQuotas are the quotas of an identity that the policy does not
// name, without a policy's "defaults".
var DefaultQuotas = Quotas{Sessions: DefaultQuotaSessions, Leases: DefaultQuotaLeases,
	Waiters: DefaultQuotaWaiters, Watches: DefaultQuotaWatches}

// Rule is one rule of a policy.
type Rule struct {
	Identity string `json:"identity"`
	Prefix   string `json:"prefix"`
	Allow    string `json:"allow,omitempty"`
	Deny     bool   `json:"deny,omitempty"`
	perm     Perm
}

// quotaFile is a quotas object as the file has it: absent fields take the
// defaults.
type quotaFile struct {
	Sessions *int     `json:"sessions,omitempty"`
	Leases   *int     `json:"leases,omitempty"`
	Waiters  *int     `json:"waiters,omitempty"`
	Watches  *int     `json:"watches,omitempty"`
	Rate     *float64 `json:"rate,omitempty"`
	Burst    *int     `json:"burst,omitempty"`
}

func (f *quotaFile) over(q Quotas) Quotas {
	if f == nil {
		return q
	}
	set := func(d *int, v *int) {
		if v != nil {
			*d = *v
		}
	}
	set(&q.Sessions, f.Sessions)
	set(&q.Leases, f.Leases)
	set(&q.Waiters, f.Waiters)
	set(&q.Watches, f.Watches)
	set(&q.Burst, f.Burst)
	if f.Rate != nil {
		q.Rate = *f.Rate
	}
	if q.Rate > 0 && q.Burst <= 0 {
		q.Burst = max(1, int(q.Rate))
	}
	return q
}

func (q Quotas) check(where string) error {
	if q.Sessions < 1 || q.Leases < 1 || q.Waiters < 0 || q.Watches < 0 || q.Rate < 0 || q.Burst < 0 {
		return fmt.Errorf("%s: sessions and leases must be at least 1, waiters, watches, rate and burst at least 0", where)
	}
	return nil
}

// Policy is a parsed policy file. The zero Policy (and a nil *Policy) is
// no policy: every identity may lock every key, with DefaultQuotas.
type Policy struct {
	defaults   Quotas
	identities map[string]Quotas
	rules      []Rule // nil: no rules
	// Source names where the policy came from, for logs.
	Source string
}

type policyFile struct {
	Defaults   *quotaFile            `json:"defaults,omitempty"`
	Identities map[string]*quotaFile `json:"identities,omitempty"`
	Rules      *[]Rule               `json:"rules,omitempty"`
}

// ParsePolicy reads a policy. Unknown fields, unknown permissions, bad
// identity names and quotas below their minimum are errors that say where.
func ParsePolicy(data []byte) (*Policy, error) {
	var f policyFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if dec.More() {
		return nil, errors.New("policy: data after the JSON object")
	}
	p := &Policy{defaults: f.Defaults.over(DefaultQuotas), identities: map[string]Quotas{}}
	if err := p.defaults.check("policy: defaults"); err != nil {
		return nil, err
	}
	for name, q := range f.Identities {
		if err := CheckIdentity(name); err != nil {
			return nil, fmt.Errorf("policy: identities: %w", err)
		}
		p.identities[name] = q.over(p.defaults)
		if err := p.identities[name].check("policy: identities." + name); err != nil {
			return nil, err
		}
	}
	if f.Rules != nil {
		p.rules = make([]Rule, 0, len(*f.Rules))
		for i, r := range *f.Rules {
			where := fmt.Sprintf("policy: rules[%d]", i)
			if r.Identity != "*" {
				if err := CheckIdentity(r.Identity); err != nil {
					return nil, fmt.Errorf("%s: %w", where, err)
				}
			}
			switch perm, ok := parsePerm(r.Allow); {
			case r.Deny && r.Allow != "":
				return nil, fmt.Errorf("%s: a rule either allows or denies", where)
			case !r.Deny && !ok:
				return nil, fmt.Errorf("%s: allow must be read, lock or admin (or the rule a deny), not %q", where, r.Allow)
			default:
				r.perm = perm
			}
			p.rules = append(p.rules, r)
		}
		// The most specific first: a longer prefix, then a named identity.
		sort.SliceStable(p.rules, func(i, j int) bool {
			a, b := p.rules[i], p.rules[j]
			if len(a.Prefix) != len(b.Prefix) {
				return len(a.Prefix) > len(b.Prefix)
			}
			return a.Identity != "*" && b.Identity == "*"
		})
	}
	return p, nil
}

// LoadPolicy reads the policy file at path.
func LoadPolicy(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := ParsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	p.Source = path
	return p, nil
}

// HasRules reports whether the policy restricts keys (it has "rules").
func (p *Policy) HasRules() bool { return p != nil && p.rules != nil }

// Perm is what identity may do on key.
func (p *Policy) Perm(identity, key string) Perm {
	if !p.HasRules() {
		return PermLock
	}
	perm, best, named := PermNone, -1, false
	for _, r := range p.rules {
		if (r.Identity != identity && r.Identity != "*") || !strings.HasPrefix(key, r.Prefix) {
			continue
		}
		if r.Deny {
			return PermNone
		}
		isNamed := r.Identity != "*"
		switch {
		case best < 0:
			perm, best, named = r.perm, len(r.Prefix), isNamed
		case len(r.Prefix) == best && isNamed == named && r.perm > perm:
			perm = r.perm
		}
	}
	return perm
}

// Allowed reports whether identity has need on every key of keys.
func (p *Policy) Allowed(identity string, need Perm, keys ...string) bool {
	for _, k := range keys {
		if p.Perm(identity, k) < need {
			return false
		}
	}
	return true
}

// Reaches reports whether identity has need on some key that starts with
// prefix (what a prefix watch, or a session, may then be used for).
func (p *Policy) Reaches(identity string, need Perm, prefix string) bool {
	if !p.HasRules() {
		return true
	}
	if p.Perm(identity, prefix) >= need {
		return true
	}
	for _, r := range p.rules {
		if !r.Deny && r.perm >= need && (r.Identity == identity || r.Identity == "*") &&
			strings.HasPrefix(r.Prefix, prefix) && p.Perm(identity, r.Prefix) >= need {
			return true
		}
	}
	return false
}

// Quotas are identity's quotas.
func (p *Policy) Quotas(identity string) Quotas {
	if p == nil {
		return DefaultQuotas
	}
	if q, ok := p.identities[identity]; ok {
		return q
	}
	if p.identities == nil && p.defaults == (Quotas{}) {
		return DefaultQuotas
	}
	return p.defaults
}

// Names reports whether the policy names identity (in "identities" or a
// rule): its metrics get a label of their own, others are pooled.
func (p *Policy) Names(identity string) bool {
	if p == nil {
		return false
	}
	if _, ok := p.identities[identity]; ok {
		return true
	}
	for _, r := range p.rules {
		if r.Identity == identity {
			return true
		}
	}
	return false
}

// PolicyHolder holds the policy in force; Set swaps it atomically (a
// SIGHUP's reload). The zero PolicyHolder holds no policy.
type PolicyHolder struct {
	p atomic.Pointer[Policy]
}

// Get returns the policy in force (nil: none).
func (h *PolicyHolder) Get() *Policy {
	if h == nil {
		return nil
	}
	return h.p.Load()
}

// Set puts p in force.
func (h *PolicyHolder) Set(p *Policy) { h.p.Store(p) }
