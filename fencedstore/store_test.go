package fencedstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func openT(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func req(key string, tok uint64, data string) WriteRequest {
	return WriteRequest{ClientID: "c-" + data, Token: FencingToken{Key: key, Value: tok}, Data: data}
}

func mustWrite(t testing.TB, s *Store, r WriteRequest) WriteResult {
	t.Helper()
	res, err := s.Write(context.Background(), r)
	if err != nil {
		t.Fatalf("Write(%s@%d): %v", r.Token.Key, r.Token.Value, err)
	}
	return res
}

func wantStale(t *testing.T, err error, key string, tok, highest uint64) {
	t.Helper()
	if !errors.Is(err, ErrStaleToken) {
		t.Fatalf("write %s@%d: err = %v, want ErrStaleToken", key, tok, err)
	}
	var se *StaleTokenError
	if !errors.As(err, &se) || *se != (StaleTokenError{Key: key, Token: tok, Highest: highest}) {
		t.Fatalf("err = %#v, want StaleTokenError{%q, %d, %d}", err, key, tok, highest)
	}
}

func wantRecord(t *testing.T, s *Store, key string, tok uint64, data string) {
	t.Helper()
	rec, ok := s.Read(key)
	want := Record{Key: key, Data: data, ClientID: "c-" + data, Token: FencingToken{Key: key, Value: tok}}
	if !ok || rec != want {
		t.Fatalf("Read(%q) = %+v, %v; want %+v", key, rec, ok, want)
	}
}

func TestStaleTokenRejected(t *testing.T) {
	s := openT(t, filepath.Join(t.TempDir(), "data"))
	ctx := context.Background()
	if r := mustWrite(t, s, req("a", 5, "a5")); r.Previous != 0 || r.Seq != 1 {
		t.Fatalf("first write result %+v", r)
	}
	_, err := s.Write(ctx, req("a", 4, "a4"))
	wantStale(t, err, "a", 4, 5)
	wantRecord(t, s, "a", 5, "a5")

	mustWrite(t, s, req("a", 5, "a5-again")) // equal: the same holder again
	wantRecord(t, s, "a", 5, "a5-again")
	if r := mustWrite(t, s, req("a", 9, "a9")); r.Previous != 5 || r.Seq != 4 {
		t.Fatalf("write a@9 result %+v, want Previous 5, Seq 4", r)
	}
	_, err = s.Write(ctx, req("a", 8, "a8"))
	wantStale(t, err, "a", 8, 9)

	// Keys are independent: b starts below a's tokens.
	mustWrite(t, s, req("b", 1, "b1"))
	_, err = s.Write(ctx, req("b", 0, "b0"))
	wantStale(t, err, "b", 0, 1)
	wantRecord(t, s, "a", 9, "a9")
	wantRecord(t, s, "b", 1, "b1")

	want := Stats{Accepted: 4, Rejected: 3, RejectedByKey: map[string]uint64{"a": 2, "b": 1}, Keys: 2}
	if got := s.Stats(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}

func TestInvalidWrites(t *testing.T) {
	s := openT(t, filepath.Join(t.TempDir(), "data"))
	cases := map[string]WriteRequest{
		"empty key":      req("", 1, "x"),
		"long key":       req(strings.Repeat("k", MaxKeyLen+1), 1, "x"),
		"empty clientID": {Token: FencingToken{Key: "k", Value: 1}},
		"long clientID":  {ClientID: strings.Repeat("c", MaxClientIDLen+1), Token: FencingToken{Key: "k", Value: 1}},
		"large data":     req("k", 1, strings.Repeat("d", MaxDataLen+1)),
	}
	for name, r := range cases {
		if _, err := s.Write(context.Background(), r); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	mustWrite(t, s, WriteRequest{ClientID: strings.Repeat("c", MaxClientIDLen),
		Token: FencingToken{Key: strings.Repeat("k", MaxKeyLen), Value: 1}, Data: strings.Repeat("d", MaxDataLen)})
	if st := s.Stats(); st.Accepted != 1 || st.Rejected != 0 {
		t.Fatalf("Stats = %+v, want only the valid write", st)
	}
}

// TestRestartPreservesWrites: every acknowledged write, and the counters,
// survive Close and Open.
func TestRestartPreservesWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	s := openT(t, path)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 50 {
				key := fmt.Sprintf("k%d", (w+i)%5)
				s.Write(context.Background(), req(key, uint64(i), fmt.Sprintf("%s-%d", key, i)))
			}
		})
	}
	wg.Wait()
	for k := range 5 { // one certain rejection per key
		if _, err := s.Write(context.Background(), req(fmt.Sprintf("k%d", k), 0, "late")); !errors.Is(err, ErrStaleToken) {
			t.Fatalf("late write: %v", err)
		}
	}
	before := s.Stats()
	recs := map[string]Record{}
	for k := range 5 {
		key := fmt.Sprintf("k%d", k)
		rec, ok := s.Read(key)
		if !ok {
			t.Fatalf("key %s missing", key)
		}
		recs[key] = rec
	}
	if before.Accepted+before.Rejected != 405 || before.Rejected < 5 {
		t.Fatalf("Stats %+v: want 405 decisions, at least 5 rejected", before)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openT(t, path)
	if got := s2.Stats(); !reflect.DeepEqual(got, before) {
		t.Fatalf("Stats after restart %+v, want %+v", got, before)
	}
	for key, want := range recs {
		if got, _ := s2.Read(key); got != want {
			t.Fatalf("Read(%s) after restart = %+v, want %+v", key, got, want)
		}
	}
	if r := mustWrite(t, s2, req("k0", 100, "k0-100")); r.Seq != 406 {
		t.Fatalf("Seq after restart = %d, want 406", r.Seq)
	}
}

// blockingSync replaces the store's fsync with one that reports each call
// and waits for release.
func blockingSync(s *Store) (entered chan struct{}, release chan struct{}) {
	entered, release = make(chan struct{}, 100), make(chan struct{})
	real := s.sync
	s.sync = func(f *os.File) error {
		entered <- struct{}{}
		<-release
		return real(f)
	}
	return entered, release
}

// TestWriteWaitsForSync: no write is acknowledged before its fsync returns.
func TestWriteWaitsForSync(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "data"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := blockingSync(s) // before any write: the writer has not synced yet
	done := make(chan error, 1)
	go func() { _, err := s.Write(context.Background(), req("k", 1, "x")); done <- err }()
	<-entered
	select {
	case err := <-done:
		t.Fatalf("Write returned (%v) while its fsync was still running", err)
	case <-time.After(50 * time.Millisecond): // grace for a wrong early answer to arrive
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// TestGroupCommit: writes that queue up behind an fsync share the next one.
func TestGroupCommit(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "data"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	entered, release := blockingSync(s)
	var wg sync.WaitGroup
	write := func(key string) {
		if _, err := s.Write(context.Background(), req(key, 1, "x")); err != nil {
			t.Error(err)
		}
	}
	wg.Go(func() { write("first") })
	<-entered
	for i := range 31 {
		wg.Go(func() { write(fmt.Sprintf("k%d", i)) })
	}
	for len(s.queue) < 31 {
		time.Sleep(time.Millisecond) // polling for the writers to queue
	}
	close(release)
	wg.Wait()
	if n := len(entered); n != 1 { // the first sync was already taken
		t.Fatalf("32 writes used %d fsyncs, want 2", n+1)
	}
	if st := s.Stats(); st.Accepted != 32 {
		t.Fatalf("Accepted = %d", st.Accepted)
	}
}

func TestFailedSyncIsSticky(t *testing.T) {
	s := openT(t, filepath.Join(t.TempDir(), "data"))
	mustWrite(t, s, req("k", 1, "one"))
	s.sync = func(*os.File) error { return errors.New("disk on fire") }
	if _, err := s.Write(context.Background(), req("k", 2, "two")); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("Write with failing fsync: err = %v", err)
	}
	wantRecord(t, s, "k", 1, "one") // the undurable write is not visible
	if s.Err() == nil {
		t.Fatal("Err() = nil after a failed fsync")
	}
	if _, err := s.Write(context.Background(), req("k", 3, "three")); err == nil {
		t.Fatal("Write after a failed fsync succeeded")
	}
}

func TestCloseAndLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	s := openT(t, path)
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second Open: err = %v, want locked", err)
	}
	mustWrite(t, s, req("k", 1, "x"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Write(context.Background(), req("k", 2, "y")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s2 := openT(t, path)
	if _, err := s2.Write(ctx, req("k", 2, "y")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Write with cancelled ctx: %v", err)
	}
	wantRecord(t, s2, "k", 1, "x")
}
