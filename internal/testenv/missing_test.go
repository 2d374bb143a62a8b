package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeTB records Fatalf and Skipf instead of ending the test. The embedded
// nil testing.TB makes any other method panic, which flags unexpected use.
type fakeTB struct {
	testing.TB
	fatals, skips []string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatals = append(f.fatals, fmt.Sprintf(format, args...))
}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.skips = append(f.skips, fmt.Sprintf(format, args...))
}

func TestMissingPolicy(t *testing.T) {
	for _, tc := range []struct {
		ci       string
		wantFail bool
	}{
		{"", false},
		{"false", false},
		{"1", false}, // only the exact value "true" turns skips into failures
		{"true", true},
	} {
		t.Run("CI="+tc.ci, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			f := &fakeTB{}
			missing(f, "redis-server", "redis-server")
			got := f.skips
			if tc.wantFail {
				got = f.fatals
				if len(f.skips) != 0 {
					t.Errorf("skipped under CI=true: %q", f.skips)
				}
			} else if len(f.fatals) != 0 {
				t.Errorf("failed instead of skipping: %q", f.fatals)
			}
			if len(got) != 1 {
				t.Fatalf("fatals=%q skips=%q, want exactly one %s", f.fatals, f.skips,
					map[bool]string{true: "Fatalf", false: "Skipf"}[tc.wantFail])
			}
			for _, want := range []string{"redis-server", `"redis-server"`, "apt-get install -y redis-server"} {
				if !strings.Contains(got[0], want) {
					t.Errorf("message %q does not contain %q", got[0], want)
				}
			}
		})
	}
}

func TestRequireBinary(t *testing.T) {
	t.Run("found", func(t *testing.T) {
		f := &fakeTB{}
		p := RequireBinary(f, "sh", "dash")
		if len(f.fatals)+len(f.skips) != 0 || !filepath.IsAbs(p) || !isExecutable(p) {
			t.Errorf("RequireBinary(sh) = %q, fatals=%q skips=%q", p, f.fatals, f.skips)
		}
	})
	t.Run("missing", func(t *testing.T) {
		t.Setenv("CI", "")
		f := &fakeTB{}
		if p := RequireBinary(f, "testenv-no-such-binary", "testenv-pkg"); p != "" {
			t.Errorf("path = %q, want empty", p)
		}
		if len(f.skips) != 1 || !strings.Contains(f.skips[0], "testenv-pkg") || len(f.fatals) != 0 {
			t.Errorf("fatals=%q skips=%q, want one skip naming testenv-pkg", f.fatals, f.skips)
		}
	})
	t.Run("missing-CI", func(t *testing.T) {
		t.Setenv("CI", "true")
		f := &fakeTB{}
		RequireBinary(f, "testenv-no-such-binary", "testenv-pkg")
		if len(f.fatals) != 1 || !strings.Contains(f.fatals[0], "testenv-pkg") || len(f.skips) != 0 {
			t.Errorf("fatals=%q skips=%q, want one fatal naming testenv-pkg", f.fatals, f.skips)
		}
	})
}

func TestPostgresBinDirSelection(t *testing.T) {
	root := t.TempDir()
	mk := func(version string, bins ...string) {
		dir := filepath.Join(root, version, "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, b := range bins {
			if err := os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("9.6", "initdb", "postgres")
	mk("13", "initdb", "postgres")
	mk("15", "initdb") // incomplete: no postgres
	f := &fakeTB{}
	if got, want := postgresBinDir(f, root), filepath.Join(root, "13", "bin"); got != want {
		t.Errorf("postgresBinDir = %q, want %q", got, want)
	}
	mk("16", "initdb", "postgres")
	if got, want := postgresBinDir(f, root), filepath.Join(root, "16", "bin"); got != want {
		t.Errorf("postgresBinDir = %q, want %q", got, want)
	}
	if len(f.fatals)+len(f.skips) != 0 {
		t.Errorf("unexpected fatals=%q skips=%q", f.fatals, f.skips)
	}

	t.Setenv("CI", "true")
	f = &fakeTB{}
	postgresBinDir(f, filepath.Join(root, "nonexistent"))
	if len(f.fatals) != 1 || !strings.Contains(f.fatals[0], `"postgresql"`) {
		t.Errorf("fatals=%q skips=%q, want one fatal naming package postgresql", f.fatals, f.skips)
	}

	// The real one, on this machine.
	t.Setenv("CI", "")
	dir := PostgresBinDir(t)
	if !isExecutable(filepath.Join(dir, "initdb")) || !isExecutable(filepath.Join(dir, "postgres")) {
		t.Errorf("PostgresBinDir = %q lacks initdb/postgres", dir)
	}
}
