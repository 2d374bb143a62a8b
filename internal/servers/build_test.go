package servers

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// BuildRevision's errors say what is missing: a revision the repository
// does not have matches ErrUnknownRevision, a directory outside any
// repository says so, an option-like revision is refused before git sees
// it; none leaves anything in the cache.
func TestBuildRevisionErrors(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	ctx := context.Background()
	cache := t.TempDir()
	_, err := BuildRevision(ctx, "no-such-revision-anywhere", BuildOptions{CacheDir: cache})
	if !errors.Is(err, ErrUnknownRevision) || !strings.Contains(err.Error(), "no-such-revision-anywhere") {
		t.Errorf("unknown revision: %v; want ErrUnknownRevision naming it", err)
	}
	_, err = BuildRevision(ctx, "HEAD", BuildOptions{Dir: t.TempDir(), CacheDir: cache})
	if err == nil || !strings.Contains(err.Error(), "not inside a git repository") {
		t.Errorf("outside a repository: %v; want an error saying so", err)
	}
	if _, err := BuildRevision(ctx, "--output=/tmp/x", BuildOptions{CacheDir: cache}); err == nil {
		t.Error("an option-like revision was accepted")
	}
	if entries, _ := os.ReadDir(cache); len(entries) != 0 {
		t.Errorf("the cache holds %d entries after failed builds", len(entries))
	}
}

// untar writes files, directories and links, and refuses a name that
// leaves the directory.
func TestUntar(t *testing.T) {
	archive := func(hs ...*tar.Header) *bytes.Buffer {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range hs {
			if h.Typeflag == tar.TypeReg {
				h.Size = int64(len(h.Name))
			}
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				tw.Write([]byte(h.Name))
			}
		}
		tw.Close()
		return &b
	}
	dest := t.TempDir()
	err := untar(archive(
		&tar.Header{Typeflag: tar.TypeDir, Name: "cmd/", Mode: 0o755},
		&tar.Header{Typeflag: tar.TypeReg, Name: "cmd/main.go", Mode: 0o644},
		&tar.Header{Typeflag: tar.TypeSymlink, Name: "link", Linkname: "cmd/main.go"},
	), dest)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "link")); err != nil || string(b) != "cmd/main.go" {
		t.Errorf("through the link: %q, %v", b, err)
	}
	if err := untar(archive(&tar.Header{Typeflag: tar.TypeReg, Name: "../escape", Mode: 0o644}), t.TempDir()); err == nil {
		t.Error("an entry outside the directory was extracted")
	}
}

// The Raft indexes come from /metrics as both binaries write it: labelled
// gauges among others, comments skipped.
func TestParseRaftIndexes(t *testing.T) {
	text := `# HELP lockgate_raft_applied_index Highest log index applied to the lock table.
# TYPE lockgate_raft_applied_index gauge
lockgate_raft_applied_index{node="1"} 41
lockgate_raft_commit_index{node="1"} 4.2e+01
lockgate_raft_commit_seconds_bucket{node="1",le="0.0001"} 0
`
	ix, err := parseRaftIndexes(strings.NewReader(text))
	if err != nil || ix != (RaftIndexes{Commit: 42, Applied: 41}) {
		t.Errorf("parseRaftIndexes = %+v, %v; want commit 42, applied 41", ix, err)
	}
	if _, err := parseRaftIndexes(strings.NewReader("lockgate_raft_commit_index 3\n")); err == nil {
		t.Error("no applied index: no error")
	}
}

// A member restarts on its data directory without --bootstrap or --join.
func TestWithoutJoin(t *testing.T) {
	got := withoutJoin([]string{"node", "--id", "2", "--bootstrap", "--join", "127.0.0.1:1", "--join=127.0.0.1:2", "--api-addr", "a"})
	if want := []string{"node", "--id", "2", "--api-addr", "a"}; !slices.Equal(got, want) {
		t.Errorf("withoutJoin = %q, want %q", got, want)
	}
}
