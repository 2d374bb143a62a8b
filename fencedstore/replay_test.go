package fencedstore

import (
	"bytes"
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
		{"bad checksum in last record", func(f *os.File, ends []int64) error {
			_, err := f.WriteAt([]byte{'!'}, ends[n-1]-2)
			return err
		}, n - 1},
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
// left to repair.
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
