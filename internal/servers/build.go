package servers

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Building lockgate binaries: the current source tree's (BuildLockgate),
// and a git revision's (BuildRevision), for the tests and `lockgate-bench
// upgrade` that run an older binary beside today's.

// ErrUnknownRevision is matched by BuildRevision's error when the
// repository has no commit by the name asked for.
var ErrUnknownRevision = errors.New("servers: no such git revision")

// lockgateMain is the package of the lockgate binary, relative to the
// module root.
const lockgateMain = "./cmd/lockgate"

// BuildOptions configures BuildRevision.
type BuildOptions struct {
	// Dir is a directory inside the git repository whose revision is
	// built (default: the working directory); the repository's root is
	// found from it with `git rev-parse --show-toplevel`.
	Dir string
	// CacheDir holds the built binaries, one directory per full commit
	// hash, reused across runs (default: DefaultBuildCache()).
	CacheDir string
	// Log receives one line when a build starts and one when it ends; nil
	// discards them.
	Log Logger
}

// DefaultBuildCache is where BuildRevision keeps its binaries by default:
// lockgate/bin under the user's cache directory ($XDG_CACHE_HOME or
// ~/.cache), or under the temporary directory when there is none.
func DefaultBuildCache() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "lockgate", "bin")
	}
	return filepath.Join(os.TempDir(), "lockgate-bin")
}

// BuildRevision returns the path of the lockgate binary built from git
// revision rev (a commit hash, a prefix of one, a tag or a branch) of
// the repository that contains opts.Dir. The source is exported with
// `git archive` from the repository's object store — no worktree is
// added to, and nothing is changed in, the caller's checkout — and built
// with `go build` in a temporary directory; the binary is renamed into
// place under opts.CacheDir/<full hash>/lockgate, so that it is never
// seen half-written, and reused by every later call for the same commit
// (a concurrent caller, in this process or another, waits for the first
// one's build). The revision's own go.mod decides its dependencies, which
// `go build` fetches through the module proxy when they are not in the
// module cache. A missing git or go is a *MissingError; a revision the
// repository does not have matches ErrUnknownRevision.
func BuildRevision(ctx context.Context, rev string, opts BuildOptions) (string, error) {
	if rev == "" || strings.HasPrefix(rev, "-") {
		return "", fmt.Errorf("servers: BuildRevision: revision %q: want a commit, tag or branch", rev)
	}
	git, err := exec.LookPath("git")
	if err != nil {
		return "", fmt.Errorf("servers: BuildRevision: %w", &MissingError{What: "git", Package: "git"})
	}
	goBin, err := goTool()
	if err != nil {
		return "", fmt.Errorf("servers: BuildRevision: %w", err)
	}
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.Getwd(); err != nil {
			return "", fmt.Errorf("servers: BuildRevision: %w", err)
		}
	}
	root, err := gitOutput(ctx, git, dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return "", fmt.Errorf("servers: BuildRevision: %s is not inside a git repository: %w", dir, err)
	}
	hash, err := gitOutput(ctx, git, root, "rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{commit}")
	if err != nil && fullHash(rev) {
		// A shallow or partial clone (CI's) may lack an older commit:
		// fetch that one commit from the clone's origin, by its full hash.
		logf(opts.Log, "servers: %s is not in %s: fetching it from origin", rev, root)
		if _, ferr := gitOutput(ctx, git, root, "fetch", "--quiet", "--depth=1", "origin", rev); ferr == nil {
			hash, err = gitOutput(ctx, git, root, "rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{commit}")
		} else {
			err = ferr
		}
	}
	if err != nil {
		return "", fmt.Errorf("servers: BuildRevision: %w: %q in %s (a full 40-character hash is fetched from origin when missing)", ErrUnknownRevision, rev, root)
	}
	cache := opts.CacheDir
	if cache == "" {
		cache = DefaultBuildCache()
	}
	bin := filepath.Join(cache, hash, "lockgate")
	if executable(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("servers: BuildRevision: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(cache, hash+".lock"))
	if err != nil {
		return "", fmt.Errorf("servers: BuildRevision: %w", err)
	}
	defer unlock()
	if executable(bin) { // built by the caller we waited for
		return bin, nil
	}
	work, err := os.MkdirTemp(cache, hash+".build-")
	if err != nil {
		return "", fmt.Errorf("servers: BuildRevision: %w", err)
	}
	defer os.RemoveAll(work)
	logf(opts.Log, "servers: building lockgate at %s (%s) into %s", rev, hash, bin)
	start := time.Now()
	src := filepath.Join(work, "src")
	if err := gitArchive(ctx, git, root, hash, src); err != nil {
		return "", fmt.Errorf("servers: BuildRevision: exporting %s: %w", hash, err)
	}
	out := filepath.Join(work, "lockgate")
	if err := goBuild(ctx, goBin, src, out); err != nil {
		return "", fmt.Errorf("servers: BuildRevision: building %s: %w", hash, err)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", fmt.Errorf("servers: BuildRevision: %w", err)
	}
	if err := os.Rename(out, bin); err != nil {
		return "", fmt.Errorf("servers: BuildRevision: %w", err)
	}
	logf(opts.Log, "servers: built lockgate at %s in %v", rev, time.Since(start).Round(time.Millisecond))
	return bin, nil
}

// BuildLockgate builds the lockgate binary of the module source tree that
// contains dir (default: the working directory), as it is on disk —
// uncommitted changes included — to the file out, renamed into place once
// complete.
func BuildLockgate(ctx context.Context, dir, out string) error {
	goBin, err := goTool()
	if err != nil {
		return fmt.Errorf("servers: BuildLockgate: %w", err)
	}
	if dir == "" {
		if dir, err = os.Getwd(); err != nil {
			return fmt.Errorf("servers: BuildLockgate: %w", err)
		}
	}
	f, err := os.CreateTemp(filepath.Dir(out), filepath.Base(out)+".tmp*")
	if err != nil {
		return fmt.Errorf("servers: BuildLockgate: %w", err)
	}
	tmp := f.Name()
	f.Close()
	defer os.Remove(tmp)
	// The package path, not ./cmd/lockgate: dir may be any directory of
	// the module.
	if err := goBuild(ctx, goBin, dir, tmp, "github.com/lockgate/lockgate/cmd/lockgate"); err != nil {
		return fmt.Errorf("servers: BuildLockgate: %w", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("servers: BuildLockgate: %w", err)
	}
	return nil
}

// goTool finds the go command.
func goTool() (string, error) {
	p, err := exec.LookPath("go")
	if err != nil {
		return "", &MissingError{What: "the go command", Package: "golang-go"}
	}
	return p, nil
}

// goBuild runs `go build -o out pkg` (default ./cmd/lockgate) in dir,
// outside any go.work, and returns its output with its error.
func goBuild(ctx context.Context, goBin, dir, out string, pkg ...string) error {
	if len(pkg) == 0 {
		pkg = []string{lockgateMain}
	}
	cmd := exec.CommandContext(ctx, goBin, append([]string{"build", "-o", out}, pkg...)...)
	cmd.Dir = dir
	// No VCS stamping: an exported tree has no .git.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -buildvcs=false"))
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, bytes.TrimSpace(b))
	}
	return nil
}

// gitOutput runs git in dir and returns its trimmed standard output; the
// error carries its standard error.
func gitOutput(ctx context.Context, git, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, git, append([]string{"-C", dir}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(string(b)), nil
}

// gitArchive writes the tree of commit hash into dest (created).
func gitArchive(ctx context.Context, git, root, hash, dest string) error {
	cmd := exec.CommandContext(ctx, git, "-C", root, "archive", "--format=tar", hash)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	r, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	xerr := untar(r, dest)
	if xerr != nil {
		io.Copy(io.Discard, r) // let git finish writing
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return xerr
}

// untar extracts the regular files, directories and symbolic links of a
// tar stream into dest; a name that would leave dest is an error.
func untar(r io.Reader, dest string) error {
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, ".."+string(filepath.Separator)) {
			return fmt.Errorf("archive entry %q leaves the directory", h.Name)
		}
		p := filepath.Join(dest, name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			err = writeFile(p, tr, os.FileMode(h.Mode).Perm()|0o600)
		case tar.TypeSymlink:
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				err = os.Symlink(h.Linkname, p)
			}
		default:
			// git archive's pax header (the commit id) and nothing else.
		}
		if err != nil {
			return err
		}
	}
}

func writeFile(path string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// executable reports whether path is a regular file someone may execute.
func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// lockFile takes an exclusive flock on path (created), polling until it
// gets it or ctx ends, and returns its release. Another process's build
// of the same revision holds it.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() {
				unix.Flock(int(f.Fd()), unix.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for another build (%s): %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond): // another process's build: polled
		}
	}
}

// fullHash reports whether rev is a full 40-character commit hash (what
// a server lets a client fetch by).
func fullHash(rev string) bool {
	if len(rev) != 40 {
		return false
	}
	for i := 0; i < len(rev); i++ {
		if c := rev[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
