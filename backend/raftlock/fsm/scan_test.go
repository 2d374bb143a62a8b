package fsm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestScanLocks: pages of every limit, walked by their cursors, list each
// held key containing the search string exactly once, in key order —
// exclusive and shared keys alike; released keys and data are not listed.
func TestScanLocks(t *testing.T) {
	f := New()
	r := rand.New(rand.NewPCG(1, 2))
	var held []string
	index := uint64(0)
	for i := range 300 {
		key := fmt.Sprintf("%c/%d", 'a'+r.IntN(5), r.IntN(100000))
		if slices.Contains(held, key) {
			continue
		}
		index++
		op := Op{Type: OpAcquire, Key: key, Owner: "o", Handle: fmt.Sprintf("%032x", i+1), TTL: time.Minute}
		if i%7 == 0 {
			op.Mode = ModeShared
		}
		apply(t, f, index, Entry{Now: t0, Ops: []Op{op}})
		held = append(held, key)
	}
	// One released key and one data value must not be listed.
	index++
	apply(t, f, index, Entry{Now: t0, Ops: []Op{acq("gone", "o", hA, time.Minute)}})
	index++
	apply(t, f, index, Entry{Now: t0, Ops: []Op{rel("gone", hA, f.LastToken())}})
	slices.Sort(held)
	for _, search := range []string{"", "a/", "7", "no-such"} {
		var want []string
		for _, k := range held {
			if strings.Contains(k, search) {
				want = append(want, k)
			}
		}
		for _, limit := range []int{1, 7, 50, MaxScanLimit, MaxScanLimit + 100} {
			var got []string
			after := ""
			for pages := 0; ; pages++ {
				res := f.ScanLocks(after, search, limit)
				if res.Total != len(held) || res.Matched != len(want) {
					t.Fatalf("search %q limit %d: total %d matched %d, want %d, %d", search, limit, res.Total, res.Matched, len(held), len(want))
				}
				if len(res.Keys) > min(limit, MaxScanLimit) || pages > len(held) {
					t.Fatalf("search %q limit %d: a page of %d keys (page %d)", search, limit, len(res.Keys), pages)
				}
				got = append(got, res.Keys...)
				if !res.More {
					break
				}
				after = res.Keys[len(res.Keys)-1]
			}
			if !slices.Equal(got, want) {
				t.Fatalf("search %q limit %d: listed %d keys, want %d in order", search, limit, len(got), len(want))
			}
		}
	}
}

// million returns an FSM holding a million keys.
func million(b *testing.B) *FSM {
	f := New()
	const n = 1_000_000
	const batch = 1000
	for i := 0; i < n; i += batch {
		ops := make([]Op, batch)
		for j := range ops {
			ops[j] = Op{Type: OpAcquire, Key: fmt.Sprintf("tenant-%d/job-%07d", (i+j)%97, i+j), Owner: "o", Handle: fmt.Sprintf("%032x", i+j+1), TTL: time.Hour}
		}
		apply(b, f, uint64(i/batch+1), Entry{Now: t0, Ops: ops})
	}
	return f
}

// BenchmarkScanLocks1M: one console page at a million held keys.
func BenchmarkScanLocks1M(b *testing.B) {
	f := million(b)
	b.ResetTimer()
	for b.Loop() {
		if res := f.ScanLocks("tenant-5/", "", 50); len(res.Keys) != 50 {
			b.Fatalf("%d keys", len(res.Keys))
		}
	}
}

// BenchmarkApplyBesideScan1M: entries applied while console scans run
// back to back over a million keys; reports the longest an Apply took
// (max-apply-ms): what a scan makes a commit wait.
func BenchmarkApplyBesideScan1M(b *testing.B) {
	f := million(b)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				f.ScanLocks("", "", 50)
			}
		}
	}()
	var worst time.Duration
	index := uint64(1_000_000)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		index++
		h := fmt.Sprintf("%032x", 2_000_000+i)
		start := time.Now()
		f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: Encode(Entry{Now: t0, Ops: []Op{acq(fmt.Sprintf("x/%d", i), "o", h, time.Hour)}})})
		worst = max(worst, time.Since(start))
	}
	b.StopTimer()
	close(stop)
	<-done
	b.ReportMetric(float64(worst.Microseconds())/1000, "max-apply-ms")
}

// TestScanLocksBesideApply: a scan that spans many chunks while entries
// are applied lists each key at most once, in order, and every key held
// throughout the scan (the race detector checks the map's hand-over).
func TestScanLocksBesideApply(t *testing.T) {
	f := New()
	const stable = 3 * scanChunk
	ops := make([]Op, stable)
	for i := range ops {
		ops[i] = Op{Type: OpAcquire, Key: fmt.Sprintf("s/%06d", i), Owner: "o", Handle: fmt.Sprintf("%032x", i+1), TTL: time.Hour}
	}
	apply(t, f, 1, Entry{Now: t0, Ops: ops})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			h := fmt.Sprintf("%032x", stable+i+1)
			f.Apply(&raft.Log{Index: uint64(2 + 2*i), Type: raft.LogCommand, Data: Encode(Entry{Now: t0, Ops: []Op{acq(fmt.Sprintf("c/%03d", i), "o", h, time.Hour)}})})
			f.Apply(&raft.Log{Index: uint64(3 + 2*i), Type: raft.LogCommand, Data: Encode(Entry{Now: t0, Ops: []Op{rel(fmt.Sprintf("c/%03d", i), h, f.LastToken())}})})
		}
	}()
	for scans := 0; ; scans++ {
		res := f.ScanLocks("", "", MaxScanLimit)
		var all []string
		after := ""
		for r := res; ; r = f.ScanLocks(after, "s/", MaxScanLimit) {
			all = append(all, r.Keys...)
			if !r.More {
				break
			}
			after = r.Keys[len(r.Keys)-1]
		}
		stableSeen := 0
		for i, k := range all {
			if i > 0 && all[i-1] >= k {
				t.Fatalf("keys out of order or twice: %q then %q", all[i-1], k)
			}
			if strings.HasPrefix(k, "s/") {
				stableSeen++
			}
		}
		if stableSeen != stable {
			t.Fatalf("scan %d listed %d of the %d keys held throughout", scans, stableSeen, stable)
		}
		select {
		case <-done:
			return
		default:
		}
	}
}
