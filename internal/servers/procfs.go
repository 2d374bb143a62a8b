package servers

// Reading /proc: process trees and states (PostgreSQL's workers leave the
// process group, so signals must be sent to each of them), and which process
// listens on a port (to tell our server from another test's on a raced port).

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// descendants lists all descendants of pid (from /proc).
func descendants(pid int) []int {
	set := map[int]bool{pid: true}
	var out []int
	for {
		kids := childrenOf(set)
		if len(kids) == 0 {
			return out
		}
		for _, k := range kids {
			set[k] = true
			out = append(out, k)
		}
	}
}

// childrenOf returns the processes whose parent is in parents and that are
// not in parents themselves.
func childrenOf(parents map[int]bool) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var kids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || parents[pid] {
			continue
		}
		st, ok := procStat(pid)
		if ok && parents[st.ppid] {
			kids = append(kids, pid)
		}
	}
	return kids
}

type stat struct {
	state byte
	ppid  int
}

// procStat reads state and parent PID from /proc/<pid>/stat.
func procStat(pid int) (stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	// Format: pid (comm) state ppid ...; comm may contain spaces and parens.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return stat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 || len(f[0]) == 0 {
		return stat{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return stat{}, false
	}
	return stat{state: f[0][0], ppid: ppid}, true
}

// isStopped reports whether pid is in state T (stopped).
func isStopped(pid int) bool {
	st, ok := procStat(pid)
	return ok && st.state == 'T'
}

// waitSettled polls (briefly) until pid is stopped, a zombie or gone, so
// that a SIGSTOP just sent has taken effect.
func waitSettled(pid int) {
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		st, ok := procStat(pid)
		if !ok || st.state == 'T' || st.state == 't' || st.state == 'Z' || st.state == 'X' {
			return
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// loopbackHex is 127.0.0.1 as /proc/net/tcp prints it (a native-endian
// 32-bit hex number).
var loopbackHex = fmt.Sprintf("%08X", binary.NativeEndian.Uint32([]byte{127, 0, 0, 1}))

// listensOn reports whether process pid holds a socket listening on
// 127.0.0.1:port. known is false if that cannot be determined (no /proc,
// or no permission to read the process's file descriptors).
func listensOn(pid, port int) (owned, known bool) {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return false, false
	}
	local := fmt.Sprintf("%s:%04X", loopbackHex, port)
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		f := strings.Fields(line)
		if len(f) >= 10 && f[1] == local && f[3] == "0A" { // 0A: LISTEN
			inodes["socket:["+f[9]+"]"] = true
		}
	}
	if len(inodes) == 0 {
		return false, true
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false, false
	}
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && inodes[l] {
			return true, true
		}
	}
	return false, true
}
