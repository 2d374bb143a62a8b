package scale

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The scale bench reads what a server tells about itself from its
// Prometheus /metrics page: a raftlock node's (lockgate_raft_*,
// lockgate_raftlock_*, and the Go collector's go_memstats_*) or an etcd
// member's (etcd_*, go_memstats_*). A metric that is absent reads as
// absent, never as zero: the bench reports what the server serves.

// promSample is one scrape: every series' value by its full name
// ("name{labels}", as the text format writes it).
type promSample struct {
	at     time.Time
	series map[string]float64
}

var metricsHTTP = &http.Client{Timeout: 10 * time.Second}

// scrape reads http://addr/metrics (addr may carry its scheme).
func scrape(ctx context.Context, addr string) (*promSample, error) {
	url := addr
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(url, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := metricsHTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", req.URL, resp.Status)
	}
	return parseProm(resp.Body, time.Now())
}

// parseProm parses the Prometheus text format's sample lines.
func parseProm(r io.Reader, at time.Time) (*promSample, error) {
	s := &promSample{at: at, series: map[string]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		// The value follows the last space outside the labels; a
		// timestamp may follow it.
		end := strings.LastIndexByte(line, '}')
		rest := line[end+1:]
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		name := strings.TrimSpace(line[:end+1])
		if end < 0 {
			name, fields = fields[0], fields[1:]
			if len(fields) == 0 {
				continue
			}
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		s.series[name] = v
	}
	return s, sc.Err()
}

// get is the sum of every series of metric name whose labels include
// each of the label pairs given ("op", "renew"), and whether there was
// any.
func (s *promSample) get(name string, labels ...string) (float64, bool) {
	if s == nil {
		return 0, false
	}
	var sum float64
	found := false
	for series, v := range s.series {
		n, lbl, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(lbl, labels[i]+`="`+labels[i+1]+`"`) {
				ok = false
				break
			}
		}
		if ok {
			sum += v
			found = true
		}
	}
	return sum, found
}

// value is get's value, 0 when absent.
func (s *promSample) value(name string, labels ...string) float64 {
	v, _ := s.get(name, labels...)
	return v
}

// Metric names the scale bench reads.
const (
	mHeapInuse      = "go_memstats_heap_inuse_bytes"
	mHeapAlloc      = "go_memstats_heap_alloc_bytes"
	mNextGC         = "go_memstats_next_gc_bytes"
	mGCCount        = "go_gc_duration_seconds_count"
	mLeaderReady    = "lockgate_raft_leader_ready"
	mCommitIndex    = "lockgate_raft_commit_index"
	mAppliedIndex   = "lockgate_raft_applied_index"
	mLocks          = "lockgate_raftlock_locks"
	mSessions       = "lockgate_raftlock_sessions"
	mOps            = "lockgate_raftlock_ops_total"
	mSnapshotSecs   = "lockgate_raft_snapshot_seconds"
	mRestoreSecs    = "lockgate_raft_restore_seconds"
	mEtcdLeader     = "etcd_server_is_leader"
	mEtcdKeepAlives = "etcd_debugging_lease_renewed_total"
	mEtcdKeys       = "etcd_debugging_mvcc_keys_total"
	mEtcdLeases     = "etcd_debugging_lease_total"
)

// Raft entry kinds that renew leases (fsm.OpType.String()).
var renewOps = []string{"renew", "session-renew"}
