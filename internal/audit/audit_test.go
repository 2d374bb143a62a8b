package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fixedNow is a clock at a set instant, outside UTC and with nanoseconds
// that end in zeros, to check that the time is written in UTC at fixed
// width.
func fixedNow() time.Time {
	return time.Date(2025, 3, 4, 7, 8, 9, 120000000, time.FixedZone("X", 2*3600))
}

func openT(t *testing.T, opts Options) (*Log, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, path
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("%s does not end with a newline: %q", path, b)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func TestLineFormat(t *testing.T) {
	l, path := openT(t, Options{Node: "n1", Now: fixedNow})
	l.Record(Event{
		Identity:     "alice",
		Remote:       "10.0.0.7:51234",
		Op:           OpGrant,
		Keys:         []string{"orders/42", "a\nb"},
		FencingToken: 17,
		Result:       ResultOK,
		Detail:       "ttl 5s",
	})
	l.Record(Event{Node: "n2", Op: OpSessionExpire, Identity: "bob", Result: ResultOK,
		Time: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)})
	l.Record(Event{Op: OpGrant, Identity: "eve", Keys: []string{"x"}, Result: "forbidden"})
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3: %q", len(lines), lines)
	}

	var m map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
		t.Fatalf("line 1 is not JSON: %v: %s", err, lines[0])
	}
	want := map[string]any{
		"time":          "2025-03-04T05:08:09.120000000Z",
		"node":          "n1",
		"identity":      "alice",
		"remote":        "10.0.0.7:51234",
		"op":            "grant",
		"keys":          []any{"orders/42", "a\nb"},
		"fencing_token": float64(17),
		"result":        "ok",
		"detail":        "ttl 5s",
	}
	if fmt.Sprint(m) != fmt.Sprint(want) {
		t.Errorf("line 1 = %v\nwant     %v", m, want)
	}

	// Empty optional fields are omitted; keys and identity are not.
	m = nil
	if err := json.Unmarshal([]byte(lines[1]), &m); err != nil {
		t.Fatalf("line 2 is not JSON: %v: %s", err, lines[1])
	}
	want = map[string]any{
		"time":     "2025-01-02T03:04:05.000000006Z",
		"node":     "n2",
		"identity": "bob",
		"op":       "session_expire",
		"keys":     []any{},
		"result":   "ok",
	}
	if fmt.Sprint(m) != fmt.Sprint(want) {
		t.Errorf("line 2 = %v\nwant     %v", m, want)
	}

	evs, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 {
		t.Fatalf("ReadFile: %d events, want 3", len(evs))
	}
	if !evs[0].Time.Equal(fixedNow()) || evs[0].FencingToken != 17 || evs[0].Keys[1] != "a\nb" || evs[0].Remote != "10.0.0.7:51234" {
		t.Errorf("ReadFile event 1 = %+v", evs[0])
	}
	if evs[2].Op != OpGrant || evs[2].Result != "forbidden" || evs[2].Node != "n1" {
		t.Errorf("ReadFile event 3 = %+v", evs[2])
	}
	if st := l.Stats(); st.Written != 3 || st.Dropped != 0 || st.Errors != 0 {
		t.Errorf("Stats = %+v, want 3 written", st)
	}
}

func TestOps(t *testing.T) {
	names := []string{"grant", "release", "expire", "force_release", "session_open", "session_close",
		"session_expire", "member_add", "member_remove", "snapshot", "policy_reload"}
	var got []string
	for _, o := range Ops() {
		if !o.Valid() {
			t.Errorf("%q not Valid", o)
		}
		got = append(got, string(o))
	}
	if !slices.Equal(got, names) {
		t.Errorf("Ops = %q, want %q", got, names)
	}
	if Op("refused").Valid() || Op("").Valid() {
		t.Error("an unknown op is Valid")
	}
}

func TestFlushesWhenQueueEmpties(t *testing.T) {
	idle := make(chan struct{}, 1)
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := open(path, Options{}, hooks{idle: func() { idle <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Record(Event{Op: OpGrant, Result: ResultOK})
	<-idle
	// No Flush: the writer flushed by itself once the queue was empty.
	if lines := readLines(t, path); len(lines) != 1 || !strings.Contains(lines[0], `"op":"grant"`) {
		t.Errorf("file = %q: the event is still buffered after the queue emptied", lines)
	}
	if l.Written() != 1 {
		t.Errorf("Written = %d, want 1", l.Written())
	}
}

func TestRotation(t *testing.T) {
	const maxBytes, maxFiles, n = 400, 3, 60
	l, path := openT(t, Options{MaxBytes: maxBytes, MaxFiles: maxFiles, Node: "n1", Now: fixedNow})
	for i := range n {
		// Lines of varying length, none longer than maxBytes.
		l.Record(Event{Op: OpRelease, Identity: "alice", Keys: []string{strings.Repeat("k", i%7*10)}, Result: ResultOK, Detail: fmt.Sprint("seq ", i)})
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fmt.Sprintf("%s.%d", path, maxFiles+1)); !os.IsNotExist(err) {
		t.Errorf("%s.%d exists (err %v): more than MaxFiles rotated files kept", path, maxFiles+1, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != maxFiles+1 {
		t.Errorf("%d files in the directory, want %d", len(entries), maxFiles+1)
	}

	// Oldest first: path.3, path.2, path.1, path. Each file holds whole
	// lines, stays within maxBytes, and was rotated only when the next
	// line would not fit; together they hold the newest events in order.
	names := []string{}
	for i := maxFiles; i >= 1; i-- {
		names = append(names, fmt.Sprintf("%s.%d", path, i))
	}
	names = append(names, path)
	var seqs []int
	var prevSize int64 = -1
	for _, name := range names {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", name, fi.Mode().Perm())
		}
		if fi.Size() > maxBytes {
			t.Errorf("%s is %d bytes, more than MaxBytes %d", name, fi.Size(), maxBytes)
		}
		lines := readLines(t, name) // fails on a split line (no final newline)
		if prevSize >= 0 && prevSize+int64(len(lines[0])+1) <= maxBytes {
			t.Errorf("rotated at %d bytes although the next line (%d bytes) fitted", prevSize, len(lines[0])+1)
		}
		prevSize = fi.Size()
		evs, err := ReadFile(name)
		if err != nil {
			t.Fatalf("%v (a split line?)", err)
		}
		for _, e := range evs {
			var s int
			fmt.Sscanf(e.Detail, "seq %d", &s)
			seqs = append(seqs, s)
		}
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("events across files are not consecutive: %v", seqs)
		}
	}
	if seqs[len(seqs)-1] != n-1 {
		t.Errorf("the newest event is %d, want %d", seqs[len(seqs)-1], n-1)
	}
	if st := l.Stats(); st.Written != n || st.Rotations < maxFiles+1 {
		t.Errorf("Stats = %+v, want %d written and at least %d rotations", st, n, maxFiles+1)
	}
}

func TestRotationLongLine(t *testing.T) {
	l, path := openT(t, Options{MaxBytes: 100, MaxFiles: 2})
	l.Record(Event{Op: OpGrant, Result: ResultOK, Detail: "short"})
	l.Record(Event{Op: OpGrant, Result: ResultOK, Detail: strings.Repeat("y", 300)})
	l.Record(Event{Op: OpGrant, Result: ResultOK, Detail: "after"})
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{path + ".2": "short", path + ".1": strings.Repeat("y", 300), path: "after"} {
		evs, err := ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 1 || evs[0].Detail != want {
			t.Errorf("%s holds %+v, want the one event %.10q…", name, evs, want)
		}
	}
}

func TestAppendsToExistingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	// A torn last line, as a crash mid-write leaves.
	if err := os.WriteFile(path, []byte(`{"time":"2025-01-01T00:00:00Z","op":"grant"}`+"\n"+`{"time":"20`), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.Record(Event{Op: OpRelease, Result: ResultOK})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != 3 || lines[1] != `{"time":"20` || !strings.Contains(lines[2], `"op":"release"`) {
		t.Fatalf("file = %q: want the old lines kept and the new event on a line of its own", lines)
	}
}

func TestConcurrentRecordLosesNothing(t *testing.T) {
	const goroutines, each = 16, 150
	// A small queue, so that Records find it full and wait.
	l, path := openT(t, Options{QueueSize: 8, FullWait: time.Minute})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				l.Record(Event{Op: OpGrant, Identity: fmt.Sprint("g", g), Keys: []string{fmt.Sprint("k", i)}, Result: ResultOK})
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	evs, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range evs {
		seen[e.Identity+"/"+e.Keys[0]] = true
	}
	if len(evs) != goroutines*each || len(seen) != goroutines*each {
		t.Errorf("%d lines, %d distinct events; want %d", len(evs), len(seen), goroutines*each)
	}
	if st := l.Stats(); st.Written != goroutines*each || st.Dropped != 0 {
		t.Errorf("Stats = %+v", st)
	}
}

// stalled opens a Log whose writer blocks before its first write until
// release is called, and records that first event: when stalled returns,
// the writer holds it and the queue is empty.
func stalled(t *testing.T, opts Options) (l *Log, path string, release func()) {
	t.Helper()
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	path = filepath.Join(t.TempDir(), "audit.log")
	l, err := open(path, opts, hooks{beforeWrite: func() {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-gate
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { release(); l.Close() })
	l.Record(Event{Op: OpGrant, Result: ResultOK, Detail: "first"})
	<-entered
	return l, path, release
}

func TestFullQueueWaits(t *testing.T) {
	l, path, release := stalled(t, Options{QueueSize: 2, FullWait: time.Minute})
	for range 2 { // queued behind the one the stalled writer holds
		l.Record(Event{Op: OpGrant, Result: ResultOK})
	}
	// The queue is full: this Record must wait for the writer (released
	// later) rather than drop.
	time.AfterFunc(20*time.Millisecond, release)
	l.Record(Event{Op: OpGrant, Result: ResultOK, Detail: "waited"})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Dropped != 0 || st.Written != 4 {
		t.Errorf("Stats = %+v, want 4 written, none dropped", st)
	}
	if lines := readLines(t, path); len(lines) != 4 || !strings.Contains(lines[3], "waited") {
		t.Errorf("file = %q", lines)
	}
}

func TestFullQueueDropsAfterFullWait(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil))
	l, path, release := stalled(t, Options{QueueSize: 2, FullWait: 10 * time.Millisecond, Logger: logger})
	for range 2 {
		l.Record(Event{Op: OpGrant, Result: ResultOK})
	}
	l.Record(Event{Op: OpGrant, Result: ResultOK, Detail: "dropped after waiting"})
	if got := l.Dropped(); got != 1 {
		t.Fatalf("Dropped = %d after FullWait on a full queue, want 1", got)
	}
	// Shedding: until the writer empties the queue, Records on the full
	// queue drop at once. Were they to wait, they would wait an hour.
	l.fullWait = time.Hour
	shed := make(chan struct{})
	go func() {
		defer close(shed)
		for range 50 {
			l.Record(Event{Op: OpGrant, Result: ResultOK, Detail: "dropped at once"})
		}
	}()
	select {
	case <-shed:
	case <-time.After(10 * time.Second):
		t.Fatal("Records on a full queue wait after one has given up: no shedding")
	}
	if got := l.Dropped(); got != 51 {
		t.Errorf("Dropped = %d, want 51", got)
	}
	release()
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	// The writer caught up: Records are written again.
	l.Record(Event{Op: OpRelease, Result: ResultOK})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Written != 4 || st.Dropped != 51 {
		t.Errorf("Stats = %+v, want 4 written, 51 dropped", st)
	}
	if lines := readLines(t, path); len(lines) != 4 || strings.Contains(strings.Join(lines, ""), "dropped") {
		t.Errorf("file = %q", lines)
	}
	if n := strings.Count(logs.String(), "queue full"); n != 1 {
		t.Errorf("logged the full queue %d times, want once:\n%s", n, logs.String())
	}
}

func TestCloseDrains(t *testing.T) {
	l, path, release := stalled(t, Options{})
	const n = 500 // the first, then n-1 more
	for i := 1; i < n; i++ {
		l.Record(Event{Op: OpGrant, Result: ResultOK, FencingToken: uint64(i + 1)})
	}
	// Close while the writer has yet to write any of them.
	time.AfterFunc(10*time.Millisecond, release)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	evs, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != n || evs[n-1].FencingToken != n {
		t.Fatalf("%d events on disk after Close, want %d", len(evs), n)
	}

	// After Close: Record, Flush and Close do nothing.
	l.Record(Event{Op: OpGrant, Result: ResultOK})
	if err := l.Flush(); err != nil {
		t.Errorf("Flush after Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close again: %v", err)
	}
	if st := l.Stats(); st.Written != n || st.Dropped != 0 {
		t.Errorf("Stats = %+v after Close", st)
	}
	if lines := readLines(t, path); len(lines) != n {
		t.Errorf("%d lines after a Record past Close, want %d", len(lines), n)
	}
}

func TestCloseRacesRecord(t *testing.T) {
	l, path := openT(t, Options{QueueSize: 4})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				l.Record(Event{Op: OpGrant, Result: ResultOK})
			}
		})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	st := l.Stats()
	lines := readLines(t, path)
	if lines[0] == "" {
		lines = nil
	}
	if uint64(len(lines)) != st.Written || st.Dropped != 0 {
		t.Errorf("%d lines, Stats %+v: every event Record accepted must be written", len(lines), st)
	}
}

func TestNilLog(t *testing.T) {
	var l *Log
	l.Record(Event{Op: OpGrant})
	if err := l.Flush(); err != nil {
		t.Error(err)
	}
	if err := l.Close(); err != nil {
		t.Error(err)
	}
	if l.Stats() != (Stats{}) || l.Written() != 0 || l.Dropped() != 0 || l.Errors() != 0 || l.Path() != "" {
		t.Error("a nil Log has counters")
	}
}

func TestHexDetailBlanked(t *testing.T) {
	l, path := openT(t, Options{})
	hex32 := "0123456789abcdef0123456789abcdef"
	hex64 := hex32 + hex32
	blanked := []string{
		hex32,
		hex64,
		"released handle " + hex32 + " by admin",
		"session=" + hex64,
		"h_" + hex32 + "\n",
		strings.Repeat("x", MaxDetail-8) + " " + hex32, // cut would shorten the handle
	}
	kept := []string{
		"",
		"ttl 5s",
		hex32[:31],                   // too short to be a handle
		strings.ToUpper(hex32),       // not lowercase
		hex64 + "0",                  // 65: longer than any handle
		"cluster " + hex32[:16],      // a short id
		"deadbeef deadbeef deadbeef", // runs broken by spaces
	}
	for _, d := range append(append([]string{}, blanked...), kept...) {
		l.Record(Event{Op: OpForceRelease, Result: ResultOK, Detail: d})
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	evs, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		want := ""
		if i >= len(blanked) {
			want = kept[i-len(blanked)]
		}
		if e.Detail != want {
			t.Errorf("detail %d = %q, want %q", i, e.Detail, want)
		}
	}
	if got := l.Stats().Redacted; got != uint64(len(blanked)) {
		t.Errorf("Redacted = %d, want %d", got, len(blanked))
	}
}

func TestDetailCut(t *testing.T) {
	l, path := openT(t, Options{})
	l.Record(Event{Op: OpSnapshot, Result: ResultOK, Detail: strings.Repeat("é", MaxDetail)}) // 2 bytes each
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	evs, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := evs[0].Detail; d != strings.Repeat("é", MaxDetail/2) {
		t.Errorf("detail of %d bytes, want %d bytes of whole runes", len(d), MaxDetail)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope", "audit.log")
	_, err := Open(missing, Options{})
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Open in a missing directory: %v; want an error naming %s", err, missing)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	underFile := filepath.Join(file, "audit.log")
	if _, err := Open(underFile, Options{}); err == nil || !strings.Contains(err.Error(), underFile) {
		t.Errorf("Open under a file: %v", err)
	}
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("Open of a directory: %v", err)
	}
	if _, err := Open(filepath.Join(dir, "a.log"), Options{MaxFiles: -1}); err == nil {
		t.Error("Open with negative MaxFiles succeeded")
	}
}

func TestWriteErrorCountedAndLoggedOnce(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil))
	l, err := Open("/dev/full", Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 3 {
		l.Record(Event{Op: OpGrant, Result: ResultOK})
		if err := l.Flush(); err == nil || !strings.Contains(err.Error(), "/dev/full") {
			t.Errorf("Flush = %v, want the write error", err)
		}
	}
	if st := l.Stats(); st.Written != 0 || st.Dropped != 3 || st.Errors != 3 {
		t.Errorf("Stats = %+v, want 3 dropped on 3 errors", st)
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 {
		t.Errorf("%d error lines logged, want 1:\n%s", n, logs.String())
	}
}

func TestReadRejectsBadLine(t *testing.T) {
	in := `{"time":"2025-01-01T00:00:00.000000000Z","op":"grant","keys":[],"result":"ok"}` + "\n\n" + "not json\n"
	evs, err := Read(strings.NewReader(in))
	if err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("Read = %v, want an error on line 3", err)
	}
	if len(evs) != 1 || evs[0].Op != OpGrant {
		t.Errorf("events before the bad line = %+v", evs)
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
