package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	lgcli "github.com/lockgate/lockgate/internal/cli"
)

// fullname is the chart's base name for release lg: pods are fullname-N.
const fullname = release + "-lockgate"

// peerDomain is the headless Service's DNS domain in namespace locks.
const peerDomain = fullname + "-headless." + namespace + ".svc.cluster.local"

// varRef is a Kubernetes dependent-variable reference in args: $(NAME).
var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// podArgs is a container's args as the kubelet hands them to the process of
// pod podName: $(VAR) expanded from the container's env, where
// metadata.name is podName. An unresolved reference fails (the kubelet
// would pass it through literally).
func podArgs(t *testing.T, c corev1.Container, podName string) []string {
	t.Helper()
	vars := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			vars[e.Name] = podName
		case e.ValueFrom == nil:
			vars[e.Name] = e.Value
		}
	}
	var out []string
	for _, a := range c.Args {
		out = append(out, varRef.ReplaceAllStringFunc(a, func(ref string) string {
			name := varRef.FindStringSubmatch(ref)[1]
			v, ok := vars[name]
			if !ok {
				t.Errorf("%s: $(%s) is no variable of the container", a, name)
			}
			return v
		}))
	}
	return out
}

// lockgateEnv is the container's LOCKGATE_ variables with plain values (the
// CLI's environment layer).
func lockgateEnv(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, lgcli.EnvPrefix) && e.ValueFrom == nil {
			m[e.Name] = e.Value
		}
	}
	return m
}

// mountedFile checks that path lies in one of the container's volume
// mounts, of a volume the pod has.
func mountedFile(t *testing.T, spec corev1.PodSpec, c corev1.Container, flag, path string) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(path, m.MountPath+"/") {
			if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
				t.Errorf("%s %s: mount %s of no volume", flag, path, m.Name)
			}
			return
		}
	}
	t.Errorf("%s %s: in no volume mount of %s", flag, path, c.Name)
}

// effectiveNode is what `lockgate config print --for node --json` reports
// for args, with --config pointing at a copy of the pod's config file: the
// real CLI's resolution of flags, environment and file.
func effectiveNode(t *testing.T, args []string, configFile string) (map[string]string, error) {
	t.Helper()
	flags := withConfig(args, configFile)[1:] // after "node"
	var stdout, stderr bytes.Buffer
	root := lgcli.NewRoot(&stdout, &stderr)
	root.SetArgs(append([]string{"config", "print", "--for", "node", "--json", "--"}, flags...))
	if err := root.Execute(); err != nil {
		return nil, fmt.Errorf("%v\n%s", err, stderr.String())
	}
	var views []struct{ Name, Value, Source string }
	if err := json.Unmarshal(stdout.Bytes(), &views); err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, v := range views {
		m[v.Name] = v.Value
	}
	return m, nil
}

// withConfig is args with --config=configFile in place of the pod's path.
func withConfig(args []string, configFile string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if strings.HasPrefix(a, "--config=") {
			out[i] = "--config=" + configFile
		}
	}
	return out
}

// withoutConfig is args without --config: cli.CheckArgs checks flags and
// the environment; the config file is checked by `config print`
// (effectiveNode), which type-checks every setting against the whole
// command tree.
func withoutConfig(args []string) []string {
	return slices.DeleteFunc(slices.Clone(args), func(a string) bool { return strings.HasPrefix(a, "--config=") })
}

// apiAddr is pod i's API address.
func apiAddr(i, port int) string {
	return fmt.Sprintf("%s-%d.%s:%d", fullname, i, peerDomain, port)
}

// containerPort is the number of a container's named port.
func containerPort(t *testing.T, c corev1.Container, name string) int {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return int(p.ContainerPort)
		}
	}
	t.Fatalf("container %s has no port %q", c.Name, name)
	return 0
}

// TestHelmNodeArgs runs every pod's command line through the real CLI: the
// flags `lockgate node` accepts (cli.CheckArgs), then the effective
// configuration with the pod's own config file (`lockgate config print`):
// pod 0 bootstraps (while bootstrap is on), every other pod joins through
// all the others, and each advertises its stable DNS name.
func TestHelmNodeArgs(t *testing.T) {
	for _, f := range ciValues(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			m := renderManifest(t, f)
			sts := m.StatefulSets[0]
			spec := sts.Spec.Template.Spec
			c := spec.Containers[0]
			files := m.ConfigMaps[0].Data
			replicas := int(*sts.Spec.Replicas)
			apiPort, raftPort := containerPort(t, c, "api"), containerPort(t, c, "raft")
			bootstrap := !strings.Contains(f, "full") // full-values.yaml: bootstrap=false
			if len(files) != replicas {
				t.Errorf("%d config files for %d pods", len(files), replicas)
			}
			for i := range replicas {
				pod := fmt.Sprintf("%s-%d", fullname, i)
				args := podArgs(t, c, pod)
				cfgPath, _ := flagValue(args, "config")
				if want := "/etc/lockgate/nodes/" + pod + ".yaml"; cfgPath != want {
					t.Fatalf("pod %s: --config %q, want %q", pod, cfgPath, want)
				}
				mountedFile(t, spec, c, "--config", cfgPath)
				for _, fl := range []string{"tls-cert", "tls-key", "tls-ca", "auth-tokens-file", "admin-tokens-file"} {
					if v, ok := flagValue(args, fl); ok {
						mountedFile(t, spec, c, "--"+fl, v)
					}
				}
				// The pod's config file, where the test can read it.
				file := filepath.Join(t.TempDir(), pod+".yaml")
				if err := os.WriteFile(file, []byte(files[pod+".yaml"]), 0o600); err != nil {
					t.Fatal(err)
				}
				// The flags, then (config print) the flags with the file.
				if err := lgcli.CheckArgs(withoutConfig(args), lockgateEnv(c)); err != nil {
					t.Fatalf("pod %s: lockgate %s: %v", pod, strings.Join(args, " "), err)
				}
				eff, err := effectiveNode(t, args, file)
				if err != nil {
					t.Fatalf("pod %s: %v", pod, err)
				}
				host := pod + "." + peerDomain
				for k, want := range map[string]string{
					"id":             pod,
					"raft-addr":      "0.0.0.0:" + strconv.Itoa(raftPort),
					"raft-advertise": net.JoinHostPort(host, strconv.Itoa(raftPort)),
					"api-addr":       net.JoinHostPort(host, strconv.Itoa(apiPort)),
					"api-listen":     "0.0.0.0:" + strconv.Itoa(apiPort),
				} {
					if eff[k] != want {
						t.Errorf("pod %s: %s = %q, want %q", pod, k, eff[k], want)
					}
				}
				if !strings.HasPrefix(eff["data-dir"], "/data/") {
					t.Errorf("pod %s: data-dir %q, want a directory inside the volume at /data", pod, eff["data-dir"])
				}
				var peers []string
				for j := range replicas {
					if j != i {
						peers = append(peers, apiAddr(j, apiPort))
					}
				}
				wantJoin := strings.Join(peers, ",")
				wantBoot := "false"
				if i == 0 && bootstrap {
					wantBoot, wantJoin = "true", ""
				}
				if eff["bootstrap"] != wantBoot || eff["join"] != wantJoin {
					t.Errorf("pod %s: bootstrap=%s join=%s, want bootstrap=%s join=%s", pod, eff["bootstrap"], eff["join"], wantBoot, wantJoin)
				}
				tls := eff["tls-cert"] != ""
				if tls == (eff["insecure-raft-no-peer-auth"] == "true") {
					t.Errorf("pod %s: tls-cert %q with insecure-raft-no-peer-auth=%s: want exactly one", pod, eff["tls-cert"], eff["insecure-raft-no-peer-auth"])
				}
				if tls && (eff["tls-key"] == "" || eff["tls-ca"] == "") {
					t.Errorf("pod %s: TLS needs --tls-key and --tls-ca too: %v", pod, eff)
				}
			}
		})
	}
}

// TestHelmArgsCaught proves the argument checks catch what they are for:
// a misspelled flag, a misspelled setting in a pod's config file, and
// bootstrap with join.
func TestHelmArgsCaught(t *testing.T) {
	m := renderManifest(t, filepath.Join(chartDir, "ci", "tls-values.yaml"))
	c := m.StatefulSets[0].Spec.Template.Spec.Containers[0]
	pod := fullname + "-1"
	dir := t.TempDir()
	good := filepath.Join(dir, pod+".yaml")
	if err := os.WriteFile(good, []byte(m.ConfigMaps[0].Data[pod+".yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	args := podArgs(t, c, pod)
	if err := lgcli.CheckArgs(withoutConfig(args), nil); err != nil {
		t.Fatalf("the unmutated args: %v", err)
	}
	if _, err := effectiveNode(t, args, good); err != nil {
		t.Fatalf("the unmutated args and config file: %v", err)
	}
	if err := lgcli.CheckArgs(append(withoutConfig(args), "--raft-advertize=x:1"), nil); err == nil || !strings.Contains(err.Error(), "unknown flag") {
		t.Errorf("an unknown flag was accepted: %v", err)
	}
	if err := lgcli.CheckArgs(withoutConfig(args), map[string]string{"LOCKGATE_DATA_DIRR": "/data"}); err == nil {
		t.Error("an unknown LOCKGATE_ variable was accepted")
	}
	for name, body := range map[string]string{
		"misspelled": "jion:\n  - a:1\n",
		"wrong type": "bootstrap: sometimes\n",
	} {
		file := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := effectiveNode(t, args, file); err == nil {
			t.Errorf("config print accepted a config file with %q", body)
		}
	}
	// Both at once is refused when the node runs, not by flag parsing:
	// the chart's test checks every pod has one or the other (above).
}

// TestHelmCluster checks the cluster's objects: the StatefulSet, its
// Services, disruption budget, scheduling, probes, grace period, metrics
// annotations and security context.
func TestHelmCluster(t *testing.T) {
	for _, f := range ciValues(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			m := renderManifest(t, f)
			sts := m.StatefulSets[0]
			tpl := sts.Spec.Template
			spec := tpl.Spec
			c := spec.Containers[0]
			replicas := int(*sts.Spec.Replicas)
			if replicas%2 != 1 {
				t.Errorf("replicas %d", replicas)
			}
			for k, v := range sts.Spec.Selector.MatchLabels {
				if tpl.Labels[k] != v {
					t.Errorf("the selector's %s=%s is not on the pods", k, v)
				}
			}
			if sts.Spec.PodManagementPolicy != "Parallel" {
				t.Errorf("podManagementPolicy %q: after a full stop, OrderedReady waits on pod 0, which cannot be ready without a quorum", sts.Spec.PodManagementPolicy)
			}
			// Services: the headless one names the pods; the client one
			// selects them; both target the container's named ports.
			var headless, client *corev1.Service
			for _, s := range m.Services {
				if s.Spec.ClusterIP == corev1.ClusterIPNone {
					headless = s
				} else {
					client = s
				}
			}
			if headless == nil || client == nil {
				t.Fatal("want a headless and a client Service")
			}
			if sts.Spec.ServiceName != headless.Name || headless.Name+"."+namespace+".svc.cluster.local" != peerDomain {
				t.Errorf("serviceName %q, headless Service %q: the pods' DNS domain is not %s", sts.Spec.ServiceName, headless.Name, peerDomain)
			}
			if !headless.Spec.PublishNotReadyAddresses {
				t.Error("the headless Service must publish not-ready pods: a starting node dials its peers before it is ready")
			}
			for _, s := range []*corev1.Service{headless, client} {
				for k, v := range s.Spec.Selector {
					if tpl.Labels[k] != v {
						t.Errorf("Service %s selects %s=%s, not on the pods", s.Name, k, v)
					}
				}
				for _, p := range s.Spec.Ports {
					if p.TargetPort.Type != intstr.String {
						t.Errorf("Service %s port %s: target a named port", s.Name, p.Name)
						continue
					}
					if port := containerPort(t, c, p.TargetPort.StrVal); port != int(p.Port) {
						t.Errorf("Service %s port %s: %d, container %d", s.Name, p.Name, p.Port, port)
					}
				}
			}
			if slices.ContainsFunc(client.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "raft" }) {
				t.Error("the client Service exposes the Raft port")
			}
			// Volumes.
			if len(sts.Spec.VolumeClaimTemplates) != 1 || sts.Spec.VolumeClaimTemplates[0].Name != "data" {
				t.Fatal("want one volumeClaimTemplate, data")
			}
			if !slices.ContainsFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool { return v.Name == "data" && v.MountPath == "/data" }) {
				t.Error("the data volume is not mounted at /data")
			}
			// A quorum survives the disruption budget.
			if replicas > 1 {
				if len(m.PDBs) != 1 {
					t.Fatalf("%d PodDisruptionBudgets", len(m.PDBs))
				}
				pdb := m.PDBs[0]
				if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MinAvailable != nil {
					t.Fatal("want maxUnavailable alone")
				}
				if up := replicas - pdb.Spec.MaxUnavailable.IntValue(); up < replicas/2+1 || pdb.Spec.MaxUnavailable.IntValue() < 1 {
					t.Errorf("maxUnavailable %s of %d leaves %d, quorum %d", pdb.Spec.MaxUnavailable.String(), replicas, up, replicas/2+1)
				}
				for k, v := range pdb.Spec.Selector.MatchLabels {
					if tpl.Labels[k] != v {
						t.Errorf("the PDB selects %s=%s, not on the pods", k, v)
					}
				}
			}
			// One node per host: preferred by default, required on request.
			aff := spec.Affinity.PodAntiAffinity
			required := strings.Contains(f, "full")
			var terms []corev1.PodAffinityTerm
			if required {
				terms = aff.RequiredDuringSchedulingIgnoredDuringExecution
			} else {
				for _, w := range aff.PreferredDuringSchedulingIgnoredDuringExecution {
					terms = append(terms, w.PodAffinityTerm)
				}
			}
			if len(terms) != 1 || terms[0].TopologyKey != "kubernetes.io/hostname" {
				t.Errorf("anti-affinity (required=%v): %+v", required, aff)
			} else {
				for k, v := range terms[0].LabelSelector.MatchLabels {
					if tpl.Labels[k] != v {
						t.Errorf("anti-affinity selects %s=%s, not on the pods", k, v)
					}
				}
			}
			// Probes: /healthz (live), /readyz (ready), on the API port,
			// https when the node serves TLS.
			tlsOn := !strings.Contains(f, "insecure")
			scheme := corev1.URISchemeHTTP
			if tlsOn {
				scheme = corev1.URISchemeHTTPS
			}
			for name, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != name || p.HTTPGet.Port.StrVal != "api" || p.HTTPGet.Scheme != scheme {
					t.Errorf("probe %s: %+v, want GET %s %s on port api", name, p, scheme, name)
				}
			}
			// SIGTERM's work: up to 5 s draining the API, 2 s handing
			// leadership over, the log flushed; and the preStop sleep.
			grace := *spec.TerminationGracePeriodSeconds
			var sleep int64
			if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
				sleep = c.Lifecycle.PreStop.Sleep.Seconds
			}
			if grace < sleep+15 {
				t.Errorf("terminationGracePeriodSeconds %d: want the preStop sleep (%d s) + 15 s", grace, sleep)
			}
			if strings.Contains(f, "full") && sleep == 0 {
				t.Error("preStopSleepSeconds set, no preStop sleep")
			}
			// Metrics on the API port.
			if !strings.Contains(f, "insecure") {
				a := tpl.Annotations
				if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != strconv.Itoa(containerPort(t, c, "api")) || a["prometheus.io/path"] != "/metrics" || a["prometheus.io/scheme"] != "https" {
					t.Errorf("metrics annotations: %v", a)
				}
			}
			checkSecurity(t, spec.SecurityContext, c)
			if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
				t.Error("the nodes need no Kubernetes API token")
			}
		})
	}
}

// checkSecurity: non-root, a read-only root file system, no capabilities,
// no privilege escalation.
func checkSecurity(t *testing.T, pod *corev1.PodSecurityContext, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	switch {
	case pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot || pod.RunAsUser == nil || *pod.RunAsUser == 0:
		t.Errorf("%s: the pod must run as a non-root user: %+v", c.Name, pod)
	case pod.FSGroup == nil:
		t.Errorf("%s: no fsGroup: the volume is not writable by the user", c.Name)
	case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("%s: the root file system must be read-only", c.Name)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("%s: privilege escalation must be off", c.Name)
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("%s: every capability must be dropped: %+v", c.Name, sc.Capabilities)
	}
}

// TestHelmBackup checks the backup CronJob: `lockgate snapshot save`
// accepts its flags, asks every member, presents an admin credential and
// writes into the backup volume.
func TestHelmBackup(t *testing.T) {
	for _, f := range ciValues(t) {
		m := renderManifest(t, f)
		if len(m.CronJobs) == 0 {
			continue
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			cj := m.CronJobs[0]
			spec := cj.Spec.JobTemplate.Spec.Template.Spec
			c := spec.Containers[0]
			replicas := int(*m.StatefulSets[0].Spec.Replicas)
			apiPort := containerPort(t, m.StatefulSets[0].Spec.Template.Spec.Containers[0], "api")
			if cj.Spec.ConcurrencyPolicy != "Forbid" || spec.RestartPolicy != corev1.RestartPolicyNever {
				t.Errorf("concurrencyPolicy %q, restartPolicy %q", cj.Spec.ConcurrencyPolicy, spec.RestartPolicy)
			}
			args := podArgs(t, c, fullname+"-backup-29394615-x7k2p")
			if err := lgcli.CheckArgs(args, lockgateEnv(c)); err != nil {
				t.Fatalf("lockgate %s: %v", strings.Join(args, " "), err)
			}
			if !slices.Equal(args[:2], []string{"snapshot", "save"}) {
				t.Fatalf("args %v: want snapshot save", args)
			}
			var want []string
			for i := range replicas {
				want = append(want, apiAddr(i, apiPort))
			}
			if eps, _ := flagValue(args, "endpoints"); eps != strings.Join(want, ",") {
				t.Errorf("--endpoints %s, want every member: %s", eps, strings.Join(want, ","))
			}
			tok, hasTok := flagValue(args, "admin-token-file")
			cert, hasCert := flagValue(args, "tls-cert")
			if !hasTok && !hasCert {
				t.Error("no admin credential: --admin-token-file or --tls-cert")
			}
			ca, hasCA := flagValue(args, "tls-ca")
			if !hasCA {
				t.Error("the nodes serve TLS: --tls-ca")
			}
			for fl, v := range map[string]string{"admin-token-file": tok, "tls-cert": cert, "tls-ca": ca} {
				if v != "" {
					mountedFile(t, spec, c, "--"+fl, v)
				}
			}
			file := args[len(args)-1]
			mountedFile(t, spec, c, "FILE", file)
			if file != "/backups/"+fullname+"-backup-29394615-x7k2p.backup" {
				t.Errorf("FILE %s: want a name per run", file)
			}
			var claim string
			for _, v := range spec.Volumes {
				if v.Name == "backups" && v.PersistentVolumeClaim != nil {
					claim = v.PersistentVolumeClaim.ClaimName
				}
			}
			created := slices.ContainsFunc(m.PVCs, func(p *corev1.PersistentVolumeClaim) bool { return p.Name == claim })
			if claim == "" || created == strings.Contains(f, "cert-backup") { // that file names an existing claim
				t.Errorf("backup claim %q, created by the chart: %v", claim, created)
			}
			checkSecurity(t, spec.SecurityContext, c)
		})
	}
}
