package clients_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// checkConsole checks the web console's sources (console/web) against
// the committed build (console/assets, embedded in the binary): compiled
// with clients/js's TypeScript from the harness's copy (root/clients/js
// with its node_modules), the sources and the TypeScript client must give
// exactly the committed files — a change to either without `make
// console` fails here — and the page's unit tests pass.
func checkConsole(t *testing.T, root, work string) {
	src := filepath.Join("..", "console")
	web := filepath.Join(root, "console", "web")
	if err := copySource(filepath.Join(src, "web"), web); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tsc := filepath.Join(work, "node_modules", ".bin", "tsc")
	out := filepath.Join(root, "assets")
	if b, err := exec.CommandContext(ctx, tsc, "-p", filepath.Join(web, "tsconfig.json"), "--outDir", filepath.Join(out, "js")).CombinedOutput(); err != nil {
		t.Fatalf("tsc console/web: %v\n%s", err, b)
	}
	for _, f := range []string{"index.html", "style.css"} {
		b, err := os.ReadFile(filepath.Join(web, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	built, committed := tree(t, out), tree(t, filepath.Join(src, "assets"))
	for name, b := range built {
		c, ok := committed[name]
		switch {
		case !ok:
			t.Errorf("console/assets/%s is missing: run `make console` and commit console/assets", name)
		case !bytes.Equal(b, c):
			t.Errorf("console/assets/%s differs from what console/web and clients/js/src compile to: run `make console` and commit console/assets", name)
		}
	}
	for name := range committed {
		if _, ok := built[name]; !ok {
			t.Errorf("console/assets/%s is not built from the sources any more: run `make console` (it removes stale files) and commit", name)
		}
	}

	// The page's unit tests (metrics parsing, rates, formats, sparklines).
	testOut := filepath.Join(work, "node_modules", ".console-test")
	if b, err := exec.CommandContext(ctx, tsc, "-p", filepath.Join(web, "test", "tsconfig.json")).CombinedOutput(); err != nil {
		t.Fatalf("tsc console/web/test: %v\n%s", err, b)
	}
	if err := os.WriteFile(filepath.Join(testOut, "package.json"), []byte(`{"type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := exec.CommandContext(ctx, "node", "--test", filepath.Join(testOut, "test")).CombinedOutput()
	if err != nil {
		t.Fatalf("console unit tests: %v\n%s", err, b)
	}
	if !strings.Contains(string(b), "# fail 0") {
		t.Fatalf("console unit tests: no '# fail 0' in their report:\n%s", b)
	}
	t.Logf("console unit tests:\n%s", b)
}

// tree reads every file under dir, by slash path.
func tree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		rel, _ := filepath.Rel(dir, path)
		files[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
