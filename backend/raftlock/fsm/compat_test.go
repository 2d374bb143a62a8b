package fsm

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Rolling upgrades run old and new binaries in one cluster: every node
// applies the same log, so a newer binary must decode every entry and
// snapshot an older one wrote, and must compute the same results and the
// same state from them, or the replicas silently diverge. The files under
// testdata/ were written by format version 1; these tests replay them.
// Regenerate them (go test ./backend/raftlock/fsm -run Compat -update)
// only together with a new entryVersion/snapVersion, keeping the old files
// and a decoder for the old version (docs/operations.md, "Shutdown and
// upgrades").
var update = flag.Bool("update", false, "rewrite the format-compatibility files in testdata/")

const (
	compatLog      = "testdata/log-v1.bin.gz"      // uvarint length + Encode(entry), repeated
	compatSnapshot = "testdata/snapshot-v1.bin.gz" // the state after the log, as Persist writes it
	compatResults  = "testdata/results-v1.sha256"  // digest of every op's Result, in order
)

// compatFiles names one format version's recorded files: its log, the
// snapshot after it and the digest of every result.
type compatFiles struct {
	version                string // "v1", "v2": in messages
	log, snapshot, results string
}

var compatV1 = compatFiles{"v1", compatLog, compatSnapshot, compatResults}

func TestCompatV1Log(t *testing.T) {
	if *update {
		writeCompatFiles(t, compatV1, randomLog(t, 20261122, 3000))
	}
	f, n, _ := replayCompatLog(t, compatV1)
	if n < 1000 {
		t.Fatalf("%s holds %d entries, want the full log", compatLog, n)
	}
	if !bytes.Equal(snapBytes(t, f), readGz(t, compatSnapshot)) {
		t.Error("replaying the v1 log ends in another state than the binary that wrote it")
	}
}

// TestCompatV1Snapshot: a v1 snapshot restores, and snapshots back to the
// same bytes (what a follower installs from an older leader).
func TestCompatV1Snapshot(t *testing.T) {
	snap := readGz(t, compatSnapshot)
	f := restored(t, snap)
	if f.NumLocks() == 0 {
		t.Fatal("the v1 snapshot restored no locks: the test would not notice a lost lock table")
	}
	if !bytes.Equal(snapBytes(t, f), snap) {
		t.Error("a restored v1 snapshot persists to other bytes: state was lost or changed on restore")
	}
}

// writeCompatFiles records log as files: the entries, the snapshot after
// applying them to a new FSM and the digest of every result.
func writeCompatFiles(t *testing.T, files compatFiles, log []Entry) {
	t.Helper()
	var raw bytes.Buffer
	f := New()
	digest := sha256.New()
	for i, e := range log {
		b := Encode(e)
		raw.Write(binary.AppendUvarint(nil, uint64(len(b))))
		raw.Write(b)
		digestResults(digest, apply(t, f, uint64(i+1), e))
	}
	writeGz(t, files.log, raw.Bytes())
	writeGz(t, files.snapshot, snapBytes(t, f))
	if err := os.WriteFile(files.results, []byte(hex.EncodeToString(digest.Sum(nil))+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replayCompatLog applies files.log to a new FSM, failing the test when an
// entry no longer decodes, re-encodes to other bytes, or the results'
// digest differs from files.results. It returns the FSM, the number of
// entries and how many of them carry each entry version byte.
func replayCompatLog(t *testing.T, files compatFiles) (f *FSM, n int, versions map[byte]int) {
	t.Helper()
	raw := readGz(t, files.log)
	f = New()
	digest := sha256.New()
	versions = map[byte]int{}
	for len(raw) > 0 {
		size, k := binary.Uvarint(raw)
		if k <= 0 || uint64(len(raw)-k) < size {
			t.Fatalf("%s: truncated after %d entries", files.log, n)
		}
		b := raw[k : k+int(size)]
		raw = raw[k+int(size):]
		e, err := Decode(b)
		if err != nil {
			t.Fatalf("entry %d of the %s log no longer decodes: %v", n, files.version, err)
		}
		if !bytes.Equal(Encode(e), b) {
			t.Fatalf("entry %d re-encodes differently: the %s entry format changed without a new version", n, files.version)
		}
		versions[b[0]]++
		n++
		digestResults(digest, apply(t, f, uint64(n), e))
	}
	want, err := os.ReadFile(files.results)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(digest.Sum(nil)); got != strings.TrimSpace(string(want)) {
		t.Errorf("replaying the %s log gives other results than the binary that wrote it (digest %s, want %s): "+
			"an op's meaning changed, and old and new nodes would diverge", files.version, got, strings.TrimSpace(string(want)))
	}
	return f, n, versions
}

// digestResults writes one line per result into the digest the results
// files record.
func digestResults(digest io.Writer, results []Result) {
	for _, r := range results {
		fmt.Fprintf(digest, "%d %d %q %d\n", r.Status, r.Token, r.Owner, r.Expires)
	}
}

func readGz(t *testing.T, name string) []byte {
	t.Helper()
	fh, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	z, err := gzip.NewReader(fh)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b
}

func writeGz(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	z := gzip.NewWriter(&buf)
	z.Write(b)
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
