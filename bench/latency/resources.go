package latency

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/report"
	"github.com/lockgate/lockgate/internal/servers"
)

// Resources is what a run cost over its measured rounds (never the
// warm-up): the CPU time and resident memory of the server processes the
// bench started for its backend, and of the bench process itself, where
// the clients run. Servers of one kind serve several backends (etcd's
// serve etcd and etcd-mutex), so each figure is the sum of deltas taken
// around the run's own measured windows.
type Resources struct {
	// Servers is nil when the servers were not the bench's to measure,
	// for the reason in ServersUnmeasured.
	Servers           *ServerResources `json:"servers,omitempty"`
	ServersUnmeasured string           `json:"servers_unmeasured,omitempty"`
	// Client is the bench process: the SDK clients or the peer
	// libraries, and on the gateway path the gateway too. Nil when it
	// could not be read, for the reason in ClientUnmeasured.
	Client           *ProcResources `json:"client,omitempty"`
	ClientUnmeasured string         `json:"client_unmeasured,omitempty"`
	// AllCPUPerOpUS is the servers' and the client's CPU per operation
	// together; absent unless both were measured.
	AllCPUPerOpUS float64 `json:"all_cpu_us_per_op,omitempty"`
}

// ServerResources totals a run's server processes.
type ServerResources struct {
	CPUSeconds float64 `json:"cpu_s"`
	CPUPerOpUS float64 `json:"cpu_us_per_op"`
	// Leader is the CPU of the process that led the cluster in each
	// window; nil for servers that have no leader (Redis, PostgreSQL) and
	// when no leader was known in some window or it changed within one.
	Leader *LeaderResources `json:"leader,omitempty"`
	// PeakRSSBytes is the sum of the processes' PeakRSSBytes.
	PeakRSSBytes int64           `json:"peak_rss_bytes"`
	Procs        []ProcResources `json:"procs"`
}

// LeaderResources is the CPU of the cluster's leader over a run.
type LeaderResources struct {
	// Name is the leader's ProcResources.Name when one process led in
	// every window.
	Name       string  `json:"name,omitempty"`
	CPUSeconds float64 `json:"cpu_s"`
	CPUPerOpUS float64 `json:"cpu_us_per_op"`
}

// ProcResources is one process (with everything it forked) over a run.
type ProcResources struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
	// Role is "leader" or "follower" (a process that was both in
	// different windows: "leader, follower"); empty for servers without
	// a leader and for the client.
	Role string `json:"role,omitempty"`
	// Processes is how many processes its tree had at the end of the
	// run's last window (PostgreSQL: the postmaster, its workers and a
	// backend per connection).
	Processes  int     `json:"processes"`
	CPUSeconds float64 `json:"cpu_s"`
	CPUPerOpUS float64 `json:"cpu_us_per_op"`
	// PeakRSSBytes is the largest resident set sampled at the start and
	// end of each window (a tree's: the sum over its processes).
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// HWMBytes is VmHWM at the end of the run's last window: the peak
	// since the process started, which is not the run's own when
	// another run used the process before.
	HWMBytes int64 `json:"hwm_bytes"`
}

// sampler reads the servers and the bench process around each measured
// window of a run.
type sampler struct {
	s procSource
}

// procSource names a backend's server processes and its leader:
// *provision.Servers.
type procSource interface {
	Procs(backend string) ([]provision.ServerProc, string)
	LeaderPID(backend string) int
}

// usageMark is a window's start.
type usageMark struct {
	procs    []provision.ServerProc
	why      string
	leader   int
	trees    map[int]servers.TreeUsage
	self     time.Duration
	selfErr  error
	selfMem  servers.Memory
	tableErr error
}

// runUsage accumulates a run's windows.
type runUsage struct {
	windows      int
	serversWhy   string
	procs        []*procUsage // in the order of Servers.Procs
	leaderCPU    time.Duration
	leaderPIDs   map[int]bool
	leaderMissed bool
	client       procUsage
	clientWhy    string
}

type procUsage struct {
	name       string
	pid        int
	cpu        time.Duration
	rss, hwm   int64
	processes  int
	roles      map[string]bool
	roleUnsure bool
}

// begin reads everything at the start of a window of backend: the
// leader first (over the network), the bench process's CPU last.
func (sp *sampler) begin(backend string) *usageMark {
	m := &usageMark{}
	m.procs, m.why = sp.s.Procs(backend)
	if len(m.procs) > 0 {
		m.leader = sp.s.LeaderPID(backend)
		pt, err := servers.ReadProcTable()
		m.tableErr = err
		if err == nil {
			m.trees = make(map[int]servers.TreeUsage, len(m.procs))
			for _, p := range m.procs {
				if u, ok := pt.Tree(p.PID); ok {
					m.trees[p.PID] = u
				}
			}
		}
	}
	m.selfMem = servers.ReadMemory(os.Getpid())
	m.self, m.selfErr = selfCPU()
	return m
}

// end reads the window's end, in the reverse order, and adds its deltas
// to r's usage.
func (sp *sampler) end(m *usageMark, backend string, r *Run) {
	self, selfErr := selfCPU()
	selfMem := servers.ReadMemory(os.Getpid())
	var trees map[int]servers.TreeUsage
	tableErr := m.tableErr
	if len(m.procs) > 0 && tableErr == nil {
		pt, err := servers.ReadProcTable()
		tableErr = err
		if err == nil {
			trees = make(map[int]servers.TreeUsage, len(m.procs))
			for _, p := range m.procs {
				if u, ok := pt.Tree(p.PID); ok {
					trees[p.PID] = u
				}
			}
		}
	}
	leader := 0
	if len(m.procs) > 0 {
		leader = sp.s.LeaderPID(backend)
	}

	if r.usage == nil {
		r.usage = &runUsage{leaderPIDs: map[int]bool{}}
	}
	u := r.usage
	u.windows++
	// The client: the bench process.
	switch {
	case m.selfErr != nil || selfErr != nil:
		u.clientWhy = fmt.Sprintf("not measured: getrusage: %v", errorsOr(m.selfErr, selfErr))
	default:
		u.client.cpu += self - m.self
	}
	u.client.pid = os.Getpid()
	u.client.rss = max(u.client.rss, m.selfMem.RSS, selfMem.RSS)
	u.client.hwm = selfMem.HWM
	// The servers.
	switch {
	case m.why != "":
		u.serversWhy = m.why
		return
	case tableErr != nil:
		u.serversWhy = "not measured: " + tableErr.Error()
		return
	}
	sameLeader := leader != 0 && leader == m.leader
	if !sameLeader {
		u.leaderMissed = true
	}
	for i, p := range m.procs {
		if i >= len(u.procs) {
			u.procs = append(u.procs, &procUsage{name: p.Name, roles: map[string]bool{}})
		}
		pu := u.procs[i]
		pu.pid = p.PID
		a, okA := m.trees[p.PID]
		b, okB := trees[p.PID]
		if !okA || !okB {
			continue // not running for the whole window
		}
		d := b.CPU - a.CPU
		pu.cpu += d
		pu.rss = max(pu.rss, a.RSS, b.RSS)
		pu.hwm = b.HWM
		pu.processes = len(b.PIDs)
		switch {
		case m.leader == 0 && leader == 0:
		case !sameLeader:
			pu.roleUnsure = true
		case p.PID == leader:
			pu.roles["leader"] = true
			u.leaderCPU += d
			u.leaderPIDs[p.PID] = true
		default:
			pu.roles["follower"] = true
		}
	}
}

func errorsOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// selfCPU is the bench process's CPU time so far, every thread's, user
// and system.
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// resources is the Resources of a run that did ops operations over its
// windows; nil when it measured no window.
func (u *runUsage) resources(ops int64) *Resources {
	if u == nil || u.windows == 0 {
		return nil
	}
	perOp := func(d time.Duration) float64 {
		if ops <= 0 {
			return 0
		}
		return report.RoundTo(float64(d.Nanoseconds())/1e3/float64(ops), 2)
	}
	seconds := func(d time.Duration) float64 { return report.RoundTo(d.Seconds(), 3) }
	res := &Resources{}
	if u.clientWhy != "" {
		res.ClientUnmeasured = u.clientWhy
	} else {
		c := u.client
		res.Client = &ProcResources{Name: "lockgate-bench", PID: c.pid, Processes: 1, CPUSeconds: seconds(c.cpu),
			CPUPerOpUS: perOp(c.cpu), PeakRSSBytes: c.rss, HWMBytes: c.hwm}
	}
	if u.serversWhy != "" {
		res.ServersUnmeasured = u.serversWhy
		return res
	}
	sr := &ServerResources{}
	var total time.Duration
	for _, p := range u.procs {
		pr := ProcResources{Name: p.name, PID: p.pid, Processes: p.processes, CPUSeconds: seconds(p.cpu),
			CPUPerOpUS: perOp(p.cpu), PeakRSSBytes: p.rss, HWMBytes: p.hwm}
		switch {
		case p.roleUnsure:
			pr.Role = "unknown"
		case p.roles["leader"] && p.roles["follower"]:
			pr.Role = "leader, follower"
		case p.roles["leader"]:
			pr.Role = "leader"
		case p.roles["follower"]:
			pr.Role = "follower"
		}
		total += p.cpu
		sr.PeakRSSBytes += p.rss
		sr.Procs = append(sr.Procs, pr)
	}
	sr.CPUSeconds, sr.CPUPerOpUS = seconds(total), perOp(total)
	if !u.leaderMissed && len(u.leaderPIDs) > 0 {
		sr.Leader = &LeaderResources{CPUSeconds: seconds(u.leaderCPU), CPUPerOpUS: perOp(u.leaderCPU)}
		if len(u.leaderPIDs) == 1 {
			for _, p := range sr.Procs {
				if u.leaderPIDs[p.PID] {
					sr.Leader.Name = p.Name
				}
			}
		}
	}
	res.Servers = sr
	if res.Client != nil {
		res.AllCPUPerOpUS = perOp(total + u.client.cpu)
	}
	return res
}

// mib is bytes as MiB for a table.
func mib(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

// resourceRowsHead heads resourceRows.
var resourceRowsHead = []string{"RESOURCES", "VIA", "CACHE", "WORKLOAD", "SERVER CPU s", "SERVER µs/OP", "LEADER µs/OP",
	"CLIENT µs/OP", "ALL µs/OP", "SERVER PEAK RSS MiB", "CLIENT PEAK RSS MiB"}

// resourceRows are the runs' resource columns, for a terminal and the
// HTML report: "not measured" where the servers were not the bench's.
func (rep *Report) resourceRows() [][]string {
	var rows [][]string
	for _, r := range rep.Runs {
		res := r.Resources
		if res == nil {
			continue
		}
		f := func(v float64) string { return fmt.Sprintf("%.1f", v) }
		row := []string{r.ref(), r.Via, r.Cache, r.Workload}
		if sr := res.Servers; sr != nil {
			leader := "-"
			if sr.Leader != nil {
				leader = f(sr.Leader.CPUPerOpUS)
			}
			row = append(row, fmt.Sprintf("%.2f", sr.CPUSeconds), f(sr.CPUPerOpUS), leader)
		} else {
			row = append(row, "not measured", "-", "-")
		}
		client, all, clientRSS := "not measured", "-", "-"
		if res.Client != nil {
			client, clientRSS = f(res.Client.CPUPerOpUS), mib(res.Client.PeakRSSBytes)
			if res.Servers != nil {
				all = f(res.AllCPUPerOpUS)
			}
		}
		serverRSS := "-"
		if res.Servers != nil {
			serverRSS = mib(res.Servers.PeakRSSBytes)
		}
		rows = append(rows, append(row, client, all, serverRSS, clientRSS))
	}
	return rows
}

// procRowsHead heads procRows.
var procRowsHead = []string{"SERVER PROCESS", "RUN", "ROLE", "PROCS", "CPU s", "µs/OP", "PEAK RSS MiB", "HWM MiB"}

// procRows are each measured server process of each run, then its
// backend's unmeasured servers as notes (resourceNotes).
func (rep *Report) procRows() [][]string {
	var rows [][]string
	for _, r := range rep.Runs {
		if r.Resources == nil || r.Resources.Servers == nil {
			continue
		}
		run := fmt.Sprintf("%s %s %s %s", r.ref(), r.Via, r.Cache, r.Workload)
		for _, p := range r.Resources.Servers.Procs {
			role := p.Role
			if role == "" {
				role = "-"
			}
			rows = append(rows, []string{p.Name, run, role, fmt.Sprint(p.Processes), fmt.Sprintf("%.2f", p.CPUSeconds),
				fmt.Sprintf("%.1f", p.CPUPerOpUS), mib(p.PeakRSSBytes), mib(p.HWMBytes)})
		}
	}
	return rows
}

// resourceNotes say, once per backend, why its servers or the client were
// not measured.
func (rep *Report) resourceNotes() []string {
	var notes []string
	seen := map[string]bool{}
	for _, r := range rep.Runs {
		if r.Resources == nil {
			continue
		}
		for _, n := range []string{r.Resources.ServersUnmeasured, r.Resources.ClientUnmeasured} {
			if n == "" {
				continue
			}
			note := fmt.Sprintf("resources of %s: %s", r.ref(), n)
			if !seen[note] {
				seen[note] = true
				notes = append(notes, note)
			}
		}
	}
	return notes
}
