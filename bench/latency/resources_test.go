package latency

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/internal/servers"
)

// fakeProcs is a procSource over processes the test started: the first
// is the leader.
type fakeProcs struct{ procs []provision.ServerProc }

func (f fakeProcs) Procs(string) ([]provision.ServerProc, string) { return f.procs, "" }
func (f fakeProcs) LeaderPID(string) int                          { return f.procs[0].PID }

// startProc starts script in a shell, in a process group of its own as a
// server is, and kills the group at the end.
func startProc(t *testing.T, script string) int {
	t.Helper()
	c := exec.Command("sh", "-c", script)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		_ = c.Wait()
	})
	return c.Process.Pid
}

// A window in which one server burns CPU: the run's server CPU, the
// leader's and the burning process's are at least what it burned, the
// idle one's is near nothing, roles are set, and ops divide it.
func TestResourcesMeasured(t *testing.T) {
	busy := startProc(t, "while :; do :; done")
	idle := startProc(t, "exec sleep 60")
	sp := &sampler{s: fakeProcs{procs: []provision.ServerProc{{Name: "node busy", PID: busy}, {Name: "node idle", PID: idle}}}}
	r := newRun(provision.Raft, provision.Direct, CacheOff, Sequential, 1)

	mark := sp.begin(provision.Raft)
	start, _ := servers.ReadProcTable()
	startCPU, _ := start.CPU(busy)
	const burn = 400 * time.Millisecond
	deadline := time.Now().Add(60 * time.Second)
	for {
		pt, err := servers.ReadProcTable()
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := pt.CPU(busy); c-startCPU >= burn {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the busy process did not use 400ms of CPU in 60 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	sp.end(mark, provision.Raft, r)
	r.rounds = []roundResult{{ops: 100, elapsed: time.Second}}
	r.summarise()

	res := r.Resources
	if res == nil || res.Servers == nil || res.Client == nil {
		t.Fatalf("resources %+v", res)
	}
	sr := res.Servers
	if sr.CPUSeconds < burn.Seconds()*0.9 {
		t.Errorf("server CPU %.3fs, want at least %.3fs", sr.CPUSeconds, burn.Seconds()*0.9)
	}
	if len(sr.Procs) != 2 || sr.Procs[0].Role != "leader" || sr.Procs[1].Role != "follower" {
		t.Fatalf("procs %+v", sr.Procs)
	}
	if sr.Leader == nil || sr.Leader.Name != "node busy" || sr.Leader.CPUSeconds != sr.Procs[0].CPUSeconds {
		t.Errorf("leader %+v, busy %+v", sr.Leader, sr.Procs[0])
	}
	if b, i := sr.Procs[0].CPUSeconds, sr.Procs[1].CPUSeconds; i > b/4 {
		t.Errorf("the idle process used %.3fs beside the busy one's %.3fs", i, b)
	}
	if want := sr.CPUSeconds * 1e6 / 100; sr.CPUPerOpUS < want*0.99 || sr.CPUPerOpUS > want*1.01 {
		t.Errorf("server µs/op %.1f, want %.1f (CPU over 100 ops)", sr.CPUPerOpUS, want)
	}
	if sr.Procs[0].PeakRSSBytes <= 0 || sr.Procs[0].HWMBytes <= 0 || res.Client.PeakRSSBytes <= 0 {
		t.Errorf("memory: %+v, client %+v", sr.Procs[0], res.Client)
	}
	if res.AllCPUPerOpUS < sr.CPUPerOpUS+res.Client.CPUPerOpUS-0.1 {
		t.Errorf("all µs/op %.1f below server %.1f + client %.1f", res.AllCPUPerOpUS, sr.CPUPerOpUS, res.Client.CPUPerOpUS)
	}

	// The report: the table's resource rows and process rows, the JSON's
	// fields, the HTML's section.
	rep := &Report{Runs: []*Run{r}}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SERVER µs/OP", "LEADER µs/OP", "CLIENT µs/OP", "ALL µs/OP", "SERVER PEAK RSS MiB", "node busy", "leader", "follower"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, table.String())
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Runs []struct {
			Resources struct {
				Servers struct {
					CPU    *float64 `json:"cpu_s"`
					PerOp  *float64 `json:"cpu_us_per_op"`
					Leader *struct {
						PerOp *float64 `json:"cpu_us_per_op"`
					} `json:"leader"`
					Procs []struct {
						Name string   `json:"name"`
						Role string   `json:"role"`
						RSS  *int64   `json:"peak_rss_bytes"`
						HWM  *int64   `json:"hwm_bytes"`
						CPU  *float64 `json:"cpu_s"`
					} `json:"procs"`
				} `json:"servers"`
				Client *struct {
					PerOp *float64 `json:"cpu_us_per_op"`
					RSS   *int64   `json:"peak_rss_bytes"`
				} `json:"client"`
				All *float64 `json:"all_cpu_us_per_op"`
			} `json:"resources"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	jr := doc.Runs[0].Resources
	if jr.Servers.CPU == nil || jr.Servers.PerOp == nil || jr.Servers.Leader == nil || jr.Servers.Leader.PerOp == nil ||
		len(jr.Servers.Procs) != 2 || jr.Servers.Procs[0].Role != "leader" || jr.Servers.Procs[0].RSS == nil ||
		jr.Servers.Procs[0].HWM == nil || jr.Client == nil || jr.Client.PerOp == nil || jr.Client.RSS == nil || jr.All == nil {
		t.Errorf("the JSON lacks resource fields:\n%s", js.String())
	}
	if h := rep.htmlFooter(); !strings.Contains(h, "<h2>Resources</h2>") || !strings.Contains(h, "node busy") {
		t.Error("the HTML report has no resources section")
	}
}

// Servers the bench did not start are reported as not measured, never as
// zeros; the bench process still is.
func TestResourcesExternalServers(t *testing.T) {
	s := &provision.Servers{Spec: provision.Spec{Raft: []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}}}
	sp := &sampler{s: s}
	r := newRun(provision.Raft, provision.Direct, CacheOff, Sequential, 1)
	sp.end(sp.begin(provision.Raft), provision.Raft, r)
	r.rounds = []roundResult{{ops: 10, elapsed: time.Second}}
	r.summarise()
	res := r.Resources
	if res == nil || res.Servers != nil || res.ServersUnmeasured != provision.NotProvisioned || res.AllCPUPerOpUS != 0 {
		t.Fatalf("resources %+v, want servers not measured", res)
	}
	if res.Client == nil {
		t.Error("the bench process was not measured")
	}
	rep := &Report{Runs: []*Run{r}}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "not measured") || !strings.Contains(table.String(), "note: resources of raft:cluster: "+provision.NotProvisioned) {
		t.Errorf("the table does not say the servers were not measured:\n%s", table.String())
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), `"servers_unmeasured"`) || strings.Contains(js.String(), `"servers":`) {
		t.Errorf("JSON:\n%s", js.String())
	}
}
