package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/testenv"
)

// TestLatencySmoke runs every backend × workload × path briefly on
// provisioned servers and checks the report: every run made progress
// without errors, the JSON has the documented schema, and the HTML report
// renders to a page that is not blank.
func TestLatencySmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts every backend's servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var log bytes.Buffer
	s, err := Provision(ctx, smokeBackends, ProvisionOptions{Lockgate: testenv.BuildLockgate(t), Log: &log})
	if err != nil {
		t.Fatalf("provision: %v\n%s", err, log.String())
	}
	defer s.Close()

	rep, err := RunLatency(ctx, s, LatencyConfig{
		Backends:  smokeBackends,
		Workloads: Workloads,
		Vias:      Vias,
		Clients:   4,
		Duration:  400 * time.Millisecond,
		Rounds:    2,
		Warmup:    100 * time.Millisecond,
		Progress:  testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(smokeBackends) * len(Workloads) * len(Vias); len(rep.Runs) != want {
		t.Fatalf("%d runs, want %d", len(rep.Runs), want)
	}
	for _, r := range rep.Runs {
		l := r.LatencyUS
		if r.Ops == 0 || r.OpsPerSec <= 0 || r.Errors != 0 || !(l.P50 > 0 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
			t.Errorf("%s via %s %s: ops %d, %.0f/s, errors %d %v, latency %+v", r.Backend, r.Via, r.Workload, r.Ops, r.OpsPerSec, r.Errors, r.ErrorKinds, l)
		}
		if len(r.CDF) != len(cdfQuantiles) {
			t.Errorf("%s %s: CDF of %d points, want %d", r.Backend, r.Workload, len(r.CDF), len(cdfQuantiles))
		}
	}
	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Logf("\n%s", table.String())

	// The JSON schema of the issue: field names and types.
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Machine map[string]any `json:"machine"`
		Runs    []struct {
			Backend, Via, Workload string
			Clients, Ops           *int64
			OpsPerSec              *float64           `json:"ops_per_sec"`
			LatencyUS              map[string]float64 `json:"latency_us"`
			Errors                 *int64
		} `json:"runs"`
	}
	dec := json.NewDecoder(&js)
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if doc.Machine["cores"] == nil || len(doc.Runs) != len(rep.Runs) {
		t.Fatalf("JSON: machine %v, %d runs", doc.Machine, len(doc.Runs))
	}
	for _, r := range doc.Runs {
		if r.Backend == "" || r.Via == "" || r.Workload == "" || r.Clients == nil || r.Ops == nil || r.OpsPerSec == nil || r.Errors == nil {
			t.Fatalf("JSON run missing a field: %+v", r)
		}
		for _, k := range []string{"p50", "p90", "p99", "p999", "max"} {
			if _, ok := r.LatencyUS[k]; !ok {
				t.Fatalf("JSON run %s/%s: latency_us has no %s", r.Backend, r.Workload, k)
			}
		}
	}

	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	if err := WriteFile(page, rep.WriteHTML); err != nil {
		t.Fatal(err)
	}
	checkRenders(t, page)
}

// smokeBackends are the backends the smoke test runs.
var smokeBackends = Backends

// checkRenders opens the page in headless Chromium, takes a screenshot and
// checks that the charts were drawn: a blank or unstyled page (a script
// that failed to load draws no chart) has almost no coloured pixels.
func checkRenders(t *testing.T, page string) {
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

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
