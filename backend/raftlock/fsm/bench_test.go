package fsm

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// BenchmarkSnapshotRestore100k is one full cycle for 100k held locks:
// Snapshot (on the FSM goroutine), Persist, and Restore into a fresh FSM.
func BenchmarkSnapshotRestore100k(b *testing.B) {
	f := build100k(b, 100_000)
	b.ResetTimer()
	var size int
	for b.Loop() {
		data := snapBytes(b, f)
		size = len(data)
		g := New()
		if err := g.Restore(readCloser{bytes.NewReader(data)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(size), "snapshot-bytes")
}

// BenchmarkSnapshotCapture100k is the part of a snapshot that blocks Apply.
func BenchmarkSnapshotCapture100k(b *testing.B) {
	f := build100k(b, 100_000)
	for b.Loop() {
		s, _ := f.Snapshot()
		s.Release()
	}
}

func BenchmarkPersist100k(b *testing.B) {
	f := build100k(b, 100_000)
	for b.Loop() {
		s, _ := f.Snapshot()
		var sink memSink
		if err := s.Persist(&sink); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRestore100k(b *testing.B) {
	data := snapBytes(b, build100k(b, 100_000))
	for b.Loop() {
		if err := New().Restore(readCloser{bytes.NewReader(data)}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyAcquire applies entries of one acquire each, through
// Decode, as raft would; every acquire takes over an expired holder, so each
// one is a new grant.
func BenchmarkApplyAcquire(b *testing.B) {
	f := New()
	i := 0
	for b.Loop() {
		key := fmt.Sprintf("tenant-000/res-%06d", i%1024)
		data := Encode(Entry{Now: t0 + int64(i), Ops: []Op{acq(key, "client-000000001", hA, time.Nanosecond)}})
		res, ok := f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: data}).(*ApplyResult)
		if !ok || res.Results[0].Token != uint64(i+1) {
			b.Fatalf("apply %d: %+v", i, res)
		}
		i++
	}
}

func BenchmarkDecode(b *testing.B) {
	var e Entry
	for i := range 100 {
		e.Ops = append(e.Ops, acq(fmt.Sprintf("tenant-000/res-%06d", i), "client-000000001", hA, time.Minute))
	}
	data := Encode(e)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}
