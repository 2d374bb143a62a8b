package tenants

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/bench/report"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
)

// goodTenantsReport is a run that meets the goal: nothing lost, p99
// beside within 2× of alone, an attacker that was attacking.
func goodTenantsReport() *TenantsReport {
	victim := func(seqP99, hotP99 float64) TenantsVictim {
		return TenantsVictim{Attempts: 1000, Granted: 1000, SuccessRate: 1, Releases: 1000, Sessions: 8, SessionsKept: 8, WatchEvents: 2000,
			Sequential: TenantsLatency{Count: 600, P50US: 800, P99US: seqP99, MaxUS: 2 * seqP99},
			Contended:  TenantsLatency{Count: 400, P50US: 3000, P99US: hotP99, MaxUS: 2 * hotP99}, Failures: map[string]int{}}
	}
	return &TenantsReport{Nodes: 3, PhaseS: 30, PolicyFile: true, Policy: DefaultTenantsPolicy(), Attacker: DefaultTenantsPolicy().QuotaOf(TenantAttacker),
		Phases: []TenantsPhase{
			{Name: PhaseAlone, Victim: victim(2000, 8000)},
			{Name: PhaseBeside, Victim: victim(3000, 12000), Attacker: &TenantsAttacker{Attempts: 50000, Succeeded: 3000,
				Refusals: map[string]int{CodeQuotaExceeded: 900, CodeRateLimited: 46000, CodeForbidden: 100}, Errors: map[string]int{}}},
		}}
}

func TestTenantsGoal(t *testing.T) {
	rep := goodTenantsReport()
	rep.evaluate()
	if !rep.GoalMet || !rep.Goal.Met || len(rep.Goal.Failures) != 0 {
		t.Fatalf("a clean run does not meet the goal: %q", rep.Goal.Failures)
	}
	if rep.Goal.SequentialRatio != 1.5 || rep.Goal.ContendedRatio != 1.5 || rep.Goal.Ratio != 1.5 {
		t.Errorf("ratios %+v: want 1.5 each (3000/2000 sequential, 12000/8000 contended)", rep.Goal)
	}
	// Exactly twice is within the goal.
	rep = goodTenantsReport()
	rep.Phases[1].Victim.Sequential.P99US = 4000
	rep.evaluate()
	if !rep.GoalMet || rep.Goal.Ratio != 2 {
		t.Errorf("p99 beside exactly 2× alone: met %v, ratio %v, %q; want met at 2", rep.GoalMet, rep.Goal.Ratio, rep.Goal.Failures)
	}

	for name, c := range map[string]struct {
		breakIt func(r *TenantsReport)
		want    string // in a failure
	}{
		"contended p99 2.5×": {func(r *TenantsReport) { r.Phases[1].Victim.Contended.P99US = 20000 }, "contended: the victim's p99 beside the attacker is 2.50×"},
		"sequential p99 3×":  {func(r *TenantsReport) { r.Phases[1].Victim.Sequential.P99US = 6000 }, "sequential: the victim's p99 beside the attacker is 3.00×"},
		"an acquire refused": {func(r *TenantsReport) {
			v := &r.Phases[1].Victim
			v.Granted--
			v.Failures["acquire: quota_exceeded"] = 1
		}, "beside: 1 of the victim's 1000 acquires were not granted (acquire: quota_exceeded 1)"},
		"a lease lost":           {func(r *TenantsReport) { r.Phases[1].Victim.LeasesLost = 1 }, "beside: the victim lost 1 leases"},
		"a release failed":       {func(r *TenantsReport) { r.Phases[1].Victim.ReleaseFailures = 2 }, "beside: 2 of the victim's releases failed"},
		"a session lost":         {func(r *TenantsReport) { r.Phases[1].Victim.SessionsLost = 1 }, "beside: the victim lost 1 of its 8 sessions"},
		"the watch broke":        {func(r *TenantsReport) { r.Phases[1].Victim.WatchBreaks = 1 }, "beside: the victim's watch broke 1 times"},
		"no watch event":         {func(r *TenantsReport) { r.Phases[1].Victim.WatchEvents = 0 }, "beside: the victim's watch received no event"},
		"lost alone too":         {func(r *TenantsReport) { r.Phases[0].Victim.LeasesLost = 3 }, "alone: the victim lost 3 leases"},
		"no victim acquire":      {func(r *TenantsReport) { r.Phases[0].Victim = TenantsVictim{WatchEvents: 1} }, "alone: the victim made no acquire"},
		"no attack":              {func(r *TenantsReport) { r.Phases[1].Attacker.Succeeded = 0 }, "the attacker had no request carried out"},
		"no attacker at all":     {func(r *TenantsReport) { r.Phases[1].Attacker = nil }, "the attacker had no request carried out"},
		"victim key to attacker": {func(r *TenantsReport) { r.Phases[1].Attacker.ForbiddenGranted = 4 }, "the attacker was granted the victim's keys 4 times"},
		"node exit":              {func(r *TenantsReport) { r.NodeExits = []string{"after phase beside: node 2 is not running"} }, "node 2 is not running"},
		"no phase beside":        {func(r *TenantsReport) { r.Phases = r.Phases[:1] }, "the run lacks a phase"},
		"no contended alone": {func(r *TenantsReport) { r.Phases[0].Victim.Contended = TenantsLatency{} },
			"contended: no p99 to compare (0 acquires alone, 400 beside)"},
	} {
		t.Run(name, func(t *testing.T) {
			rep := goodTenantsReport()
			c.breakIt(rep)
			rep.evaluate()
			if rep.GoalMet || rep.Goal.Met {
				t.Fatalf("goal met; want not met with %q", c.want)
			}
			if !slices.ContainsFunc(rep.Goal.Failures, func(f string) bool { return strings.Contains(f, c.want) }) {
				t.Errorf("failures %q: none says %q", rep.Goal.Failures, c.want)
			}
		})
	}
}

// The report's JSON has the fields the docs name, and its table says
// whether the goal was met.
func TestTenantsReportOutput(t *testing.T) {
	rep := goodTenantsReport()
	rep.Phases[1].Victim.Contended.P99US = 20000
	rep.Phases[1].Attacker.Floods = []TenantsFlood{{Name: FloodLeasesWS, Quota: QuotaLeases, Attempts: 2100, Succeeded: 2000, Peak: 2000, Cap: 4000,
		Refusals: map[string]int{CodeQuotaExceeded: 100}, Errors: map[string]int{}}}
	rep.Phases[1].Attacker.Quotas = []TenantsQuota{{Name: QuotaLeases, Limit: 2000, Peak: 2000, RefusedAt: 2000, Refusals: 100}}
	rep.evaluate()
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m["goal_met"] != false {
		t.Errorf("goal_met = %v, want false", m["goal_met"])
	}
	goal := m["goal"].(map[string]any)
	if goal["contended_p99_ratio"] != 2.5 || goal["p99_ratio"] != 2.5 {
		t.Errorf("goal %v: want contended_p99_ratio and p99_ratio 2.5", goal)
	}
	beside := m["phases"].([]any)[1].(map[string]any)
	for _, k := range []string{"attempts", "granted", "success_rate", "sequential", "contended", "leases_lost", "sessions_kept", "watch_events"} {
		if _, ok := beside["victim"].(map[string]any)[k]; !ok {
			t.Errorf("victim JSON lacks %q", k)
		}
	}
	if r := beside["attacker"].(map[string]any)["refusals"].(map[string]any); r[CodeRateLimited] != 46000.0 {
		t.Errorf("attacker refusals %v", r)
	}
	buf.Reset()
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"GOAL NOT MET", "contended 2.50×", "leases-ws", "first refused quota_exceeded holding 2000"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}

var hexToken = regexp.MustCompile(`^[0-9a-f]{64}$`)

func TestTenantsFiles(t *testing.T) {
	dir := t.TempDir()
	pol := DefaultTenantsPolicy()
	f, err := writeTenantsFiles(dir, pol, true)
	if err != nil {
		t.Fatal(err)
	}
	if !hexToken.MatchString(f.VictimToken) || !hexToken.MatchString(f.AttackerToken) || f.VictimToken == f.AttackerToken {
		t.Fatalf("tokens %q, %q: want two different 64-digit hex tokens", f.VictimToken, f.AttackerToken)
	}
	lines := tokenLines(t, f.Tokens)
	if want := []string{"victim " + f.VictimToken, "attacker " + f.AttackerToken}; !slices.Equal(lines, want) {
		t.Errorf("tokens file lines %q, want %q", lines, want)
	}
	admin := tokenLines(t, f.Admin)
	if len(admin) != 1 || !hexToken.MatchString(admin[0]) || admin[0] == f.VictimToken || admin[0] == f.AttackerToken {
		t.Errorf("admin tokens file lines %q: want one token of its own", admin)
	}
	for _, p := range []string{f.Tokens, f.Admin, f.Policy} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v: want 0600", p, err, fi.Mode())
		}
	}
	got, err := ReadTenantsPolicy(f.Policy)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, pol) {
		t.Errorf("policy file reads back as %+v, want %+v", got, pol)
	}
	// The file's shape, as the nodes read it.
	var raw map[string]map[string]any
	data, _ := os.ReadFile(f.Policy)
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(top["identities"], &raw); err != nil {
		t.Fatal(err)
	}
	if a := raw[TenantAttacker]; a["sessions"] != 200.0 || a["leases"] != 2000.0 || a["waiters"] != 500.0 || a["watches"] != 100.0 || a["rate"] != 500.0 || a["burst"] != 1000.0 {
		t.Errorf("attacker's quotas in the file: %v", a)
	}
	var rules []map[string]any
	if err := json.Unmarshal(top["rules"], &rules); err != nil || len(rules) != 3 || rules[0]["identity"] != "victim" || rules[0]["prefix"] != "victim/" || rules[0]["allow"] != "lock" {
		t.Errorf("rules in the file: %v, %v", rules, err)
	}
	if _, ok := rules[0]["deny"]; ok {
		t.Errorf("rule %v: deny written though false", rules[0])
	}
	args := strings.Join(f.nodeArgs(), " ")
	if want := fmt.Sprintf("--auth-tokens-file %s --admin-tokens-file %s --policy-file %s", f.Tokens, f.Admin, f.Policy); args != want {
		t.Errorf("node args %q, want %q", args, want)
	}

	// The control run: bare tokens, no policy file.
	dir = t.TempDir()
	f, err = writeTenantsFiles(dir, pol, false)
	if err != nil {
		t.Fatal(err)
	}
	if lines := tokenLines(t, f.Tokens); !slices.Equal(lines, []string{f.VictimToken, f.AttackerToken}) {
		t.Errorf("bare tokens file lines %q", lines)
	}
	if f.Policy != "" || strings.Contains(strings.Join(f.nodeArgs(), " "), "--policy-file") {
		t.Errorf("control run: policy %q, args %q: want none", f.Policy, f.nodeArgs())
	}
	if _, err := os.Stat(filepath.Join(dir, "policy.json")); !os.IsNotExist(err) {
		t.Errorf("control run wrote a policy file: %v", err)
	}
}

// tokenLines are the lines of a tokens file that are not comments.
func tokenLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

func TestReadTenantsPolicy(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "p.json")
	os.WriteFile(p, []byte(`{"defaults": {"sessions": 5, "leases": 6}, "identities": {"attacker": {"sessions": 1, "leases": 2, "rate": 0.5}},
		"rules": [{"identity": "*", "prefix": "x/", "deny": true}]}`), 0o600)
	got, err := ReadTenantsPolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	if q := got.QuotaOf(TenantAttacker); q.Sessions != 1 || q.Rate != 0.5 {
		t.Errorf("attacker's quotas %+v", q)
	}
	if q := got.QuotaOf(TenantVictim); q.Sessions != 5 || q.Leases != 6 {
		t.Errorf("victim's quotas (the defaults) %+v", q)
	}
	if len(got.Rules) != 1 || !got.Rules[0].Deny {
		t.Errorf("rules %+v", got.Rules)
	}
	os.WriteFile(p, []byte(`{"identities": {"attacker": {"sesions": 1}}}`), 0o600)
	if _, err := ReadTenantsPolicy(p); err == nil || !strings.Contains(err.Error(), "sesions") {
		t.Errorf("a misspelt field: %v, want an error naming it", err)
	}
}

func TestTenantsRefusal(t *testing.T) {
	for _, c := range []struct {
		err         error
		code, quota string
	}{
		{fmt.Errorf("open: %w", lock.ErrQuotaExceeded), CodeQuotaExceeded, ""},
		{fmt.Errorf("try: %w", lock.ErrRateLimited), CodeRateLimited, ""},
		{fmt.Errorf("open: %w", lock.ErrTooManySessions), CodeTooManySessions, ""},
		{fmt.Errorf("acquire: %w", lock.ErrForbidden), CodeForbidden, ""},
		{&client.ServerError{Code: "too_many_waiters"}, codeTooManyWaiters, ""},
		{&client.ServerError{Code: "too_many_watches"}, codeTooManyWatches, ""},
		{&tenantsRESTError{Status: 429, Code: CodeQuotaExceeded, Quota: QuotaLeases}, CodeQuotaExceeded, QuotaLeases},
		{&tenantsRESTError{Status: 429, Code: codeTooManyTickets}, codeTooManyTickets, ""},
		{&tenantsRESTError{Status: 409, Code: "held"}, "", ""},
		{fmt.Errorf("acquire: %w", lock.ErrUnavailable), "", ""},
		{&lock.HeldError{Key: "k"}, "", ""},
		{errors.New("boom"), "", ""},
	} {
		if code, quota := tenantsRefusal(c.err); code != c.code || quota != c.quota {
			t.Errorf("tenantsRefusal(%v) = %q, %q; want %q, %q", c.err, code, quota, c.code, c.quota)
		}
	}
	if k := tenantsErrKind(fmt.Errorf("dial: %w", client.ErrUnauthorized)); k != "unauthorized" {
		t.Errorf("kind of a refused token: %q", k)
	}
	if k := tenantsErrKind(&tenantsRESTError{Status: 502}); k != "http 502" {
		t.Errorf("kind of a bare 502: %q", k)
	}
}

func TestTenantsLatencyOf(t *testing.T) {
	if l := tenantsLatencyOf(report.NewHist()); l != (TenantsLatency{}) {
		t.Errorf("empty histogram: %+v", l)
	}
	h := report.NewHist()
	for i := int64(1); i <= 100; i++ {
		h.RecordValue(i * 1000) // 1 ms … 100 ms
	}
	l := tenantsLatencyOf(h)
	near := func(got, want float64) bool { return got >= want*0.999 && got <= want*1.001 }
	if l.Count != 100 || !near(l.P50US, 50000) || !near(l.P99US, 99000) || !near(l.MaxUS, 100000) {
		t.Errorf("latency of 1…100 ms: %+v; want p50 50 ms, p99 99 ms, max 100 ms", l)
	}
}

func TestTenantsConfigFill(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "lockgate")
	os.WriteFile(bin, nil, 0o755)
	c := TenantsConfig{Binary: bin}
	if err := c.fill(); err != nil {
		t.Fatal(err)
	}
	if c.Duration != DefaultTenantsDuration || c.SeqWorkers != DefaultTenantsSeqWorkers || c.AttackConns != DefaultTenantsAttackConns ||
		c.WatchPrefix != "attacker/" || c.Policy == nil || c.Policy.QuotaOf(TenantAttacker).Leases != 2000 {
		t.Errorf("defaults: %+v", c)
	}
	for _, bad := range []TenantsConfig{{}, {Binary: bin, Duration: time.Second}, {Binary: bin, AttackConns: 99}, {Binary: bin, SeqWorkers: -1, HotWorkers: -1}} {
		if err := bad.fill(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	if tenantsCap(2000) != 4000 || tenantsCap(0) != tenantsMinCap {
		t.Errorf("caps: %d, %d", tenantsCap(2000), tenantsCap(0))
	}
}
