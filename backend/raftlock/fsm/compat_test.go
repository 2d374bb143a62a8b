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

func TestCompatV1Log(t *testing.T) {
	if *update {
		writeCompatFiles(t)
	}
	raw := readGz(t, compatLog)
	f := New()
	digest := sha256.New()
	n := 0
	for len(raw) > 0 {
		size, k := binary.Uvarint(raw)
		if k <= 0 || uint64(len(raw)-k) < size {
			t.Fatalf("%s: truncated after %d entries", compatLog, n)
		}
		b := raw[k : k+int(size)]
		raw = raw[k+int(size):]
		e, err := Decode(b)
		if err != nil {
			t.Fatalf("entry %d of the v1 log no longer decodes: %v", n, err)
		}
		if again := Encode(e); !bytes.Equal(again, b) {
			t.Fatalf("entry %d re-encodes differently: the v1 entry format changed without a new version", n)
		}
		n++
		for _, r := range apply(t, f, uint64(n), e) {
			fmt.Fprintf(digest, "%d %d %q %d\n", r.Status, r.Token, r.Owner, r.Expires)
		}
	}
	if n < 1000 {
		t.Fatalf("%s holds %d entries, want the full log", compatLog, n)
	}
	want, err := os.ReadFile(compatResults)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(digest.Sum(nil)); got != strings.TrimSpace(string(want)) {
		t.Errorf("replaying the v1 log gives other results than the binary that wrote it (digest %s, want %s): "+
			"an op's meaning changed, and old and new nodes would diverge", got, strings.TrimSpace(string(want)))
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

func writeCompatFiles(t *testing.T) {
	t.Helper()
	var log bytes.Buffer
	f := New()
	digest := sha256.New()
	for i, e := range randomLog(t, 20261122, 3000) {
		b := Encode(e)
		log.Write(binary.AppendUvarint(nil, uint64(len(b))))
		log.Write(b)
		for _, r := range apply(t, f, uint64(i+1), e) {
			fmt.Fprintf(digest, "%d %d %q %d\n", r.Status, r.Token, r.Owner, r.Expires)
		}
	}
	writeGz(t, compatLog, log.Bytes())
	writeGz(t, compatSnapshot, snapBytes(t, f))
	if err := os.WriteFile(compatResults, []byte(hex.EncodeToString(digest.Sum(nil))+"\n"), 0o644); err != nil {
		t.Fatal(err)
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
