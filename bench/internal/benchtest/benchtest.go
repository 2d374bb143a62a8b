// Package benchtest holds the bench tests' shared helpers: provisioning
// that fails the test, a writer into the test's log, and the checks that
// an HTML report renders.
package benchtest

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/internal/testenv"
)

// DumpDOM returns the page's DOM after headless Chromium has run its
// scripts.
func DumpDOM(t *testing.T, page string) string {
	t.Helper()
	chromium := testenv.RequireBinary(t, "chromium", "chromium")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--virtual-time-budget=5000",
		"--dump-dom", "file://"+page)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	return string(out)
}

// CheckRenders opens the page in headless Chromium, takes a screenshot and
// checks that the charts were drawn: a blank or unstyled page (a script
// that failed to load draws no chart) has almost no coloured pixels.
func CheckRenders(t *testing.T, page string) {
	t.Helper()
	chromium := testenv.RequireBinary(t, "chromium", "chromium")
	dir := t.TempDir()
	shot := filepath.Join(dir, "shot.png")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(dir, "profile"),
		"--window-size=1200,2400", "--virtual-time-budget=5000",
		"--screenshot="+shot, "file://"+page)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v\n%s", err, out)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if n := colouredPixels(img); n < 5000 {
		t.Fatalf("the report looks blank: %d coloured pixels in the screenshot (%s)", n, shot)
	}
}

// colouredPixels counts pixels whose channels differ markedly (not white,
// grey or black): chart lines and bars, not text.
func colouredPixels(img image.Image) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			hi, lo := max(r, g, bl), min(r, g, bl)
			if hi-lo > 0x3000 {
				n++
			}
		}
	}
	return n
}

// Writer logs what is written to it through t, without the trailing
// newline: a run's progress lines in the test's log.
func Writer(t *testing.T) io.Writer { return testWriter{t} }

type testWriter struct{ t *testing.T }

// Provision starts names' servers as Provision does, failing the test with
// Provision's log when they do not all start. The caller closes them.
func Provision(t *testing.T, ctx context.Context, names []string, opts provision.ProvisionOptions) *provision.Servers {
	t.Helper()
	var log bytes.Buffer
	opts.Log = &log
	s, err := provision.Provision(ctx, names, opts)
	if err != nil {
		t.Fatalf("provision: %v\n%s", err, log.String())
	}
	return s
}

// LogTable logs a report's text table and returns it.
func LogTable(t *testing.T, rep interface{ WriteTable(io.Writer) error }) string {
	t.Helper()
	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Logf("\n%s", table.String())
	return table.String()
}

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
