package store_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock/store"
)

var allKinds = []store.Kind{store.KindWAL, store.KindBolt}

// open opens the stores, failing the test if Open fails or blocks.
func open(t *testing.T, dir string, kind store.Kind) *store.Stores {
	t.Helper()
	s, err := tryOpen(t, dir, kind)
	if err != nil {
		t.Fatalf("Open(%s, %s): %v", dir, kind, err)
	}
	return s
}

// tryOpen calls Open, failing the test rather than hanging it if Open blocks
// (for example on a file lock a previous Close failed to release).
func tryOpen(t *testing.T, dir string, kind store.Kind) (*store.Stores, error) {
	t.Helper()
	type result struct {
		s   *store.Stores
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := store.Open(dir, kind)
		ch <- result{s, err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-time.After(10 * time.Second):
		t.Fatalf("Open(%s, %s) still blocked after 10s", dir, kind)
		return nil, nil
	}
}

func testLog(i uint64) *raft.Log {
	return &raft.Log{
		Index:      i,
		Term:       1 + i/10,
		Type:       raft.LogCommand,
		Data:       []byte(fmt.Sprintf("command-%d", i)),
		Extensions: []byte{byte(i)},
		AppendedAt: time.Unix(1700000000, int64(i)).UTC(),
	}
}

// checkLogs checks that s holds exactly entries first..last, entry i
// being testLog(i), and nothing after last.
func checkLogs(t *testing.T, s *store.Stores, first, last uint64) {
	t.Helper()
	checkEntries(t, s, first, last, testLog)
}

// checkEntries checks that s holds exactly entries first..last, entry i
// being want(i), and nothing after last.
func checkEntries(t *testing.T, s *store.Stores, first, last uint64, want func(uint64) *raft.Log) {
	t.Helper()
	if got, err := s.Log.FirstIndex(); err != nil || got != first {
		t.Fatalf("FirstIndex = %d, %v; want %d", got, err, first)
	}
	if got, err := s.Log.LastIndex(); err != nil || got != last {
		t.Fatalf("LastIndex = %d, %v; want %d", got, err, last)
	}
	for i := first; i <= last; i++ {
		var got raft.Log
		if err := s.Log.GetLog(i, &got); err != nil {
			t.Fatalf("GetLog(%d): %v", i, err)
		}
		if w := want(i); !sameLog(&got, w) {
			t.Fatalf("GetLog(%d) = %+v, want %+v", i, got, *w)
		}
	}
	var l raft.Log
	if err := s.Log.GetLog(last+1, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog(%d) past the last index: %v, want raft.ErrLogNotFound (a truncated entry came back?)", last+1, err)
	}
}

// Everything written before Close is there after re-opening the same dir,
// and the re-opened store accepts further writes that also persist.
func TestReopenKeepsData(t *testing.T) {
	for _, kind := range allKinds {
		t.Run(string(kind), func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, kind)
			var logs []*raft.Log
			for i := uint64(1); i <= 100; i++ {
				logs = append(logs, testLog(i))
			}
			if err := s.Log.StoreLogs(logs[:60]); err != nil {
				t.Fatal(err)
			}
			for _, l := range logs[60:] {
				if err := s.Log.StoreLog(l); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Stable.Set([]byte("LastVoteCand"), []byte("node2")); err != nil {
				t.Fatal(err)
			}
			if err := s.Stable.SetUint64([]byte("CurrentTerm"), 42); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}

			s = open(t, dir, kind)
			checkLogs(t, s, 1, 100)
			if v, err := s.Stable.Get([]byte("LastVoteCand")); err != nil || string(v) != "node2" {
				t.Fatalf("Get(LastVoteCand) = %q, %v; want node2", v, err)
			}
			if v, err := s.Stable.GetUint64([]byte("CurrentTerm")); err != nil || v != 42 {
				t.Fatalf("GetUint64(CurrentTerm) = %d, %v; want 42", v, err)
			}
			// Overwrite, append, and drop a prefix as raft's compaction does.
			if err := s.Stable.SetUint64([]byte("CurrentTerm"), 43); err != nil {
				t.Fatal(err)
			}
			if err := s.Log.StoreLog(testLog(101)); err != nil {
				t.Fatal(err)
			}
			if err := s.Log.DeleteRange(1, 10); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}

			s = open(t, dir, kind)
			defer s.Close()
			checkLogs(t, s, 11, 101)
			if v, err := s.Stable.GetUint64([]byte("CurrentTerm")); err != nil || v != 43 {
				t.Fatalf("GetUint64(CurrentTerm) = %d, %v; want 43", v, err)
			}
		})
	}
}

// Each kind lives at its documented path and nowhere else in dir, beside
// the directory's lock file.
func TestLayout(t *testing.T) {
	want := map[store.Kind]string{store.KindWAL: "raft-wal", store.KindBolt: "raft.db"}
	for _, kind := range allKinds {
		t.Run(string(kind), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data", "node1") // created by Open
			s := open(t, dir, kind)
			defer s.Close()
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(ents) != 2 || ents[0].Name() != store.LockFileName || ents[1].Name() != want[kind] {
				t.Fatalf("%s contains %v, want only %s and %s", dir, ents, store.LockFileName, want[kind])
			}
		})
	}
}

// A missing stable key must read the way hashicorp/raft accepts: a zero
// value, or an error whose text is exactly "not found".
func TestMissingStableKey(t *testing.T) {
	for _, kind := range allKinds {
		t.Run(string(kind), func(t *testing.T) {
			s := open(t, t.TempDir(), kind)
			defer s.Close()
			if v, err := s.Stable.GetUint64([]byte("CurrentTerm")); err != nil && err.Error() != "not found" || err == nil && v != 0 {
				t.Fatalf("GetUint64(missing) = %d, %v", v, err)
			}
			if v, err := s.Stable.Get([]byte("LastVoteCand")); err != nil && err.Error() != "not found" || err == nil && len(v) != 0 {
				t.Fatalf("Get(missing) = %q, %v", v, err)
			}
		})
	}
}

// raft-wal cannot take gaps; raft only knows that if the store says so.
func TestWALIsMonotonic(t *testing.T) {
	s := open(t, t.TempDir(), store.KindWAL)
	defer s.Close()
	m, ok := s.Log.(raft.MonotonicLogStore)
	if !ok || !m.IsMonotonic() {
		t.Fatalf("wal Log %T does not report raft.MonotonicLogStore", s.Log)
	}
}

// A second Open of an open store fails promptly instead of sharing or
// waiting for the files; after Close it succeeds.
func TestOpenTwiceFails(t *testing.T) {
	for _, kind := range allKinds {
		t.Run(string(kind), func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, kind)
			start := time.Now()
			s2, err := tryOpen(t, dir, kind)
			if err == nil {
				s2.Close()
				s.Close()
				t.Fatal("second Open of an open store succeeded")
			}
			if !strings.Contains(err.Error(), "locked") {
				t.Errorf("error %q does not say the store is locked", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("second Open took %v to fail", d)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			open(t, dir, kind).Close()
		})
	}
}

func TestOpenNotADirectory(t *testing.T) {
	for _, kind := range allKinds {
		t.Run(string(kind), func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := store.Open(file, kind)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%s) on a regular file succeeded", file)
			}
			if !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "not a directory") {
				t.Fatalf("Open on a regular file: error %q should name %s and say it is not a directory", err, file)
			}
			if b, _ := os.ReadFile(file); string(b) != "x" {
				t.Fatalf("Open changed the file to %q", b)
			}
		})
	}
}

// The store's own path occupied by the wrong type of file is an error too.
func TestOpenStorePathWrongType(t *testing.T) {
	for kind, want := range map[store.Kind]string{store.KindWAL: "not a directory", store.KindBolt: "not a regular file"} {
		dir := t.TempDir()
		var err error
		if kind == store.KindWAL {
			err = os.WriteFile(filepath.Join(dir, "raft-wal"), nil, 0o600)
		} else {
			err = os.Mkdir(filepath.Join(dir, "raft.db"), 0o700)
		}
		if err != nil {
			t.Fatal(err)
		}
		s, err := store.Open(dir, kind)
		if err == nil {
			s.Close()
			t.Fatalf("Open(%s) succeeded over a wrong-type path", kind)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%s): error %q does not say %q", kind, err, want)
		}
	}
}

func TestParseKind(t *testing.T) {
	for _, k := range allKinds {
		got, err := store.ParseKind(string(k))
		if err != nil || got != k {
			t.Errorf("ParseKind(%q) = %q, %v", k, got, err)
		}
	}
	if _, err := store.ParseKind(string(store.Default)); err != nil {
		t.Errorf("Default %q does not parse: %v", store.Default, err)
	}
	for _, s := range []string{"", "boltdb", "raft-wal", "WAL ", "memory"} {
		k, err := store.ParseKind(s)
		if err == nil {
			t.Errorf("ParseKind(%q) = %q, want an error", s, k)
			continue
		}
		for _, want := range []string{fmt.Sprintf("%q", s), "wal", "bolt"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("ParseKind(%q) error %q does not mention %s", s, err, want)
			}
		}
	}
	if s, err := store.Open(t.TempDir(), "memory"); err == nil {
		s.Close()
		t.Error("Open with an unknown kind succeeded")
	}
}

// A single Raft node restarted on the same stores finds its state and
// replays every committed command, in order, into a fresh FSM.
func TestRaftRestart(t *testing.T) {
	for _, kind := range allKinds {
		t.Run(string(kind), func(t *testing.T) {
			dir := t.TempDir()
			const id, addr = raft.ServerID("node0"), raft.ServerAddress("node0")
			const commands = 20

			start := func(s *store.Stores) (*raft.Raft, *countFSM, *raft.Observer) {
				t.Helper()
				conf := raftConfig(id)
				conf.HeartbeatTimeout = 100 * time.Millisecond
				conf.ElectionTimeout = 100 * time.Millisecond
				conf.LeaderLeaseTimeout = 50 * time.Millisecond
				_, trans := raft.NewInmemTransport(addr)
				fsm := newCountFSM()
				r, err := raft.NewRaft(conf, fsm, s.Log, s.Stable, raft.NewInmemSnapshotStore(), trans)
				if err != nil {
					t.Fatal(err)
				}
				obs := make(chan raft.Observation, 64)
				o := leaderObserver(obs)
				r.RegisterObserver(o)
				if first, _ := s.Log.LastIndex(); first == 0 {
					cfg := raft.Configuration{Servers: []raft.Server{{ID: id, Address: addr}}}
					if err := r.BootstrapCluster(cfg).Error(); err != nil {
						t.Fatal(err)
					}
				}
				waitLeader(t, []*raft.Raft{r}, obs, 10*time.Second)
				return r, fsm, o
			}
			stop := func(r *raft.Raft, o *raft.Observer, s *store.Stores) {
				t.Helper()
				r.DeregisterObserver(o)
				if err := r.Shutdown().Error(); err != nil {
					t.Fatal(err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}

			s := open(t, dir, kind)
			r, fsm, o := start(s)
			for i := range commands {
				if err := r.Apply([]byte(fmt.Sprintf("cmd-%d", i)), 5*time.Second).Error(); err != nil {
					t.Fatal(err)
				}
			}
			term := r.CurrentTerm()
			stop(r, o, s)
			if n := fsm.n.Load(); n != commands {
				t.Fatalf("first run applied %d commands, want %d", n, commands)
			}

			s = open(t, dir, kind)
			if ok, err := raft.HasExistingState(s.Log, s.Stable, raft.NewInmemSnapshotStore()); err != nil || !ok {
				s.Close()
				t.Fatalf("HasExistingState after restart = %v, %v; want true", ok, err)
			}
			r, fsm, o = start(s)
			defer stop(r, o, s)
			if err := r.Barrier(5 * time.Second).Error(); err != nil {
				t.Fatal(err)
			}
			if n := fsm.n.Load(); n != commands {
				t.Fatalf("after restart the FSM replayed %d commands, want %d", n, commands)
			}
			if last := fsm.last.Load(); last == nil || string(*last) != fmt.Sprintf("cmd-%d", commands-1) {
				t.Fatalf("last replayed command = %v, want cmd-%d", last, commands-1)
			}
			if got := r.CurrentTerm(); got <= term {
				t.Fatalf("term after restart = %d, want > %d (the persisted term)", got, term)
			}
		})
	}
}

// The benchmark's three-node cluster replicates through every node's store.
func TestClusterReplicates(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	for _, kind := range allKinds {
		t.Run(string(kind), func(t *testing.T) {
			c := startCluster(t, kind, 3)
			const commands = 50
			for i := range commands {
				if err := c.leader.Apply([]byte(fmt.Sprintf("cmd-%d", i)), 5*time.Second).Error(); err != nil {
					t.Fatal(err)
				}
			}
			for i, f := range c.fsms {
				f.waitApplied(t, commands, 10*time.Second)
				if last := f.last.Load(); string(*last) != fmt.Sprintf("cmd-%d", commands-1) {
					t.Errorf("node%d last command %q", i, *last)
				}
			}
		})
	}
}
