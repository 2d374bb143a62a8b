package store_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockgate/lockgate/backend/raftlock/store"
)

// KindAuto keeps the kind a data directory holds — an earlier release's
// bolt directory stays bolt, with its log — and gives a new one Default,
// saying which and why.
func TestAutoKind(t *testing.T) {
	if store.Default != store.KindWAL {
		t.Fatalf("Default = %s, want wal", store.Default)
	}
	if k, err := store.ParseKind("auto"); err != nil || k != store.KindAuto {
		t.Fatalf(`ParseKind("auto") = %q, %v`, k, err)
	}
	t.Run("new", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "node1")
		s := open(t, dir, store.KindAuto)
		defer s.Close()
		if s.Kind != store.Default || !strings.Contains(s.Why, "no Raft log") {
			t.Fatalf("new directory: kind %s (%q), want %s because it holds no log", s.Kind, s.Why, store.Default)
		}
		if _, err := os.Stat(filepath.Join(dir, "raft-wal")); err != nil {
			t.Fatalf("new directory got no raft-wal: %v", err)
		}
	})
	for _, existing := range allKinds {
		t.Run("existing-"+string(existing), func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, existing)
			storeRange(t, s, 1, 30, 1, 10)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = open(t, dir, store.KindAuto)
			defer s.Close()
			file := map[store.Kind]string{store.KindWAL: "raft-wal", store.KindBolt: "raft.db"}[existing]
			if s.Kind != existing || !strings.Contains(s.Why, filepath.Join(dir, file)) {
				t.Fatalf("auto on a %s directory: kind %s (%q), want %s, naming %s", existing, s.Kind, s.Why, existing, file)
			}
			checkTerms(t, s, 1, 30, func(uint64) uint64 { return 1 })
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(ents) != 2 {
				t.Fatalf("auto on a %s directory left %v: the other kind's log was created beside it", existing, ents)
			}
		})
	}
	t.Run("explicit", func(t *testing.T) {
		s := open(t, t.TempDir(), store.KindBolt)
		defer s.Close()
		if s.Kind != store.KindBolt || !strings.Contains(s.Why, "asked for") {
			t.Fatalf("explicit bolt: kind %s (%q)", s.Kind, s.Why)
		}
	})
}

// An explicit kind that conflicts with the directory is refused, naming the
// file and the kinds that would work; auto refuses to pick between two logs.
func TestOtherKindRefused(t *testing.T) {
	for _, first := range allKinds {
		dir := t.TempDir()
		open(t, dir, first).Close()
		other := store.KindWAL
		if first == store.KindWAL {
			other = store.KindBolt
		}
		s, err := store.Open(dir, other)
		if err == nil {
			s.Close()
			t.Fatalf("--store %s on a %s directory opened", other, first)
		}
		if !errors.Is(err, store.ErrOtherKind) || !strings.Contains(err.Error(), "--store "+string(first)) ||
			!strings.Contains(err.Error(), "--store auto") {
			t.Fatalf("--store %s on a %s directory: %v; want ErrOtherKind naming --store %s and --store auto", other, first, err, first)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "raft.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "raft-wal"), 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(dir, store.KindAuto)
	if err == nil {
		s.Close()
		t.Fatal("auto on a directory with both logs opened")
	}
	if !errors.Is(err, store.ErrOtherKind) || !strings.Contains(err.Error(), "both") {
		t.Fatalf("auto on a directory with both logs: %v; want ErrOtherKind saying both", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "raft.db")); err != nil || fi.Size() != 0 {
		t.Fatalf("refused Open touched raft.db: %v, %v", fi, err)
	}
}
