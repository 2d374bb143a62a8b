package provision

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// Machine describes where a report was measured.
type Machine struct {
	Host      string            `json:"host"`
	OS        string            `json:"os"`
	Arch      string            `json:"arch"`
	Kernel    string            `json:"kernel,omitempty"`
	CPU       string            `json:"cpu,omitempty"`
	Cores     int               `json:"cores"`
	GoVersion string            `json:"go"`
	Lockgate  string            `json:"lockgate,omitempty"`
	Versions  map[string]string `json:"versions,omitempty"` // server binaries
	Time      time.Time         `json:"time"`
}

// ReadMachine reads the host, CPU, kernel and the versions of the server
// binaries on PATH (or PostgreSQL's bin directory).
func ReadMachine() Machine {
	m := Machine{
		OS: runtime.GOOS, Arch: runtime.GOARCH, Cores: runtime.NumCPU(),
		GoVersion: runtime.Version(), Time: time.Now().UTC().Truncate(time.Second),
		Versions: map[string]string{},
	}
	m.Host, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		m.Lockgate = bi.Main.Version
	}
	pg, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	for name, cmd := range map[string][]string{
		"redis-server": {"redis-server", "--version"},
		"etcd":         {"etcd", "--version"},
		"postgres":     append(pg[len(pg)-min(len(pg), 1):], "--version"),
	} {
		if v := firstLine(cmd); v != "" {
			m.Versions[name] = v
		}
	}
	// ZooKeeper has no version flag; the Debian package names its jar.
	if jars, _ := filepath.Glob("/usr/share/java/zookeeper-3*.jar"); len(jars) > 0 {
		m.Versions["zookeeper"] = strings.TrimSuffix(filepath.Base(jars[0]), ".jar")
	}
	return m
}

// firstLine runs cmd and returns the first line of its output, or "".
func firstLine(cmd []string) string {
	if len(cmd) < 2 {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cmd[0], cmd[1:]...).Output()
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}
