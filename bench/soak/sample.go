package soak

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metric names, as the report, the JSON and --bound spell them.
const (
	Heap          = "heap"           // go_memstats_heap_inuse_bytes
	RSS           = "rss"            // process_resident_memory_bytes
	Goroutines    = "goroutines"     // go_goroutines
	FDs           = "fds"            // process_open_fds
	LogBytes      = "log-bytes"      // the data directory but snapshots/, on disk (du)
	SnapshotBytes = "snapshot-bytes" // snapshots/, on disk (du)
	LogEntries    = "log-entries"    // lockgate_raft_last_log_index - lockgate_raft_last_snapshot_index
)

// Metrics lists every metric, in the report's order.
var Metrics = []string{Heap, RSS, Goroutines, FDs, LogBytes, SnapshotBytes, LogEntries}

// connBound reports whether a metric follows the clients' connections,
// which move from node to node with the leadership (a client talks to the
// leader): a node's goroutines and descriptors climb when it is elected
// and fall when it is deposed, whether or not anything leaks. Those are
// judged on the cluster's total (clusterSeries); a node's own figures are
// shown, not judged.
func connBound(metric string) bool { return metric == Goroutines || metric == FDs }

// perProcess reports whether a metric belongs to the node's process (a
// restart starts its series again) rather than to its data directory,
// which outlives the process.
func perProcess(metric string) bool {
	return metric == Heap || metric == RSS || metric == Goroutines || metric == FDs
}

// DefaultBounds are the bounds of Config.Bounds' absent metrics. The
// process metrics may grow by a fraction of their median per hour, or a
// small absolute amount (whichever is larger: a level of 40 goroutines
// moves by more than 5 % of itself as clients come and go). The disk
// metrics are capped: raftlock snapshots every 8192 entries (checked every
// 2 to 4 minutes) and keeps 10240 entries behind a snapshot and three
// snapshots, so the log holds at most some tens of thousands of entries;
// in raft-wal's preallocated 64 MiB segments that is the one being written
// and the one before it, plus one for each tail truncation since the
// snapshot before last (a follower clearing the diverging suffix a new
// leader overwrote seals its segment and starts a fresh one), which the
// next compactions delete: with a fault every minute, up to five segments
// (the first hour's run reached four). Three snapshots of a lock table of a
// few hundred keys are kilobytes.
var DefaultBounds = map[string]Bound{
	Heap:          {Frac: 0.10, Abs: 16 << 20},
	RSS:           {Frac: 0.10, Abs: 32 << 20},
	Goroutines:    {Frac: 0.05, Abs: 5},
	FDs:           {Frac: 0.05, Abs: 5},
	LogBytes:      {Cap: true, Abs: 5 * 64 << 20},
	SnapshotBytes: {Cap: true, Abs: 64 << 20},
	LogEntries:    {Cap: true, Abs: 200000},
}

// Sample is one reading of one node: its process (0 when it is not
// running) and every metric that could be read. A paused or killed node
// has no process metrics in it; its disk is read all the same.
type Sample struct {
	T      float64            `json:"t"` // seconds since the run started
	Node   string             `json:"node"`
	PID    int                `json:"pid"`
	Values map[string]float64 `json:"values"`
	Err    string             `json:"err,omitempty"`
}

var metricsHTTP = &http.Client{Timeout: 3 * time.Second}

// scrapeNode reads a node's /metrics page at addr (host:port) into the
// process and Raft metrics of out.
func scrapeNode(ctx context.Context, addr string, out map[string]float64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := metricsHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", req.URL, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return fmt.Errorf("GET %s: %v", req.URL, err)
	}
	return promValues(fams, out)
}

// promValues copies the metrics the soak reads out of a scrape.
func promValues(fams map[string]*dto.MetricFamily, out map[string]float64) error {
	get := func(name string) (float64, bool) {
		f := fams[name]
		if f == nil || len(f.Metric) == 0 {
			return 0, false
		}
		m := f.Metric[0]
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
		return 0, false
	}
	for metric, name := range map[string]string{Heap: "go_memstats_heap_inuse_bytes", RSS: "process_resident_memory_bytes",
		Goroutines: "go_goroutines", FDs: "process_open_fds"} {
		if v, ok := get(name); ok {
			out[metric] = v
		}
	}
	last, ok1 := get("lockgate_raft_last_log_index")
	snap, ok2 := get("lockgate_raft_last_snapshot_index")
	if ok1 && ok2 {
		out[LogEntries] = max(last-snap, 0)
	}
	if _, ok := out[Heap]; !ok {
		return fmt.Errorf("no go_memstats_heap_inuse_bytes on /metrics")
	}
	return nil
}

// diskUsage adds up the space the files under dir take on disk (du: the
// blocks allocated, so that a preallocated raft-wal segment counts whole),
// split into the snapshots (under a directory named snapshots) and the
// rest: the Raft log and stable store.
func diskUsage(dir string) (log, snapshots float64, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			// A file removed under the walk (a compacted segment, a
			// snapshot replaced) is simply gone.
			if d != nil && d.IsDir() && path == dir {
				return err
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		size := float64(info.Size())
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			size = float64(st.Blocks) * 512
		}
		rel, _ := filepath.Rel(dir, path)
		if strings.Contains(filepath.ToSlash(rel), "snapshots/") {
			snapshots += size
		} else {
			log += size
		}
		return nil
	})
	return log, snapshots, err
}
