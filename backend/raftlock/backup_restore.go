package raftlock

// Restoring a backup (RestoreDataDir): the data directory of each member
// of a new cluster, the seed's with the restored state and the others'
// without, as backup.go describes.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/backend/raftlock/store"
)

// restoreTerm is the term of a restored cluster's first snapshot, and its
// members' current term: what raft.BootstrapCluster writes.
const restoreTerm = 1

// keyCurrentTerm is hashicorp/raft's stable-store key of the current term
// (unexported there).
var keyCurrentTerm = []byte("CurrentTerm")

// RestoreMember is one member of a restored cluster.
type RestoreMember struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raftAddr"` // as peers dial it (the node's --raft-advertise, else --raft-addr)
	APIAddr  string `json:"apiAddr"`  // as clients dial it (the node's --api-addr)
}

// ParseRestoreMembers reads members given as "id=raftAddr=apiAddr" items.
func ParseRestoreMembers(items []string) ([]RestoreMember, error) {
	var ms []RestoreMember
	for _, it := range items {
		p := strings.Split(strings.TrimSpace(it), "=")
		if len(p) != 3 || p[0] == "" || p[1] == "" || p[2] == "" {
			return nil, fmt.Errorf("raftlock: member %q: want id=raftAddr=apiAddr", it)
		}
		ms = append(ms, RestoreMember{ID: p[0], RaftAddr: p[1], APIAddr: p[2]})
	}
	return ms, nil
}

// FormatRestoreMembers writes members as ParseRestoreMembers reads them,
// comma-separated.
func FormatRestoreMembers(ms []RestoreMember) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.ID + "=" + m.RaftAddr + "=" + m.APIAddr
	}
	return strings.Join(parts, ",")
}

// RestoreOptions says which data directory RestoreDataDir writes.
type RestoreOptions struct {
	// DataDir is the member's data directory: new or empty (required).
	DataDir string
	// ID is the member's server id, one of Members (required).
	ID string
	// Members are every member of the new cluster (required); give all
	// members' restores the same list.
	Members []RestoreMember
	// TokenFloor, when above the floor computed from the backup and this
	// host's clock, is the restored fencing counter: every token the
	// restored cluster grants is above it. The seed's restore alone uses
	// it.
	TokenFloor uint64
	// Store is the store kind the member runs with (default
	// store.KindAuto: store.Default for the new directory).
	Store store.Kind
}

// RestoreReport is what RestoreDataDir wrote.
type RestoreReport struct {
	// Backup is the verified backup.
	Backup *Backup
	// DataDir, ID and Store are the member's; Members the new cluster,
	// sorted by id.
	DataDir string
	ID      string
	Store   store.Kind
	Members []RestoreMember
	// Seed is the member whose directory holds the restored state (the
	// lowest id); every other member receives it from the seed.
	Seed string
	// The seed's restore only (zero otherwise):
	//
	// ClusterID is the restored cluster's new identity; Counter its
	// fencing counter (every token it grants is above it); Index and Term
	// the Raft snapshot's, SnapshotID its name; DataKeys the data keys
	// kept.
	ClusterID   string
	Counter     uint64
	Index, Term uint64
	SnapshotID  string
	DataKeys    int
}

// Seeded reports whether this member's directory holds the restored state.
func (r *RestoreReport) Seeded() bool { return r.ID == r.Seed }

// RestoreDataDir writes, from the backup file at backupPath, the data
// directory of member opts.ID of a new cluster of opts.Members, to be
// started with `lockgate node --id ID --data-dir DIR` (no bootstrap, no
// join) at that member's addresses.
//
// It verifies the backup first (ReadBackupFile), and refuses a data
// directory that exists and is not empty (ErrDataDirNotEmpty); on any
// error it leaves the directory as it found it (or absent).
//
// The seed (the member with the lowest id) gets the restored state: the
// backup's state with every lease, shared holder, session and lock-delay
// dropped (they belong to the original cluster's time), its data keys and
// format gate kept, its fencing counter raised to
// max(fsm.TokenFloor(now, counter, clock), opts.TokenFloor), a new random
// cluster id (fsm.ClusterIDKey), and the new members' API addresses as its
// member directory. It is written as a Raft snapshot at the backup's
// applied index and term 1, whose configuration names every member as a
// voter, with the current term 1 and an empty log. Every other member gets
// a directory without state, and receives the seed's by Raft (see the
// comment at the top of this file).
func RestoreDataDir(backupPath string, opts RestoreOptions) (_ *RestoreReport, err error) {
	members, err := checkRestoreMembers(opts.ID, opts.Members)
	if err != nil {
		return nil, err
	}
	if opts.DataDir == "" {
		return nil, errors.New("raftlock: restore: the data directory is required")
	}
	if opts.Store == "" {
		opts.Store = store.KindAuto
	}
	if _, err := store.ParseKind(string(opts.Store)); err != nil {
		return nil, fmt.Errorf("raftlock: restore: %w", err)
	}
	data, err := os.ReadFile(backupPath)
	if err != nil {
		return nil, fmt.Errorf("raftlock: restore: %w", err)
	}
	bk, f, err := loadBackup(data)
	if err != nil {
		return nil, fmt.Errorf("raftlock: restore: %s: %w", backupPath, err)
	}
	created, err := claimDataDir(opts.DataDir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			releaseDataDir(opts.DataDir, created)
		}
	}()
	rep := &RestoreReport{Backup: bk, DataDir: opts.DataDir, ID: opts.ID, Members: members, Seed: members[0].ID}
	stores, err := store.Open(opts.DataDir, opts.Store)
	if err != nil {
		return nil, fmt.Errorf("raftlock: restore: %w", err)
	}
	defer stores.Close()
	rep.Store = stores.Kind
	if rep.Seeded() {
		if err := writeSeed(opts, bk, f, stores, rep); err != nil {
			return nil, err
		}
	}
	// What raft.BootstrapCluster writes: a directory with a term is
	// existing state, which `lockgate node --bootstrap` leaves alone.
	if err := stores.Stable.SetUint64(keyCurrentTerm, restoreTerm); err != nil {
		return nil, fmt.Errorf("raftlock: restore: writing the current term: %w", err)
	}
	if err := stores.Close(); err != nil {
		return nil, fmt.Errorf("raftlock: restore: closing the store: %w", err)
	}
	return rep, nil
}

// writeSeed writes the restored state into the seed's directory, whose
// stores are open.
func writeSeed(opts RestoreOptions, bk *Backup, f *fsm.FSM, stores *store.Stores, rep *RestoreReport) error {
	h := bk.Header
	// f's leases are dropped already (loadBackup); the data keys, the
	// gate and the counter stay.
	f.RaiseCounter(max(fsm.TokenFloor(time.Now(), h.FencingCounter, h.FSMClock), opts.TokenFloor))
	var id [16]byte
	rand.Read(id[:])
	rep.ClusterID = hex.EncodeToString(id[:])
	f.SetData(fsm.ClusterIDKey, []byte(rep.ClusterID))
	dir := make(map[string]string, len(rep.Members))
	var conf raft.Configuration
	for _, m := range rep.Members {
		dir[m.ID] = m.APIAddr
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.RaftAddr)})
	}
	f.SetMembers(dir)
	rep.Index, rep.Term = max(h.AppliedIndex, 1), restoreTerm
	f.SetApplied(rep.Index)
	rep.Counter = f.LastToken()

	snaps, err := store.OpenSnapshots(filepath.Join(opts.DataDir, snapshotDirName), hclog.NewNullLogger())
	if err != nil {
		return fmt.Errorf("raftlock: restore: %w", err)
	}
	// The transport only encodes the configuration's addresses into the
	// snapshot's metadata (as RecoverCluster's does): nothing is sent.
	_, trans := raft.NewInmemTransport(conf.Servers[0].Address)
	defer trans.Close()
	sink, err := snaps.Create(raft.SnapshotVersionMax, rep.Index, rep.Term, conf, rep.Index, trans)
	if err != nil {
		return fmt.Errorf("raftlock: restore: creating the snapshot: %w", err)
	}
	rep.SnapshotID = sink.ID()
	s, err := f.Snapshot()
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("raftlock: restore: %w", err)
	}
	defer s.Release()
	if err := s.Persist(sink); err != nil { // closes the sink
		return fmt.Errorf("raftlock: restore: writing the snapshot: %w", err)
	}
	// Read it back as the node will at its start.
	_, rc, err := snaps.Open(rep.SnapshotID)
	if err != nil {
		return fmt.Errorf("raftlock: restore: reading the snapshot back: %w", err)
	}
	check := fsm.New()
	if err := check.Restore(rc); err != nil {
		return fmt.Errorf("raftlock: restore: reading the snapshot back: %w", err)
	}
	if check.Digest() != f.Digest() {
		return errors.New("raftlock: restore: the snapshot read back differs from the state written")
	}
	written, err := persist(check)
	if err == nil {
		rep.DataKeys, err = snapshotRecords(written) // no leases: every record is a data key
	}
	if err != nil {
		return fmt.Errorf("raftlock: restore: %w", err)
	}
	return nil
}

// checkRestoreMembers validates a restored cluster's members and returns
// them sorted by id: the seed first.
func checkRestoreMembers(id string, members []RestoreMember) ([]RestoreMember, error) {
	if id == "" {
		return nil, errors.New("raftlock: restore: the member's server id is required")
	}
	if len(members) == 0 {
		return nil, errors.New("raftlock: restore: the members of the new cluster are required (id=raftAddr=apiAddr,...)")
	}
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b RestoreMember) int { return strings.Compare(a.ID, b.ID) })
	ids := map[string]bool{}
	addrs := map[string]string{} // address → member: no two listeners share one
	for _, m := range ms {
		if err := (JoinArgs{ServerID: m.ID, ServerAddr: m.RaftAddr, APIAddr: m.APIAddr}).Validate(); err != nil {
			return nil, fmt.Errorf("raftlock: restore: member %s: %w", m.ID, err)
		}
		if ids[m.ID] {
			return nil, fmt.Errorf("raftlock: restore: member %s is given twice", m.ID)
		}
		ids[m.ID] = true
		for _, a := range []struct{ what, addr string }{{"Raft", m.RaftAddr}, {"API", m.APIAddr}} {
			host, _, _ := net.SplitHostPort(a.addr)
			if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
				return nil, fmt.Errorf("raftlock: restore: member %s: the %s address %q is a wildcard that peers cannot dial: give the address they dial", m.ID, a.what, a.addr)
			}
			if other, dup := addrs[a.addr]; dup {
				return nil, fmt.Errorf("raftlock: restore: members %s and %s both use the address %s", other, m.ID, a.addr)
			}
			addrs[a.addr] = m.ID
		}
	}
	if !ids[id] {
		return nil, fmt.Errorf("raftlock: restore: server id %q is not one of the members (%s)", id, FormatRestoreMembers(ms))
	}
	return ms, nil
}

// claimDataDir makes sure dir is a new or empty directory, creating it if
// missing (created says so).
func claimDataDir(dir string) (created bool, err error) {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, store.DirMode); err != nil {
			return false, fmt.Errorf("raftlock: restore: %w", err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("raftlock: restore: %w", err)
	case !fi.IsDir():
		return false, fmt.Errorf("raftlock: restore: %s exists and is not a directory", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false, fmt.Errorf("raftlock: restore: %w", err)
	}
	if len(ents) > 0 {
		var names []string
		for _, e := range ents[:min(len(ents), 3)] {
			names = append(names, e.Name())
		}
		if len(ents) > 3 {
			names = append(names, "…")
		}
		return false, fmt.Errorf("%w: %s holds %s: restore writes only a new or empty directory, never over a node's state",
			ErrDataDirNotEmpty, dir, strings.Join(names, ", "))
	}
	return false, nil
}

// releaseDataDir undoes a failed restore: removes dir if it created it,
// else empties it again.
func releaseDataDir(dir string, created bool) {
	if created {
		os.RemoveAll(dir)
		return
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}
