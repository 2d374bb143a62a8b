package deploy

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/gateway/raftgw"
)

// The alerting rules and the dashboard may only query metrics that
// lockgate exports, or that come from elsewhere as named here.
var externalMetrics = map[string]string{
	"up":                          "Prometheus (one per scraped target)",
	"node_filesystem_avail_bytes": "the Prometheus node exporter",
	"node_filesystem_size_bytes":  "the Prometheus node exporter",
	"node_timex_offset_seconds":   "the Prometheus node exporter",
}

var (
	// promqlToken is a number, a metric or function name, or a keyword.
	promqlToken = regexp.MustCompile(`(?i)0x[0-9a-f]+|[0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?|[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// promqlStrip are the parts of an expression that name no metric:
	// strings, label matchers, ranges and subqueries, grouping label
	// lists, offsets, Grafana variables.
	promqlStrip = []*regexp.Regexp{
		regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`"),
		regexp.MustCompile(`\$\{[^}]*\}|\$[a-zA-Z_][a-zA-Z0-9_]*`),
		regexp.MustCompile(`\{[^}]*\}`),
		regexp.MustCompile(`\[[^\]]*\]`),
		regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`),
		regexp.MustCompile(`\boffset\s+-?[0-9a-zA-Z]+`),
	}
	promqlKeywords = map[string]bool{
		"and": true, "or": true, "unless": true, "bool": true, "by": true, "without": true, "on": true,
		"ignoring": true, "group_left": true, "group_right": true, "offset": true, "atan2": true, "inf": true, "nan": true,
	}
	// labelValues is a Grafana template query: label_values(metric, label).
	labelValues = regexp.MustCompile(`^\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{[^}]*\})?\s*,`)
)

// promqlMetricNames returns the metric names an expression (PromQL, or a
// Grafana label_values query) selects.
func promqlMetricNames(expr string) []string {
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		return []string{m[1]}
	}
	if strings.HasPrefix(strings.TrimSpace(expr), "label_values(") {
		return nil // label_values(label): every series
	}
	for _, re := range promqlStrip {
		expr = re.ReplaceAllString(expr, " ")
	}
	var out []string
	for _, loc := range promqlToken.FindAllStringIndex(expr, -1) {
		tok := expr[loc[0]:loc[1]]
		if tok[0] >= '0' && tok[0] <= '9' || tok[0] == '.' || promqlKeywords[strings.ToLower(tok)] {
			continue
		}
		if rest := strings.TrimLeft(expr[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue // a function or an aggregation
		}
		if !slices.Contains(out, tok) {
			out = append(out, tok)
		}
	}
	return out
}

func TestPromqlMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`max by (job) (lockgate_raft_leader_ready) == 0`: {"lockgate_raft_leader_ready"},
		`histogram_quantile(0.99, sum by (le) (rate(lockgate_raft_commit_seconds_bucket{job=~"$job"}[$__rate_interval]))) > 0.05`:                                {"lockgate_raft_commit_seconds_bucket"},
		`lockgate_raft_applied_index < on (job) group_left max by (job) (lockgate_raft_applied_index offset 2m)`:                                                 {"lockgate_raft_applied_index"},
		"process_resident_memory_bytes > on (job, instance) (0.9 * go_gc_gomemlimit_bytes < 4e18 or on (job, instance) 0 * go_gc_gomemlimit_bytes + 2147483648)": {"process_resident_memory_bytes", "go_gc_gomemlimit_bytes"},
		`sum by (code) (rate(lockgate_errors_total{code=~"unavailable|timeout"}[5m])) and up`:                                                                    {"lockgate_errors_total", "up"},
		`label_values(lockgate_raft_term, job)`: {"lockgate_raft_term"},
		`label_values(job)`:                     nil,
		`lockgate_raftlock_locks{instance=~"${instance:regex}"} or vector(0)`: {"lockgate_raftlock_locks"},
	} {
		if got := promqlMetricNames(expr); !slices.Equal(got, want) {
			t.Errorf("promqlMetricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

// dashboardQueries returns every query of a Grafana dashboard: its
// panels' targets (rows' collapsed panels too) and its template
// variables' queries.
func dashboardQueries(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			q := v.Query
			var obj struct{ Query string }
			if json.Unmarshal(q, &obj) == nil && obj.Query != "" {
				out = append(out, obj.Query)
			} else {
				var s string
				if json.Unmarshal(q, &s) == nil {
					out = append(out, s)
				}
			}
		}
	}
	return out
}

// usedMetrics maps each metric name the rules and the dashboard query to
// where it is used.
func usedMetrics(t *testing.T) map[string]string {
	t.Helper()
	used := map[string]string{}
	for _, r := range readRules(t) {
		for _, n := range promqlMetricNames(r.Expr) {
			used[n] = rulesFile + ": " + r.Alert
		}
	}
	qs := dashboardQueries(t, dashboardFile)
	if len(qs) < 10 {
		t.Fatalf("%s: %d queries found: the walk is broken", dashboardFile, len(qs))
	}
	for _, q := range qs {
		names := promqlMetricNames(q)
		if len(names) == 0 && !strings.HasPrefix(q, "label_values(") {
			t.Errorf("%s: query %q names no metric", dashboardFile, q)
		}
		for _, n := range names {
			used[n] = dashboardFile + ": " + q
		}
	}
	return used
}

// missingMetrics returns the names of used that are neither exported (a
// family name, or a histogram's or summary's _bucket, _sum or _count
// series) nor external, sorted.
func missingMetrics(used map[string]string, exported map[string]*dto.MetricFamily) []string {
	var out []string
	for n := range used {
		if _, ok := exported[n]; ok {
			continue
		}
		if _, ok := externalMetrics[n]; ok {
			continue
		}
		found := false
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base, ok := strings.CutSuffix(n, suffix)
			if f := exported[base]; ok && f != nil {
				t := f.GetType()
				found = t == dto.MetricType_HISTOGRAM || (t == dto.MetricType_SUMMARY && suffix != "_bucket")
			}
			if found {
				break
			}
		}
		if !found {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// scrape reads a /metrics endpoint into its metric families; a family
// appears only if it has a sample (a vector with no child has none).
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	for n, f := range fams {
		if len(f.GetMetric()) == 0 {
			delete(fams, n)
		}
	}
	return fams
}

// restCall sends a JSON request to a gateway and returns the status.
func restCall(t *testing.T, method, url, body string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// exportedByCluster starts a three-node raftlock cluster in this process,
// each node serving the gateway on its API address as `lockgate node`
// does (raftgw.Serve, on 127.0.0.1 free ports), under a policy that
// allows one lease per identity. It acquires a key, then a second one
// (an error reply, quota_exceeded, and a refusal), so that the vectors
// have children, then scrapes every node's /metrics and returns
// the union of the metric families.
func exportedByCluster(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := raftlock.StartLocalCluster(ctx, 3, t.TempDir(), func(cfg *raftlock.Config) {
		cfg.RaftAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.Logger = quiet
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	p, err := gateway.ParsePolicy([]byte(`{"defaults": {"sessions": 1, "leases": 1}}`))
	if err != nil {
		t.Fatal(err)
	}
	policy := &gateway.PolicyHolder{}
	policy.Set(p)
	for _, s := range c.Servers {
		raftgw.Serve(s, gateway.Options{Logger: quiet, Policy: policy})
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var api string
	for _, s := range c.Servers {
		if s.Node == leader {
			api = "http://" + s.APIAddr()
		}
	}
	for _, step := range []struct {
		path string
		want int
	}{
		{"/locks/metrics-a", http.StatusOK},
		{"/locks/metrics-b", http.StatusTooManyRequests}, // an error reply and a refusal: one lease per identity
	} {
		if got := restCall(t, http.MethodPost, api+step.path, `{"ttl_ms": 60000}`); got != step.want {
			t.Fatalf("POST %s: %d, want %d", step.path, got, step.want)
		}
	}
	all := map[string]*dto.MetricFamily{}
	for _, s := range c.Servers {
		for n, f := range scrape(t, "http://"+s.APIAddr()+"/metrics") {
			all[n] = f
		}
	}
	return all
}

// TestMetricsExported: every metric the alerting rules and the dashboard
// query is exported by a real raftlock cluster's /metrics (or named in
// externalMetrics) — and the check reports a name that is not.
func TestMetricsExported(t *testing.T) {
	used := usedMetrics(t)
	exported := exportedByCluster(t)
	for _, want := range []string{"lockgate_errors_total", "lockgate_identity_refusals_total", "lockgate_identity_usage", "lockgate_raft_commit_seconds"} {
		if exported[want] == nil {
			t.Fatalf("the cluster's /metrics lacks %s after the operations meant to create it", want)
		}
	}
	for _, n := range missingMetrics(used, exported) {
		t.Errorf("%s queries %s, which the cluster's /metrics does not export", used[n], n)
	}
	t.Run("detects-missing", func(t *testing.T) {
		probe := map[string]string{
			"lockgate_no_such_metric":        "made up",
			"lockgate_grants_total_bucket":   "a counter has no buckets",
			"lockgate_acquire_seconds_count": "a histogram's count: exported",
		}
		got := missingMetrics(probe, exported)
		if want := []string{"lockgate_grants_total_bucket", "lockgate_no_such_metric"}; !slices.Equal(got, want) {
			t.Errorf("missingMetrics = %q, want %q", got, want)
		}
	})
	if t.Failed() {
		names := make([]string, 0, len(exported))
		for n := range exported {
			names = append(names, n)
		}
		sort.Strings(names)
		t.Logf("exported: %s", strings.Join(names, " "))
	}
}
