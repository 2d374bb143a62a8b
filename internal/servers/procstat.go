package servers

// Reading what a server's processes use, for the bench's resource columns:
// CPU time and resident memory of a process and everything it forked,
// read from /proc and never written.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ClockTicks is the unit of the CPU times in /proc/<pid>/stat: USER_HZ,
// which Linux fixes at 100 for every architecture whatever the kernel's
// own tick rate.
const ClockTicks = 100

// ProcTable is one reading of every process in /proc: enough to find a
// server's whole tree (its process group, and its descendants, which
// PostgreSQL's backends are after they call setsid) and to add up what
// the tree has used.
type ProcTable struct {
	// At is when the table was read.
	At    time.Time
	procs map[int]procEntry
}

// procEntry is one process of a ProcTable, from /proc/<pid>/stat.
type procEntry struct {
	ppid, pgid int
	state      byte
	// cpu is utime+stime+cutime+cstime in clock ticks: the process's own
	// time and that of its children it has reaped (a worker that has
	// exited still counts, in its parent).
	cpu int64
	// own is utime+stime alone.
	own int64
}

// ErrNoProcFS is returned where /proc cannot be read (not Linux).
var ErrNoProcFS = errors.New("servers: /proc is not readable on this system")

// ReadProcTable reads every process's /proc/<pid>/stat once.
func ReadProcTable() (*ProcTable, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoProcFS, err)
	}
	t := &ProcTable{At: time.Now(), procs: make(map[int]procEntry, len(ents))}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pe, ok := readProcEntry(pid); ok {
			t.procs[pid] = pe
		}
	}
	if len(t.procs) == 0 {
		return nil, ErrNoProcFS
	}
	return t, nil
}

// readProcEntry parses /proc/<pid>/stat (false when the process is gone).
func readProcEntry(pid int) (procEntry, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procEntry{}, false
	}
	return parseProcStat(b)
}

// parseProcStat parses the fields of a /proc/<pid>/stat line that a
// procEntry holds. The fields after comm (which may hold spaces and
// parentheses, hence the last ')') are, from 3 on: state ppid pgrp session
// tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime cutime
// cstime (proc(5)).
func parseProcStat(b []byte) (procEntry, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procEntry{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 || len(f[0]) == 0 {
		return procEntry{}, false
	}
	var n [15]int64
	for k := 1; k < 15; k++ {
		v, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil {
			return procEntry{}, false
		}
		n[k] = v
	}
	own := n[11] + n[12]
	return procEntry{state: f[0][0], ppid: int(n[1]), pgid: int(n[2]), own: own, cpu: own + n[13] + n[14]}, true
}

// TreeUsage is what one server's processes use at the moment of a
// ProcTable: its leader, the members of its process group, and every
// descendant of the leader.
type TreeUsage struct {
	// PIDs are the live processes of the tree, the leader first.
	PIDs []int
	// CPU is the sum over PIDs of their own CPU time and that of the
	// children they reaped.
	CPU time.Duration
	// RSS is the sum over PIDs of VmRSS (pages shared between them, as
	// PostgreSQL's shared buffers are, count once per process), and HWM
	// the leader's VmHWM: its peak resident set since it started.
	RSS, HWM int64
}

// Tree is the usage of leader's tree, and false when leader is not in the
// table (it has exited). Its memory figures are read from
// /proc/<pid>/status now, not when the table was.
func (t *ProcTable) Tree(leader int) (TreeUsage, bool) {
	if _, ok := t.procs[leader]; !ok || leader <= 0 {
		return TreeUsage{}, false
	}
	in := map[int]bool{leader: true}
	for pid, pe := range t.procs {
		if pe.pgid == leader {
			in[pid] = true
		}
	}
	// Descendants: a process whose parent is in the tree is too; repeat
	// until nothing joins (the table is small).
	for grew := true; grew; {
		grew = false
		for pid, pe := range t.procs {
			if !in[pid] && in[pe.ppid] {
				in[pid], grew = true, true
			}
		}
	}
	u := TreeUsage{PIDs: []int{leader}}
	var ticks int64
	for pid := range in {
		pe := t.procs[pid]
		ticks += pe.cpu
		if pid != leader {
			u.PIDs = append(u.PIDs, pid)
		}
		if pe.state == 'Z' {
			continue // a zombie has no memory left
		}
		m := ReadMemory(pid)
		u.RSS += m.RSS
		if pid == leader {
			u.HWM = m.HWM
		}
	}
	u.CPU = TicksDuration(ticks)
	return u, true
}

// CPU is the CPU time of process pid alone (without the children it
// reaped), and false when it is not in the table.
func (t *ProcTable) CPU(pid int) (time.Duration, bool) {
	pe, ok := t.procs[pid]
	return TicksDuration(pe.own), ok
}

// TicksDuration converts clock ticks of /proc/<pid>/stat to a duration.
func TicksDuration(ticks int64) time.Duration {
	return time.Duration(ticks) * (time.Second / ClockTicks)
}

// Memory is a process's resident set, in bytes, from /proc/<pid>/status.
type Memory struct {
	// RSS is VmRSS, the resident set now; HWM is VmHWM, its peak since
	// the process started.
	RSS, HWM int64
}

// ReadMemory reads pid's VmRSS and VmHWM (zeros when it is gone or not
// readable).
func ReadMemory(pid int) Memory {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return Memory{}
	}
	defer f.Close()
	var m Memory
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var dst *int64
		switch {
		case strings.HasPrefix(line, "VmRSS:"):
			dst = &m.RSS
		case strings.HasPrefix(line, "VmHWM:"):
			dst = &m.HWM
		default:
			continue
		}
		// "VmRSS:	   12345 kB"
		f := strings.Fields(line)
		if len(f) >= 2 {
			if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				*dst = kb << 10
			}
		}
	}
	return m
}
