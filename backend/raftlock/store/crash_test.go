package store_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock/store"
)

// Crash tests in the manner of ALICE (Pillai et al., OSDI 2014; raft-wal
// ships such a workload in alice/): a child process — this test binary,
// re-executed — writes to a store and reports on stdout each step it has
// finished; the parent kills it with SIGKILL at a chosen step, reopens the
// directory and checks what a crash may and may not leave. A killed
// process loses nothing the kernel has accepted, so these cover the
// store's own recovery (torn batches, half-done seals and truncations),
// not a power cut's lost page cache.

// crashChildEnv carries a crashSpec to a re-executed test binary.
const crashChildEnv = "LOCKGATE_TEST_STORE_CRASH_CHILD"

// crashSpec is what a crash child does.
type crashSpec struct {
	Mode    string // "truncate", "seal" or "append"
	Dir     string
	Kind    store.Kind
	Segment int // raft-wal segment size; 0: the default
	// truncate: store 1..Entries (term 1) in batches of 10, delete
	// TruncateFrom..Entries, append Reappend entries of term 2.
	// seal: store 1..StopAfter one per call, then SIGKILL itself at once,
	// before raft-wal's background rotation has had much of a chance.
	Entries, TruncateFrom, Reappend, StopAfter uint64
	Seed                                       uint64 // append: batch sizes
}

// Child output lines: "begin N" before a StoreLogs whose last entry is N,
// "ack N" after it returned, "trunc N" after a DeleteRange left N last,
// "ready" when the child waits to be killed.

func TestMain(m *testing.M) {
	if spec := os.Getenv(crashChildEnv); spec != "" {
		if err := crashChild(spec); err != nil {
			fmt.Fprintln(os.Stderr, "crash child:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// maxAppendBatch bounds the batches the append child stores in one call.
const maxAppendBatch = 8

func crashChild(specJSON string) error {
	var sp crashSpec
	if err := json.Unmarshal([]byte(specJSON), &sp); err != nil {
		return err
	}
	if sp.Segment > 0 {
		store.SetWALSegmentSize(sp.Segment)
	}
	s, err := store.Open(sp.Dir, sp.Kind)
	if err != nil {
		return err
	}
	// Never closed: the process is killed.
	say := func(format string, args ...any) {
		// os.Stdout is unbuffered: the line is in the pipe before the
		// child takes its next step.
		fmt.Fprintf(os.Stdout, format+"\n", args...)
	}
	store1 := func(logs []*raft.Log) error {
		last := logs[len(logs)-1].Index
		say("begin %d", last)
		if err := s.Log.StoreLogs(logs); err != nil {
			return err
		}
		say("ack %d", last)
		return nil
	}
	switch sp.Mode {
	case "truncate":
		var logs []*raft.Log
		for i := uint64(1); i <= sp.Entries; i++ {
			if logs = append(logs, termLog(i, 1)); len(logs) == 10 || i == sp.Entries {
				if err := store1(logs); err != nil {
					return err
				}
				logs = nil
			}
		}
		if err := s.Log.DeleteRange(sp.TruncateFrom, sp.Entries); err != nil {
			return err
		}
		say("trunc %d", sp.TruncateFrom-1)
		for i := sp.TruncateFrom; i < sp.TruncateFrom+sp.Reappend; i++ {
			if err := store1([]*raft.Log{termLog(i, 2)}); err != nil {
				return err
			}
		}
	case "seal":
		for i := uint64(1); i <= sp.StopAfter; i++ {
			if err := store1([]*raft.Log{termLog(i, 1)}); err != nil {
				return err
			}
		}
		return syscall.Kill(os.Getpid(), syscall.SIGKILL)
	case "append":
		last, err := s.Log.LastIndex()
		if err != nil {
			return err
		}
		rng := rand.New(rand.NewPCG(sp.Seed, last))
		for next := last + 1; ; {
			var logs []*raft.Log
			for range 1 + rng.IntN(maxAppendBatch) {
				logs = append(logs, termLog(next, 1))
				next++
			}
			if err := store1(logs); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unknown mode %q", sp.Mode)
	}
	say("ready")
	select {} // until killed
}

// childLog is what a killed child reported.
type childLog struct {
	acked, begun uint64 // highest index acknowledged / handed to StoreLogs
	truncated    bool
	lines        int
}

// runCrashChild starts a child with sp, SIGKILLs it as soon as killAt
// returns true for the report so far (or when it says "ready" if killAt is
// nil; a "seal" child kills itself), reads whatever else it had written
// and returns the report.
func runCrashChild(t *testing.T, sp crashSpec, killAt func(childLog) bool) childLog {
	t.Helper()
	spec, err := json.Marshal(sp)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), crashChildEnv+"="+string(spec))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var rep childLog
	killed := sp.Mode == "seal"
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		word, num, _ := strings.Cut(sc.Text(), " ")
		n, _ := strconv.ParseUint(num, 10, 64)
		rep.lines++
		switch word {
		case "begin":
			rep.begun = n
		case "ack":
			rep.acked = n
		case "trunc":
			rep.truncated = true
		}
		if !killed && (killAt == nil && word == "ready" || killAt != nil && killAt(rep)) {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true // and read on: lines already in the pipe count
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("crash child %s ended before it was killed: %v; stderr:\n%s", sp.Mode, err, stderr.String())
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("crash child %s did not die of SIGKILL: %v; stderr:\n%s", sp.Mode, err, stderr.String())
	}
	return rep
}

// walSegments counts raft-wal's segment files in a data directory.
func walSegments(t *testing.T, dir string) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "raft-wal", "*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

// reopenAfterCrash opens dir as the restarted node would.
func reopenAfterCrash(t *testing.T, dir string, kind store.Kind) *store.Stores {
	t.Helper()
	s, err := tryOpen(t, dir, kind)
	if err != nil {
		t.Fatalf("%s: reopen after SIGKILL: %v", kind, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A crash right after a tail truncation, and right after the first append
// that followed it, leaves the truncated entries gone and the new ones
// there; the store then takes further appends across a restart.
func TestCrashAfterTailTruncation(t *testing.T) {
	for _, kind := range []store.Kind{store.KindWAL, store.KindBolt} {
		for _, seg := range segmentSizes {
			if kind == store.KindBolt && seg.size > 0 {
				continue // segments are raft-wal's
			}
			for _, reappend := range []uint64{0, 1, 5} {
				t.Run(fmt.Sprintf("%s/%s/reappend-%d", kind, seg.name, reappend), func(t *testing.T) {
					dir := t.TempDir()
					sp := crashSpec{Mode: "truncate", Dir: dir, Kind: kind, Segment: seg.size,
						Entries: 200, TruncateFrom: 150, Reappend: reappend}
					rep := runCrashChild(t, sp, nil)
					if !rep.truncated {
						t.Fatalf("child killed before its truncation: %+v", rep)
					}
					if seg.size > 0 && walSegments(t, dir) < 2 {
						t.Fatalf("%d segment(s): the test did not seal any", walSegments(t, dir))
					}
					withSegmentSize(t, seg.size)
					s := reopenAfterCrash(t, dir, kind)
					last := uint64(149) + reappend
					termOf := func(i uint64) uint64 {
						if i >= 150 {
							return 2
						}
						return 1
					}
					checkTerms(t, s, 1, last, termOf)
					storeRange(t, s, last+1, last+20, 3, 4)
					if err := s.Close(); err != nil {
						t.Fatal(err)
					}
					s = open(t, dir, kind)
					defer s.Close()
					checkTerms(t, s, 1, last+20, func(i uint64) uint64 {
						if i > last {
							return 3
						}
						return termOf(i)
					})
				})
			}
		}
	}
}

// Crashes around raft-wal's first segment seal: killed right after the
// append before the one that sealed, right after the sealing one (while
// the background rotation may still run), and after the rotation. Every
// acknowledged entry is there, and appends go on across restarts. Without
// completeInterruptedRotation, raft-wal v0.4.2 reopens a sealed tail and
// refuses every later append ("segment is sealed").
func TestCrashAfterSegmentSeal(t *testing.T) {
	withSegmentSize(t, smallSegment)
	// Find, without a crash, the first append after which a second
	// segment file exists. raft-wal seals a segment in the append that
	// fills it and creates the next file in the background, so the append
	// that sealed is this one or the one before.
	probe := t.TempDir()
	s := open(t, probe, store.KindWAL)
	var rotated uint64
	for i := uint64(1); rotated == 0; i++ {
		if i > 10_000 {
			t.Fatalf("no second segment after %d entries of a %d-byte segment", i, smallSegment)
		}
		if err := s.Log.StoreLogs([]*raft.Log{termLog(i, 1)}); err != nil {
			t.Fatal(err)
		}
		if walSegments(t, probe) >= 2 {
			rotated = i
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, killAfter := range []uint64{rotated - 2, rotated - 1, rotated, rotated + 1} {
		t.Run(fmt.Sprintf("ack-%d-of-%d", killAfter, rotated), func(t *testing.T) {
			dir := t.TempDir()
			sp := crashSpec{Mode: "seal", Dir: dir, Kind: store.KindWAL, Segment: smallSegment, StopAfter: killAfter}
			rep := runCrashChild(t, sp, nil)
			if rep.acked != killAfter {
				t.Fatalf("child acknowledged %d entries, want %d", rep.acked, killAfter)
			}
			s := reopenAfterCrash(t, dir, store.KindWAL)
			last, err := s.Log.LastIndex()
			if err != nil {
				t.Fatal(err)
			}
			if last != killAfter {
				t.Fatalf("after SIGKILL: last index %d, want the %d acknowledged", last, killAfter)
			}
			checkTerms(t, s, 1, last, func(uint64) uint64 { return 1 })
			// Fill the next segment and seal it too, then restart.
			storeRange(t, s, last+1, last+2*rotated, 1, 1)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = open(t, dir, store.KindWAL)
			defer s.Close()
			if n := walSegments(t, dir); n < 3 {
				t.Fatalf("%d segments after %d entries: the test did not seal twice", n, last+2*rotated)
			}
			checkTerms(t, s, 1, last+2*rotated, func(uint64) uint64 { return 1 })
		})
	}
}

// crashRounds is how many times TestCrashMidAppend kills the appender.
const crashRounds = 4

// A child appends batches of 1..maxAppendBatch entries in a loop and is
// killed in the middle of it, crashRounds times on the same directory.
// After each kill the log is exactly what the child wrote, in order, up to
// its last acknowledged batch or the batch in flight, never a part of a
// batch; then the next round appends on.
func TestCrashMidAppend(t *testing.T) {
	for _, kind := range []store.Kind{store.KindWAL, store.KindBolt} {
		t.Run(string(kind), func(t *testing.T) {
			dir := t.TempDir()
			withSegmentSize(t, smallSegment)
			var last uint64
			for round := range crashRounds {
				target := last + 150 + uint64(round*37) // kill points differ per round
				sp := crashSpec{Mode: "append", Dir: dir, Kind: kind, Segment: smallSegment, Seed: uint64(round)}
				rep := runCrashChild(t, sp, func(r childLog) bool { return r.acked >= target })
				s, err := tryOpen(t, dir, kind)
				if err != nil {
					t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
				}
				got, err := s.Log.LastIndex()
				if err != nil {
					t.Fatal(err)
				}
				if got != rep.acked && got != rep.begun {
					s.Close()
					t.Fatalf("round %d: last index %d after SIGKILL; want the last acknowledged batch's %d or the batch in flight's %d",
						round, got, rep.acked, rep.begun)
				}
				for i := uint64(1); i <= got; i++ {
					var l raft.Log
					if err := s.Log.GetLog(i, &l); err != nil || !sameLog(&l, termLog(i, 1)) {
						s.Close()
						t.Fatalf("round %d: entry %d = %+v, %v; want what the child wrote", round, i, l, err)
					}
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				last = got
			}
			if kind == store.KindWAL && walSegments(t, dir) < 2 {
				t.Fatalf("%d segment(s) after %d entries: no seal happened", walSegments(t, dir), last)
			}
		})
	}
}
