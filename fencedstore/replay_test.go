package fencedstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeLog writes n records, keys r0..r(n-1), one durable write at a time,
// and returns the file offsets where each record ends (ends[i] is the size
// after record i). Every other record is followed by a rejected write on
// the same key, so both record kinds are in the file.
func writeLog(t testing.TB, path string, n int) (ends []int64) {
	t.Helper()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		key := fmt.Sprintf("r%d", i)
		mustWrite(t, s, req(key, uint64(10+i), strings.Repeat(key, 20)))
		if i%2 == 1 {
			if _, err := s.Write(t.Context(), req(key, 1, "stale")); !errors.Is(err, ErrStaleToken) {
				t.Fatalf("stale write: %v", err)
			}
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, fi.Size())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return ends
}

func TestTornTailRepaired(t *testing.T) {
	const n = 9 // odd: the last record is an accepted write (r8), not a rejection
	cases := []struct {
		name   string
		damage func(f *os.File, ends []int64) error
		keep   int // records expected after repair
	}{
		{"truncated mid-payload", func(f *os.File, ends []int64) error { return f.Truncate(ends[n-1] - 5) }, n - 1},
		{"truncated mid-frame", func(f *os.File, ends []int64) error { return f.Truncate(ends[n-2] + 3) }, n - 1},
		{"garbage appended", func(f *os.File, ends []int64) error {
			_, err := f.WriteAt([]byte("\x20\x00\x00\x00garbage-that-is-not-a-record"), ends[n-1])
			return err
		}, n},
		{"zeros appended", func(f *os.File, ends []int64) error { _, err := f.WriteAt(make([]byte, 4096), ends[n-1]); return err }, n},
		{"last record cut inside its header", func(f *os.File, ends []int64) error { return f.Truncate(ends[n-2] + frameSize - 1) }, n - 1},
		{"last record cut one byte short", func(f *os.File, ends []int64) error { return f.Truncate(ends[n-1] - 1) }, n - 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "data")
			ends := writeLog(t, path, n)
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.damage(f, ends); err != nil {
				t.Fatal(err)
			}
			fi, _ := f.Stat()
			damagedSize := fi.Size()
			f.Close()

			s := openT(t, path)
			st := s.Stats()
			if wantRepaired := damagedSize - ends[tc.keep-1]; st.RepairedBytes != wantRepaired || wantRepaired <= 0 {
				t.Fatalf("RepairedBytes = %d, want %d", st.RepairedBytes, wantRepaired)
			}
			if st.Keys != tc.keep || st.Accepted != uint64(tc.keep) {
				t.Fatalf("Stats %+v, want %d keys", st, tc.keep)
			}
			for i := range n {
				key := fmt.Sprintf("r%d", i)
				if i < tc.keep {
					wantRecord(t, s, key, uint64(10+i), strings.Repeat(key, 20))
				} else if _, ok := s.Read(key); ok {
					t.Fatalf("torn record %s survived", key)
				}
			}
			mustWrite(t, s, req("after", 1, "after-repair"))
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2 := openT(t, path)
			if st := s2.Stats(); st.RepairedBytes != 0 || st.Keys != tc.keep+1 {
				t.Fatalf("second Open: Stats %+v", st)
			}
			wantRecord(t, s2, "after", 1, "after-repair")
		})
	}
}

// TestCorruptLastRecordRefused: a last record that is all there (its length
// ends exactly at the end of the file) but fails its checksum was damaged
// after it was written, not torn by a crash (format.go explains why), and
// it may be an acknowledged write: dropping it would take the key's highest
// token back and let a stale writer in. Open refuses, naming the file and
// the record's offset, and leaves the file alone.
func TestCorruptLastRecordRefused(t *testing.T) {
	for _, n := range []int{9, 10} { // 9: the last record is an accepted write; 10: a rejection
		path := filepath.Join(t.TempDir(), "data")
		ends := writeLog(t, path, n)
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		last := lastRecordStart(t, orig, ends[n-2])
		for name, off := range map[string]int64{
			"payload: token": last + frameSize + 3,
			"payload: end":   int64(len(orig)) - 2,
			"checksum":       last + 5,
		} {
			t.Run(fmt.Sprintf("n=%d/%s", n, name), func(t *testing.T) {
				bad := bytes.Clone(orig)
				bad[off] ^= 0x01
				p := filepath.Join(t.TempDir(), "data")
				if err := os.WriteFile(p, bad, 0o644); err != nil {
					t.Fatal(err)
				}
				s, err := Open(p, Options{})
				if err == nil {
					st := s.Stats()
					s.Close()
					t.Fatalf("Open of a file whose complete last record is corrupt succeeded (repaired %d bytes): an acknowledged write was dropped", st.RepairedBytes)
				}
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("offset %d", last)) || !strings.Contains(err.Error(), p) {
					t.Fatalf("err = %v, want ErrCorrupt naming %s and offset %d", err, p, last)
				}
				if after, _ := os.ReadFile(p); !bytes.Equal(after, bad) {
					t.Fatal("a failed Open changed the file")
				}
			})
		}
	}
}

// lastRecordStart walks the records of a valid file from offset from and
// returns where the last one starts.
func lastRecordStart(t *testing.T, file []byte, from int64) int64 {
	t.Helper()
	off := from
	for {
		n := int64(binary.LittleEndian.Uint32(file[off:]))
		if off+frameSize+n == int64(len(file)) {
			return off
		}
		if off+frameSize+n > int64(len(file)) {
			t.Fatalf("record at %d runs past the end", off)
		}
		off += frameSize + n
	}
}

func TestMidFileCorruptionFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	ends := writeLog(t, path, 10)
	for name, off := range map[string]int64{
		"payload": ends[3] - 4,     // data of record r3
		"length":  ends[2] + 1,     // length field of record r3
		"crc":     ends[2] + 5,     // checksum of record r3
		"first":   headerSize + 12, // the first record
	} {
		t.Run(name, func(t *testing.T) {
			orig, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			bad := bytes.Clone(orig)
			bad[off] ^= 0x40
			p := filepath.Join(t.TempDir(), "data")
			os.WriteFile(p, bad, 0o644)
			s, err := Open(p, Options{})
			if err == nil {
				s.Close()
				t.Fatal("Open of a file damaged mid-log succeeded")
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "followed by a valid record") {
				t.Fatalf("err = %v, want ErrCorrupt naming the valid record after the damage", err)
			}
			if after, _ := os.ReadFile(p); !bytes.Equal(after, bad) {
				t.Fatal("a failed Open changed the file")
			}
		})
	}
}

func TestBadHeader(t *testing.T) {
	dir := t.TempDir()
	good := encodeHeader(42)
	for name, content := range map[string][]byte{
		"not ours":      []byte("hello, this is a text file\n"),
		"short":         good[:7],
		"wrong version": append([]byte("LGFS\x09"), good[5:]...),
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, content, 0o644)
		if _, err := Open(p, Options{}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
	p := filepath.Join(dir, "empty")
	os.WriteFile(p, nil, 0o644)
	s := openT(t, p) // an empty file is a new store
	mustWrite(t, s, req("k", 1, "x"))
}

// FuzzReplay: any bytes as a data file: Open never panics, and when it
// succeeds, the repaired file opens again to the same state with nothing
// left to repair; the repair only ever cut a tail off, and that tail did not
// start with a complete record (one whose length ends exactly at the end of
// the file: a corrupt acknowledged write must be refused, not cut).
func FuzzReplay(f *testing.F) {
	dir := f.TempDir()
	p := filepath.Join(dir, "seed")
	ends := writeLog(f, p, 4)
	valid, err := os.ReadFile(p)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(valid[:ends[2]+7])
	f.Add(append(bytes.Clone(valid), 0xff, 0, 0, 0, 1, 2, 3))
	f.Add(valid[:headerSize])
	f.Add([]byte{})
	f.Add([]byte("LGFS\x01\x00\x00\x00"))
	flipped := bytes.Clone(valid)
	flipped[len(flipped)-2] ^= 1 // inside the last record: corruption
	f.Add(flipped)
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "data")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := Open(p, Options{})
		if err != nil {
			return
		}
		st := s.Stats()
		s.Close()
		repaired, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) >= headerSize && !bytes.HasPrefix(data, repaired) {
			t.Fatalf("Open rewrote the file instead of cutting a tail off")
		}
		if cut := int64(len(repaired)); st.RepairedBytes > 0 {
			if cut+st.RepairedBytes != int64(len(data)) {
				t.Fatalf("RepairedBytes %d, but the file went from %d to %d bytes", st.RepairedBytes, len(data), cut)
			}
			if st.RepairedBytes >= frameSize {
				if n := int64(binary.LittleEndian.Uint32(data[cut:])); n >= minPayload && n <= maxPayload && cut+frameSize+n == int64(len(data)) {
					t.Fatalf("cut off a complete %d-byte record at offset %d as a torn tail", frameSize+n, cut)
				}
			}
		}
		s2, err := Open(p, Options{})
		if err != nil {
			t.Fatalf("reopening a repaired file: %v", err)
		}
		defer s2.Close()
		st2 := s2.Stats()
		st.RepairedBytes = 0
		if !reflect.DeepEqual(st, st2) {
			t.Fatalf("state changed on reopen: %+v then %+v", st, st2)
		}
	})
}
