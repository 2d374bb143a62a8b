package deploy

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	lgcli "github.com/lockgate/lockgate/internal/cli"
)

// instruction is one Dockerfile instruction with its continuation lines
// joined.
type instruction struct {
	op, args string
	line     int
}

func readDockerfile(t *testing.T) []instruction {
	t.Helper()
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if cur.Len() == 0 && (l == "" || strings.HasPrefix(l, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(l, "\\") {
			cur.WriteString(strings.TrimSuffix(l, "\\") + " ")
			continue
		}
		cur.WriteString(l)
		op, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(op), strings.TrimSpace(args), start})
		cur.Reset()
	}
	return out
}

// execForm decodes a JSON-array (exec form) argument list.
func execForm(t *testing.T, in instruction) []string {
	t.Helper()
	var args []string
	if err := json.Unmarshal([]byte(in.args), &args); err != nil {
		t.Fatalf("Dockerfile:%d: %s %s: want the exec form [\"...\"] (the runtime image has no shell): %v", in.line, in.op, in.args, err)
	}
	return args
}

func TestDockerfile(t *testing.T) {
	ins := readDockerfile(t)
	var froms []instruction
	for _, in := range ins {
		if in.op == "FROM" {
			froms = append(froms, in)
		}
	}
	if len(froms) < 2 {
		t.Fatalf("%d FROM stages, want a multi-stage build", len(froms))
	}
	// The runtime stage: everything after the last FROM.
	var final []instruction
	for _, in := range ins {
		if in.line >= froms[len(froms)-1].line {
			final = append(final, in)
		}
	}
	if img := froms[len(froms)-1].args; !strings.Contains(img, "distroless") && !strings.Contains(img, "alpine") && !strings.Contains(img, "scratch") {
		t.Errorf("runtime image %q: want a minimal one (distroless, alpine or scratch)", img)
	}
	all := ""
	for _, in := range ins {
		all += in.op + " " + in.args + "\n"
	}
	if !strings.Contains(all, "CGO_ENABLED=0") {
		t.Error("the binary is not built with CGO_ENABLED=0 (static)")
	}

	var user, health, entry, cmd *instruction
	for i := range final {
		switch final[i].op {
		case "USER":
			user = &final[i]
		case "HEALTHCHECK":
			health = &final[i]
		case "ENTRYPOINT":
			entry = &final[i]
		case "CMD":
			cmd = &final[i]
		}
	}
	if user == nil {
		t.Error("the runtime stage has no USER: it would run as root")
	} else if u, _, _ := strings.Cut(user.args, ":"); u == "root" || u == "0" || u == "" {
		t.Errorf("Dockerfile:%d: USER %s is root", user.line, user.args)
	}
	if entry == nil || !slicesEqual(execForm(t, *entry), []string{"/lockgate"}) {
		t.Fatalf("ENTRYPOINT: want [\"/lockgate\"]")
	}
	if cmd != nil {
		if err := lgcli.CheckArgs(execForm(t, *cmd), map[string]string{"LOCKGATE_DATA_DIR": "/data"}); err != nil {
			t.Errorf("Dockerfile:%d: CMD %s does not parse: %v", cmd.line, cmd.args, err)
		}
	}
	if health == nil {
		t.Fatal("no HEALTHCHECK")
	}
	_, after, ok := strings.Cut(health.args, "CMD ")
	if !ok {
		t.Fatalf("Dockerfile:%d: HEALTHCHECK without CMD", health.line)
	}
	probe := execForm(t, instruction{op: "HEALTHCHECK CMD", args: strings.TrimSpace(after), line: health.line})
	if len(probe) < 2 || probe[0] != "/lockgate" || probe[1] != "healthcheck" {
		t.Fatalf("Dockerfile:%d: HEALTHCHECK %v: want /lockgate healthcheck (no curl in the image)", health.line, probe)
	}
	if err := lgcli.CheckArgs(probe[1:], nil); err != nil {
		t.Errorf("Dockerfile:%d: HEALTHCHECK %v does not parse: %v", health.line, probe, err)
	}
}

func TestDockerignore(t *testing.T) {
	data, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		switch l {
		case "go.mod", "go.sum", "cmd", "internal", "*.go", "**/*.go":
			t.Errorf(".dockerignore excludes %q, which the build needs", l)
		}
	}
	if !strings.Contains(string(data), ".git") {
		t.Error(".dockerignore does not exclude .git")
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }
