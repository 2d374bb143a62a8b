package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

// The version 2 formats (issue 22's primitives), recorded as the v1 files
// are (compat_test.go): a log of shared, semaphore, lock-delay and group
// ops, the snapshot after it, and the digest of every result. Regenerate
// (-update-v2) only together with a new format version.
var updateV2 = flag.Bool("update-v2", false, "rewrite the version 2 format-compatibility files in testdata/")

const (
	compatLogV2      = "testdata/log-v2.bin.gz"
	compatSnapshotV2 = "testdata/snapshot-v2.bin.gz"
	compatResultsV2  = "testdata/results-v2.sha256"
)

func TestCompatV2Log(t *testing.T) {
	if *updateV2 {
		var log bytes.Buffer
		f := New()
		digest := sha256.New()
		for i, e := range randomPrimLog(t, 20261124, 3000) {
			b := Encode(e)
			log.Write(binary.AppendUvarint(nil, uint64(len(b))))
			log.Write(b)
			for _, r := range apply(t, f, uint64(i+1), e) {
				fmt.Fprintf(digest, "%d %d %q %d\n", r.Status, r.Token, r.Owner, r.Expires)
			}
		}
		writeGz(t, compatLogV2, log.Bytes())
		writeGz(t, compatSnapshotV2, snapBytes(t, f))
		if err := os.WriteFile(compatResultsV2, []byte(hex.EncodeToString(digest.Sum(nil))+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw := readGz(t, compatLogV2)
	f := New()
	digest := sha256.New()
	n, v2 := 0, 0
	for len(raw) > 0 {
		size, k := binary.Uvarint(raw)
		if k <= 0 || uint64(len(raw)-k) < size {
			t.Fatalf("%s: truncated after %d entries", compatLogV2, n)
		}
		b := raw[k : k+int(size)]
		raw = raw[k+int(size):]
		e, err := Decode(b)
		if err != nil {
			t.Fatalf("entry %d of the v2 log no longer decodes: %v", n, err)
		}
		if !bytes.Equal(Encode(e), b) {
			t.Fatalf("entry %d re-encodes differently: the entry format changed without a new version", n)
		}
		if b[0] == entryVersionV2 {
			v2++
		}
		n++
		for _, r := range apply(t, f, uint64(n), e) {
			fmt.Fprintf(digest, "%d %d %q %d\n", r.Status, r.Token, r.Owner, r.Expires)
		}
	}
	if n < 1000 || v2 < 500 {
		t.Fatalf("%s holds %d entries, %d of version 2; want the full log", compatLogV2, n, v2)
	}
	want, err := os.ReadFile(compatResultsV2)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(digest.Sum(nil)); got != strings.TrimSpace(string(want)) {
		t.Errorf("replaying the v2 log gives other results than the binary that wrote it (digest %s, want %s)", got, strings.TrimSpace(string(want)))
	}
	snap := readGz(t, compatSnapshotV2)
	if snap[len(snapMagic)] != snapVersionV2 {
		t.Fatalf("%s is not a version 2 snapshot", compatSnapshotV2)
	}
	if !bytes.Equal(snapBytes(t, f), snap) {
		t.Error("replaying the v2 log ends in another state than the binary that wrote it")
	}
	if !bytes.Equal(snapBytes(t, restored(t, snap)), snap) {
		t.Error("the recorded v2 snapshot restores to another state")
	}
}
