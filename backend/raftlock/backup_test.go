package raftlock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/backend/raftlock/store"
	"github.com/lockgate/lockgate/lock"
)

// saveBackup takes a backup through the cluster at endpoints into a file
// and returns its path and contents, verified.
func saveBackup(t *testing.T, endpoints ...string) (string, *Backup) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var buf bytes.Buffer
	if _, err := (&MembershipClient{}).Backup(ctx, endpoints, &buf); err != nil {
		t.Fatalf("backup: %v", err)
	}
	bk, err := ParseBackup(buf.Bytes())
	if err != nil {
		t.Fatalf("the backup just taken does not verify: %v", err)
	}
	path := filepath.Join(t.TempDir(), "cluster.backup")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, bk
}

// restoredCluster restores the backup at path into a new cluster of ids
// on free loopback ports (each member's directory restored on its own, as
// on separate hosts), starts it without bootstrap or join, and waits for
// its leader.
func restoredCluster(t *testing.T, path string, ids ...string) (*LocalCluster, []*RestoreReport) {
	t.Helper()
	var members []RestoreMember
	for _, id := range ids {
		members = append(members, RestoreMember{ID: id, RaftAddr: "127.0.0.1:" + freePort(t), APIAddr: "127.0.0.1:" + freePort(t)})
	}
	root := t.TempDir()
	var reps []*RestoreReport
	for _, m := range members {
		rep, err := RestoreDataDir(path, RestoreOptions{DataDir: filepath.Join(root, m.ID), ID: m.ID, Members: members})
		if err != nil {
			t.Fatalf("restore of member %s: %v", m.ID, err)
		}
		reps = append(reps, rep)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := &LocalCluster{}
	t.Cleanup(c.Shutdown)
	for _, m := range members {
		cfg := DefaultConfig(m.ID)
		fastConfig(t)(&cfg)
		cfg.RaftAddr, cfg.APIAddr, cfg.DataDir = m.RaftAddr, m.APIAddr, filepath.Join(root, m.ID)
		s, err := StartServer(ctx, cfg, nil)
		if err != nil {
			t.Fatalf("starting restored member %s: %v", m.ID, err)
		}
		c.Servers = append(c.Servers, s)
	}
	if _, err := c.Leader(ctx); err != nil {
		t.Fatalf("the restored cluster elects no leader: %v", err)
	}
	return c, reps
}

// grant acquires key on c (which must be free) and returns its token.
func grant(t *testing.T, c *LocalCluster, key string) lock.Token {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := c.Locker()
	defer l.Close()
	lease, err := l.TryAcquire(ctx, key, lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("acquire %q: %v", key, err)
	}
	return lease.Token
}

// TestRestoreTokensAboveEveryEarlierToken: a backup saved (through a
// follower, which sends the client to the leader) from a three-node
// cluster while locks are held, restored onto a new three-node cluster
// with other ids and ports, drops the held leases, keeps the data, and
// grants tokens above every token the original cluster issued, the ones
// granted after the backup included. Every member gets the state.
func TestRestoreTokensAboveEveryEarlierToken(t *testing.T) {
	c := startCluster(t, 3)
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held := grant(t, c, "held/a")
	grant(t, c, "held/b")
	if err := l.AppendData(ctx, "config/x", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	var follower *Node
	for _, n := range c.Nodes() {
		if n != l {
			follower = n
		}
	}
	// A follower names the leader (421); the client follows it.
	eventually(t, "the follower knows the leader's API address", func() bool { _, addr := follower.Leader(); return addr == l.APIAddr() })
	resp, err := http.Get("http://" + follower.APIAddr() + PathBackup)
	if err != nil {
		t.Fatal(err)
	}
	var rep Reply
	json.NewDecoder(resp.Body).Decode(&rep)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest || rep.LeaderAddr != l.APIAddr() {
		t.Fatalf("backup from a follower: %s %+v; want 421 naming the leader at %s", resp.Status, rep, l.APIAddr())
	}
	path, bk := saveBackup(t, follower.APIAddr())
	h := bk.Header
	if h.LeaderID != l.ID() || h.Leases != 2 || h.Members != 3 || h.DataKeys < 1 || h.FencingCounter < uint64(held) || h.ClusterID != "" {
		t.Fatalf("backup header %+v: want leader %s, 2 leases, 3 members, a data key, counter >= %d, no cluster id", h, l.ID(), held)
	}
	// The original cluster moves on past the backup.
	var last lock.Token
	for _, k := range []string{"after/1", "after/2", "after/3"} {
		last = grant(t, c, k)
	}
	if uint64(last) <= h.FencingCounter {
		t.Fatalf("token %d after the backup is not above the backup's counter %d", last, h.FencingCounter)
	}
	c.Shutdown()

	rc, reps := restoredCluster(t, path, "r3", "r1", "r2")
	tok := grant(t, rc, "held/a") // its lease was dropped: free at once
	if tok <= last {
		t.Fatalf("restored cluster granted token %d, not above %d, the last token before the restore", tok, last)
	}
	if other := grant(t, rc, "new/key"); other <= tok {
		t.Fatalf("second grant %d not above %d", other, tok)
	}
	var seed *RestoreReport
	for _, r := range reps {
		if r.Seed != "r1" {
			t.Errorf("member %s: seed %q, want r1 (the lowest id)", r.ID, r.Seed)
		}
		if r.Seeded() {
			seed = r
		}
	}
	if seed == nil || seed.ClusterID == "" || seed.Counter < uint64(last) || seed.Index != h.AppliedIndex || seed.Term != 1 {
		t.Fatalf("seed's report %+v: want a cluster id, a counter above %d, index %d, term 1", seed, last, h.AppliedIndex)
	}
	rl := leader(t, rc)
	if v, err := rl.ReadData(ctx, "config/x"); err != nil || string(v) != "v1" {
		t.Errorf("data key after the restore: %q, %v; want v1", v, err)
	}
	for _, n := range rc.Nodes() {
		n := n
		eventually(t, "member "+n.ID()+" has the restored state", func() bool { return n.fsm.LastToken() >= uint64(tok) })
		if id, _ := n.fsm.Data(fsm.ClusterIDKey); string(id) != seed.ClusterID {
			t.Errorf("member %s: cluster id %q, want %q", n.ID(), id, seed.ClusterID)
		}
		if _, ok := n.fsm.Lock("held/b"); ok {
			t.Errorf("member %s still holds held/b, a lease of the original cluster", n.ID())
		}
		if addr := n.fsm.Members()[n.ID()]; addr != n.APIAddr() {
			t.Errorf("member %s: directory says %q, want its API address %s", n.ID(), addr, n.APIAddr())
		}
	}
}

// TestRestoreTwiceFromOneBackup: a second restore of the same backup
// grants tokens above every token of the first restored cluster, and gets
// a cluster id of its own; --token-floor raises the counter further.
func TestRestoreTwiceFromOneBackup(t *testing.T) {
	c := startCluster(t, 1)
	grant(t, c, "k")
	path, _ := saveBackup(t, c.Nodes()[0].APIAddr())
	c.Shutdown()

	first, reps1 := restoredCluster(t, path, "a")
	var last lock.Token
	for _, k := range []string{"k", "k2", "k3"} {
		last = grant(t, first, k)
	}
	first.Shutdown()

	second, reps2 := restoredCluster(t, path, "b")
	if tok := grant(t, second, "k"); tok <= last {
		t.Fatalf("second restore granted %d, not above %d from the first", tok, last)
	}
	if reps1[0].ClusterID == reps2[0].ClusterID {
		t.Errorf("both restores have cluster id %s", reps1[0].ClusterID)
	}

	floor := uint64(1) << 62
	dir := filepath.Join(t.TempDir(), "floor")
	m := []RestoreMember{{ID: "f", RaftAddr: "127.0.0.1:1", APIAddr: "127.0.0.1:2"}}
	rep, err := RestoreDataDir(path, RestoreOptions{DataDir: dir, ID: "f", Members: m, TokenFloor: floor})
	if err != nil || rep.Counter != floor {
		t.Fatalf("restore with a token floor: %+v, %v; want counter %d", rep, err, floor)
	}
}

// TestBackupDetectsCorruption: a flipped byte anywhere (framing, header,
// snapshot, the snapshot's own checksum, the file's checksum), a
// truncation and a trailing byte are each refused with ErrCorruptBackup;
// so is a header that does not describe its snapshot, checksum or not.
func TestBackupDetectsCorruption(t *testing.T) {
	c := startCluster(t, 1)
	grant(t, c, "k")
	path, bk := saveBackup(t, c.Nodes()[0].APIAddr())
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hlen := len(good) - len(BackupMagic) - 2 - 4 - 8 - len(bk.Snapshot) - 32
	snapAt := len(BackupMagic) + 2 + 4 + hlen + 8
	for name, at := range map[string]int{
		"magic":            0,
		"version":          len(BackupMagic),
		"header length":    len(BackupMagic) + 2,
		"header":           len(BackupMagic) + 6 + hlen/2,
		"snapshot length":  snapAt - 8,
		"snapshot magic":   snapAt,
		"snapshot body":    snapAt + len(bk.Snapshot)/2,
		"snapshot crc":     snapAt + len(bk.Snapshot) - 1,
		"checksum (first)": len(good) - 32,
		"checksum (last)":  len(good) - 1,
	} {
		bad := bytes.Clone(good)
		bad[at] ^= 0x20
		if _, err := ParseBackup(bad); !errors.Is(err, ErrCorruptBackup) {
			t.Errorf("%s (byte %d) flipped: %v; want ErrCorruptBackup", name, at, err)
		}
	}
	for _, n := range []int{0, 3, len(BackupMagic) + 3, snapAt - 4, snapAt + 2, len(good) - 33, len(good) - 1} {
		_, err := ParseBackup(good[:n])
		if !errors.Is(err, ErrCorruptBackup) || !strings.Contains(err.Error(), "truncated") {
			t.Errorf("truncated to %d bytes: %v; want a truncation error", n, err)
		}
	}
	if _, err := ParseBackup(append(bytes.Clone(good), 0)); !errors.Is(err, ErrCorruptBackup) {
		t.Errorf("a trailing byte: %v; want ErrCorruptBackup", err)
	}
	if _, err := ParseBackup([]byte("PK\x03\x04 a zip file, not a backup")); err == nil || !strings.Contains(err.Error(), "not a lockgate backup") {
		t.Errorf("bad magic: %v", err)
	}
	// A well-framed, well-summed file whose header lies.
	h := bk.Header
	h.Leases++
	forged, err := encodeBackup(h, bk.Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseBackup(forged); !errors.Is(err, ErrCorruptBackup) || !strings.Contains(err.Error(), "does not describe") {
		t.Errorf("header that does not describe the snapshot: %v", err)
	}
	if _, err := ParseBackup(good); err != nil {
		t.Errorf("the intact backup: %v", err)
	}
}

// TestRestoreRefuses: restore refuses a data directory that is not empty
// and a corrupt backup, and leaves the directory as it found it (or
// absent); it refuses members it cannot form a cluster of.
func TestRestoreRefuses(t *testing.T) {
	c := startCluster(t, 1)
	path, _ := saveBackup(t, c.Nodes()[0].APIAddr())
	m := []RestoreMember{{ID: "a", RaftAddr: "127.0.0.1:1", APIAddr: "127.0.0.1:2"}}

	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "LOCK"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := RestoreDataDir(path, RestoreOptions{DataDir: full, ID: "a", Members: m}); !errors.Is(err, ErrDataDirNotEmpty) {
		t.Errorf("non-empty data dir: %v; want ErrDataDirNotEmpty", err)
	}
	if ents, _ := os.ReadDir(full); len(ents) != 1 {
		t.Errorf("the refused directory was changed: %v", ents)
	}

	data, _ := os.ReadFile(path)
	data[len(data)/2] ^= 1
	bad := filepath.Join(t.TempDir(), "bad.backup")
	os.WriteFile(bad, data, 0o600)
	for _, dir := range []string{filepath.Join(t.TempDir(), "new"), t.TempDir()} {
		if _, err := RestoreDataDir(bad, RestoreOptions{DataDir: dir, ID: "a", Members: m}); !errors.Is(err, ErrCorruptBackup) {
			t.Errorf("corrupt backup: %v; want ErrCorruptBackup", err)
		}
		if ents, err := os.ReadDir(dir); len(ents) != 0 || err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused restore wrote %s: %v, %v", dir, ents, err)
		}
	}

	for name, tc := range map[string]struct {
		id      string
		members []RestoreMember
		want    string
	}{
		"id not a member": {"z", m, "not one of the members"},
		"no members":      {"a", nil, "members"},
		"duplicate id":    {"a", append(m, RestoreMember{ID: "a", RaftAddr: "127.0.0.1:3", APIAddr: "127.0.0.1:4"}), "twice"},
		"shared address":  {"a", append(m, RestoreMember{ID: "b", RaftAddr: "127.0.0.1:1", APIAddr: "127.0.0.1:4"}), "both use"},
		"wildcard":        {"a", []RestoreMember{{ID: "a", RaftAddr: "0.0.0.0:1", APIAddr: "127.0.0.1:2"}}, "wildcard"},
		"no port":         {"a", []RestoreMember{{ID: "a", RaftAddr: "host", APIAddr: "127.0.0.1:2"}}, "host:port"},
	} {
		dir := filepath.Join(t.TempDir(), "d")
		if _, err := RestoreDataDir(path, RestoreOptions{DataDir: dir, ID: tc.id, Members: tc.members}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error mentioning %q", name, err, tc.want)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the refused restore created %s", name, dir)
		}
	}
	if _, err := ParseRestoreMembers([]string{"a=127.0.0.1:1"}); err == nil {
		t.Error("a member without an API address parsed")
	}
}

// TestRestoredSeedDirectory: the seed's directory holds one snapshot at
// the backup's index and term 1 whose configuration names every member;
// another member's directory holds no state a node would campaign with.
func TestRestoredSeedDirectory(t *testing.T) {
	c := startCluster(t, 1)
	path, bk := saveBackup(t, c.Nodes()[0].APIAddr())
	ms, err := ParseRestoreMembers([]string{"b=127.0.0.1:11=127.0.0.1:12", "a=127.0.0.1:21=127.0.0.1:22"})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, id := range []string{"a", "b"} {
		if _, err := RestoreDataDir(path, RestoreOptions{DataDir: filepath.Join(root, id), ID: id, Members: ms}); err != nil {
			t.Fatal(err)
		}
	}
	for id, wantSnaps := range map[string]int{"a": 1, "b": 0} {
		dir := filepath.Join(root, id)
		stores, err := store.Open(dir, store.KindAuto)
		if err != nil {
			t.Fatal(err)
		}
		term, err := stores.Stable.GetUint64(keyCurrentTerm)
		last, _ := stores.Log.LastIndex()
		stores.Close()
		if term != 1 || err != nil || last != 0 {
			t.Errorf("member %s: current term %d (%v), last log index %d; want term 1, an empty log", id, term, err, last)
		}
		snaps, err := store.OpenSnapshots(filepath.Join(dir, snapshotDirName), hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		metas, _ := snaps.List()
		if len(metas) != wantSnaps {
			t.Fatalf("member %s: %d snapshots, want %d", id, len(metas), wantSnaps)
		}
		if wantSnaps == 1 {
			m := metas[0]
			if m.Index != bk.Header.AppliedIndex || m.Term != 1 || len(m.Configuration.Servers) != 2 ||
				m.Configuration.Servers[0].ID != "a" || m.Configuration.Servers[1].Address != "127.0.0.1:11" {
				t.Errorf("seed's snapshot: index %d term %d configuration %+v", m.Index, m.Term, m.Configuration)
			}
		}
	}
}
