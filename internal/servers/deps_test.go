package servers

import (
	"os/exec"
	"strings"
	"testing"
)

// The point of this package: the lockgate binary starts servers (`lockgate
// bench`) without linking the test infrastructure. A package of ours below
// cmd/lockgate that imports testing (for a helper), testenv or locktest
// fails this. The testing package itself still reaches the binary through
// hashicorp/raft, whose non-test testing.go imports it (v1.7.3); that is
// upstream's, so only our own packages are held to it.
func TestLockgateLinksNoTestCode(t *testing.T) {
	const module = "github.com/lockgate/lockgate"
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}",
		module+"/cmd/lockgate").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := f[0]
		if pkg == module+"/internal/testenv" || pkg == module+"/lock/locktest" {
			t.Errorf("cmd/lockgate depends on %s", pkg)
		}
		if !strings.HasPrefix(pkg, module+"/") {
			continue
		}
		for _, imp := range f[1:] {
			if imp == "testing" {
				t.Errorf("%s (linked into cmd/lockgate) imports testing", pkg)
			}
		}
	}
}
