package deploy

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	k8sjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The chart, and the values files it is rendered with (chart-testing's
// ci/ convention: each file is one supported configuration).
const (
	chartDir = "helm/lockgate"
	// helmModule is run from the Go module proxy: no helm binary needs to
	// be installed, and every run uses the same version.
	helmModule = "helm.sh/helm/v3/cmd/helm@" + helmVersion
	// The release and namespace the tests render: pods are
	// lg-lockgate-0 … in namespace locks.
	release   = "lg"
	namespace = "locks"
	// kubeVersion is the cluster version helm template and lint assume
	// (without it, helm's default of 1.20 is below the chart's kubeVersion).
	kubeVersion = "1.31.0"
)

// helmVersion is helmModule's version (scripts/build-helm.sh, which `make
// deps` runs, builds the same one; a cached binary's build information
// must name it).
const helmVersion = "v3.22.0"

var helm struct {
	once sync.Once
	path string
	err  error
}

// helmBin returns the helm binary, built once (go install from the module
// proxy; the first build downloads its modules) and kept as
// lockgate/helm/v3.22.0/helm under the user's cache directory, beside the
// binaries internal/servers builds; later runs reuse it after checking its
// version. Skipped under -short.
func helmBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the Helm chart is rendered with helm built from the module proxy")
	}
	helm.once.Do(func() { helm.path, helm.err = buildHelm() })
	if helm.err != nil {
		t.Fatal(helm.err)
	}
	return helm.path
}

func buildHelm() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "lockgate", "helm", helmVersion)
	path := filepath.Join(dir, "helm")
	if bi, err := buildinfo.ReadFile(path); err == nil && bi.Main.Path == "helm.sh/helm/v3" && bi.Main.Version == helmVersion {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Into a directory beside it, then renamed: a concurrent run (another
	// checkout's tests) sees the old binary or the whole new one.
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	cmd := exec.Command("go", "install", helmModule)
	// Outside this module: go install pkg@version ignores go.mod, but not
	// a GOFLAGS=-mod=… that a caller may have set.
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s: %v\n%s", helmModule, err, out)
	}
	if err := os.Rename(filepath.Join(tmp, "helm"), path); err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "deploy: built %s in %.1fs into %s\n", helmModule, time.Since(start).Seconds(), path)
	return path, nil
}

// runHelm runs helm with args and returns its stdout, or an error with its
// stderr.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	// A private home: no repositories, plugins or caches of the machine's.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// render runs helm template on the chart with the values file (if any) and
// --set overrides, and returns its output.
func render(t *testing.T, valuesFile string, set ...string) (string, error) {
	t.Helper()
	args := []string{"template", release, chartDir, "--namespace", namespace, "--kube-version", kubeVersion}
	if valuesFile != "" {
		args = append(args, "--values", valuesFile)
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return runHelm(t, args...)
}

// ciValues lists the chart's ci/*-values.yaml files.
func ciValues(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s/ci/*-values.yaml: %v", chartDir, err)
	}
	sort.Strings(files)
	return files
}

// manifest is what a chart renders, decoded into the Kubernetes API types.
type manifest struct {
	StatefulSets []*appsv1.StatefulSet
	Services     []*corev1.Service
	ConfigMaps   []*corev1.ConfigMap
	PDBs         []*policyv1.PodDisruptionBudget
	CronJobs     []*batchv1.CronJob
	PVCs         []*corev1.PersistentVolumeClaim
	Accounts     []*corev1.ServiceAccount
}

// typeMeta is the part of an object that names its type.
type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// decodeStrict decodes one object's JSON into out as the API server does
// (sigs.k8s.io/json: field names case-sensitive), refusing any field out's
// type does not have (a misspelled or misplaced field in a template) and a
// field given twice.
func decodeStrict(doc []byte, out any) error {
	strict, err := k8sjson.UnmarshalStrict(doc, out)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// decodeObject decodes one rendered object (JSON) into its API type, by its
// apiVersion and kind; an object of a type the chart is not known to
// render fails.
func decodeObject(doc []byte, m *manifest) error {
	var tm typeMeta
	if err := json.Unmarshal(doc, &tm); err != nil {
		return err
	}
	var into any
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 StatefulSet":
		o := new(appsv1.StatefulSet)
		m.StatefulSets, into = append(m.StatefulSets, o), o
	case "v1 Service":
		o := new(corev1.Service)
		m.Services, into = append(m.Services, o), o
	case "v1 ConfigMap":
		o := new(corev1.ConfigMap)
		m.ConfigMaps, into = append(m.ConfigMaps, o), o
	case "policy/v1 PodDisruptionBudget":
		o := new(policyv1.PodDisruptionBudget)
		m.PDBs, into = append(m.PDBs, o), o
	case "batch/v1 CronJob":
		o := new(batchv1.CronJob)
		m.CronJobs, into = append(m.CronJobs, o), o
	case "v1 PersistentVolumeClaim":
		o := new(corev1.PersistentVolumeClaim)
		m.PVCs, into = append(m.PVCs, o), o
	case "v1 ServiceAccount":
		o := new(corev1.ServiceAccount)
		m.Accounts, into = append(m.Accounts, o), o
	default:
		return fmt.Errorf("an object of type %q %q, which this test does not know", tm.APIVersion, tm.Kind)
	}
	if err := decodeStrict(doc, into); err != nil {
		return fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return nil
}

// docSep splits a multi-document YAML stream.
var docSep = regexp.MustCompile(`(?m)^---[ \t]*(#.*)?$`)

// splitObjects converts each non-empty YAML document of a rendered stream
// to JSON (strictly: a key given twice fails).
func splitObjects(rendered string) ([][]byte, error) {
	var docs [][]byte
	for i, d := range docSep.Split(rendered, -1) {
		j, err := yaml.YAMLToJSONStrict([]byte(d))
		if err != nil {
			return nil, fmt.Errorf("document %d: %v\n%s", i, err, d)
		}
		if s := string(j); s == "null" || s == "{}" {
			continue // only comments
		}
		docs = append(docs, j)
	}
	return docs, nil
}

// decodeManifest decodes every object of a rendered stream.
func decodeManifest(rendered string) (*manifest, error) {
	docs, err := splitObjects(rendered)
	if err != nil {
		return nil, err
	}
	m := new(manifest)
	for _, d := range docs {
		if err := decodeObject(d, m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// renderManifest renders and decodes, failing the test on any error.
func renderManifest(t *testing.T, valuesFile string, set ...string) *manifest {
	t.Helper()
	out, err := render(t, valuesFile, set...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeManifest(out)
	if err != nil {
		t.Fatalf("%s: %v", valuesFile, err)
	}
	return m
}

// TestHelmLint runs helm lint --strict with each supported configuration.
func TestHelmLint(t *testing.T) {
	for _, f := range ciValues(t) {
		if out, err := runHelm(t, "lint", chartDir, "--strict", "--namespace", namespace, "--kube-version", kubeVersion, "--values", f); err != nil {
			t.Errorf("%s: %v", f, err)
		} else if !strings.Contains(out, "0 chart(s) failed") {
			t.Errorf("%s: helm lint says:\n%s", f, out)
		}
	}
}

// TestHelmDecodeStrict decodes every object the chart renders, in each
// supported configuration, into its Kubernetes API type with unknown fields
// refused, and checks the set of objects.
func TestHelmDecodeStrict(t *testing.T) {
	for _, f := range ciValues(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			m := renderManifest(t, f)
			backup := strings.Contains(f, "backup") || strings.Contains(f, "full")
			if len(m.StatefulSets) != 1 || len(m.Services) != 2 || len(m.ConfigMaps) != 1 || len(m.Accounts) != 1 {
				t.Errorf("want 1 StatefulSet, 2 Services, 1 ConfigMap, 1 ServiceAccount; got %d, %d, %d, %d",
					len(m.StatefulSets), len(m.Services), len(m.ConfigMaps), len(m.Accounts))
			}
			if backup != (len(m.CronJobs) == 1) {
				t.Errorf("backup CronJobs: %d", len(m.CronJobs))
			}
		})
	}
}

// TestHelmStrictDecodingCatches proves the strict decoding catches what a
// template could get wrong: a misspelled field, a field at the wrong level,
// a key given twice, an unknown kind.
func TestHelmStrictDecodingCatches(t *testing.T) {
	out, err := render(t, filepath.Join(chartDir, "ci", "tls-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := splitObjects(out)
	if err != nil {
		t.Fatal(err)
	}
	var sts []byte
	for _, d := range docs {
		if bytes.Contains(d, []byte(`"kind":"StatefulSet"`)) {
			sts = d
		}
	}
	if sts == nil {
		t.Fatal("no StatefulSet rendered")
	}
	if err := decodeObject(sts, new(manifest)); err != nil {
		t.Fatalf("the unmutated StatefulSet does not decode: %v", err)
	}
	mutate := func(t *testing.T, old, new string) []byte {
		t.Helper()
		if !bytes.Contains(sts, []byte(old)) {
			t.Fatalf("%s not in the StatefulSet", old)
		}
		return bytes.Replace(sts, []byte(old), []byte(new), 1)
	}
	for _, c := range []struct{ name, old, new string }{
		{"misspelled", `"terminationGracePeriodSeconds":`, `"terminationGracePeriodSecond":`},
		{"misspelled probe", `"readinessProbe":`, `"readynessProbe":`},
		// encoding/json would match a field name in any case; the API
		// server does not.
		{"wrong case", `"serviceName":`, `"servicename":`},
		// A pod's field at the StatefulSet's level.
		{"misplaced", `"serviceName":`, `"serviceAccountName":"x","serviceName":`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := decodeObject(mutate(t, c.old, c.new), new(manifest)); err == nil || !strings.Contains(err.Error(), "unknown field") {
				t.Errorf("a StatefulSet with %s decoded: %v", c.new, err)
			}
		})
	}
	t.Run("unknown kind", func(t *testing.T) {
		if err := decodeObject(mutate(t, `"kind":"StatefulSet"`, `"kind":"StatefulSets"`), new(manifest)); err == nil {
			t.Error("an unknown kind decoded")
		}
	})
	t.Run("key twice", func(t *testing.T) {
		if _, err := splitObjects("kind: Service\napiVersion: v1\nkind: Service\n"); err == nil {
			t.Error("a YAML key given twice was accepted")
		}
	})
	t.Run("misspelled in a template", func(t *testing.T) {
		// The same through helm: a copy of the chart with one field
		// misspelled in its StatefulSet template renders (helm does not
		// check fields) but does not decode.
		dir := t.TempDir()
		if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "templates", "statefulset.yaml")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.Replace(b, []byte("podManagementPolicy:"), []byte("podManagmentPolicy:"), 1)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := runHelm(t, "template", release, dir, "--namespace", namespace, "--kube-version", kubeVersion, "--set", "tls.secretName=x")
		if err != nil {
			t.Fatalf("helm refused the misspelled template itself (the decoding is then not what catches it): %v", err)
		}
		if _, err := decodeManifest(out); err == nil || !strings.Contains(err.Error(), "podManagmentPolicy") {
			t.Errorf("a misspelled field in the template decoded: %v", err)
		}
	})
}

// TestHelmRefuses: values the chart must refuse at render time.
func TestHelmRefuses(t *testing.T) {
	tls := "tls.secretName=lockgate-tls"
	for _, c := range []struct {
		name string
		set  []string
		want string
	}{
		{"two replicas", []string{tls, "replicas=2"}, "replicas must be odd"},
		{"four replicas", []string{tls, "replicas=4"}, "replicas must be odd"},
		{"no replicas", []string{tls, "replicas=0"}, "replicas must be odd"},
		{"no peer authentication", nil, "tls.secretName is required"},
		{"backup without a credential", []string{"insecureRaftNoPeerAuth=true", "backup.enabled=true"}, "backup.enabled needs an admin credential"},
		{"unknown anti-affinity", []string{tls, "antiAffinity=sometimes"}, "antiAffinity must be"},
		{"PDB below quorum", []string{tls, "podDisruptionBudget.maxUnavailable=2"}, "podDisruptionBudget.maxUnavailable 2"},
		{"PDB blocking drains", []string{tls, "podDisruptionBudget.maxUnavailable=0"}, "podDisruptionBudget.maxUnavailable 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := render(t, "", c.set...)
			if err == nil {
				t.Fatalf("rendered with %v:\n%.300s", c.set, out)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("refused, but not with %q: %v", c.want, err)
			}
		})
	}
	// The same values pass with an odd count: it is the count that fails.
	if _, err := render(t, "", tls, "replicas=5"); err != nil {
		t.Errorf("replicas=5: %v", err)
	}
}
