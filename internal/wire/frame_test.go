package wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestReadFrame: ReadFrame reads what io.ReadAll reads, into the buffer it
// is given, and stops past the limit.
func TestReadFrame(t *testing.T) {
	for _, n := range []int{0, 1, 511, 512, 513, 4096, 10000} {
		want := strings.Repeat("x", n)
		for _, buf := range [][]byte{nil, make([]byte, 0, 8), make([]byte, 3, 2048)} {
			got, err := ReadFrame(iotest.OneByteReader(strings.NewReader(want)), buf, -1)
			if err != nil || string(got) != want {
				t.Fatalf("%d bytes: got %d bytes, err %v", n, len(got), err)
			}
			got, err = ReadFrame(strings.NewReader(want), buf, int64(n))
			if err != nil || string(got) != want {
				t.Fatalf("%d bytes at limit %d: got %d bytes, err %v", n, n, len(got), err)
			}
			if n > 0 {
				_, err = ReadFrame(strings.NewReader(want), buf, int64(n-1))
				if !errors.Is(err, ErrFrameTooLarge) {
					t.Fatalf("%d bytes over limit %d: err %v", n, n-1, err)
				}
			}
		}
	}
	buf := make([]byte, 0, 1024)
	got, _ := ReadFrame(bytes.NewReader([]byte("abc")), buf, -1)
	if &got[0] != &buf[:1][0] {
		t.Fatal("ReadFrame did not read into the buffer it was given")
	}
	boom := errors.New("boom")
	if _, err := ReadFrame(io.MultiReader(strings.NewReader("ab"), iotest.ErrReader(boom)), nil, -1); !errors.Is(err, boom) {
		t.Fatalf("err %v, want the reader's", err)
	}
}
