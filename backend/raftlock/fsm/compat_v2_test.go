package fsm

import (
	"bytes"
	"flag"
	"testing"
)

// The version 2 formats (the primitives beyond the mutex), recorded as the v1 files
// are (compat_test.go): a log of shared, semaphore, lock-delay and group
// ops, the snapshot after it, and the digest of every result. Regenerate
// (-update-v2) only together with a new format version.
var updateV2 = flag.Bool("update-v2", false, "rewrite the version 2 format-compatibility files in testdata/")

var compatV2 = compatFiles{
	version:  "v2",
	log:      "testdata/log-v2.bin.gz",
	snapshot: "testdata/snapshot-v2.bin.gz",
	results:  "testdata/results-v2.sha256",
}

func TestCompatV2Log(t *testing.T) {
	if *updateV2 {
		writeCompatFiles(t, compatV2, randomPrimLog(t, 20261124, 3000))
	}
	f, n, versions := replayCompatLog(t, compatV2)
	if v2 := versions[entryVersionV2]; n < 1000 || v2 < 500 {
		t.Fatalf("%s holds %d entries, %d of version 2; want the full log", compatV2.log, n, v2)
	}
	snap := readGz(t, compatV2.snapshot)
	if snap[len(snapMagic)] != snapVersionV2 {
		t.Fatalf("%s is not a version 2 snapshot", compatV2.snapshot)
	}
	if !bytes.Equal(snapBytes(t, f), snap) {
		t.Error("replaying the v2 log ends in another state than the binary that wrote it")
	}
	if !bytes.Equal(snapBytes(t, restored(t, snap)), snap) {
		t.Error("the recorded v2 snapshot restores to another state")
	}
}
