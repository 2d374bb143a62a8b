package raftlock

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/backend/raftlock/store"
	"github.com/lockgate/lockgate/internal/audit"
	"github.com/lockgate/lockgate/lock"
)

// Backups of a cluster's state, and restores of a backup onto a new
// cluster (`lockgate snapshot save | inspect | restore`,
// docs/operations.md "Backups and restore").
//
// A backup file, format version 1 (integers little-endian):
//
//	"LGBACKUP"              8 bytes of magic
//	uint16 version          the backup format: 1
//	uint32 H                the header's length, at most MaxBackupHeader
//	H bytes                 the header: a JSON object, BackupHeader
//	uint64 S                the snapshot's length
//	S bytes                 the state machine's snapshot, as fsm.FSM.Snapshot
//	                        persists it (fsm/snapshot.go: "LGFS", its format,
//	                        …, its own CRC-32C)
//	32 bytes                SHA-256 of every byte before it
//
// The header repeats what the snapshot holds (applied index, fencing
// counter, clock, cluster id, counts) so that a backup can be read without
// decoding it, and ParseBackup checks that it describes the snapshot. The
// SHA-256 covers the whole file: a flipped byte anywhere (header, snapshot,
// the checksum itself) fails it, and a truncated or extended file fails
// the framing before that.
//
// Restoring (RestoreDataDir) writes the data directory of one member of a
// new cluster, whose ids and addresses the operator gives (the hosts may
// all be new). The restored state exists in ONE directory: the seed's, the
// member with the lowest id. Every other member's directory is written
// without state (a stable store at term 1, no configuration): such a
// member never campaigns, votes for the seed, and receives the state from
// it as a Raft snapshot, as a member that joined would. So the members
// cannot disagree, however restore is run: for each member on its own
// host, in any order, at any time, with the same backup and members, there
// is one restored state, and its cluster id and token floor were drawn
// once, by the seed's restore. (Two directories each holding a restored
// state, with different counters at the same log index and term, would
// never be reconciled by Raft: they would diverge silently.)

// PathBackup is the leader's backup endpoint: GET answers a backup file
// (an admin credential, as join and remove). A follower answers 421 with
// a Reply naming the leader (503 when it knows none); the client follows.
const PathBackup = "/v1/cluster/backup"

// The backup file's framing.
const (
	BackupMagic   = "LGBACKUP"
	BackupVersion = 1
	// MaxBackupHeader bounds the header's length.
	MaxBackupHeader = 64 << 10
)

// backupWriteTimeout bounds the writing of a backup answer: the server's
// write timeout is sized for short answers, a backup may be large.
const backupWriteTimeout = 10 * time.Minute

// restoreTerm is the term of a restored cluster's first snapshot, and its
// members' current term: what raft.BootstrapCluster writes.
const restoreTerm = 1

// keyCurrentTerm is hashicorp/raft's stable-store key of the current term
// (unexported there).
var keyCurrentTerm = []byte("CurrentTerm")

var (
	// ErrCorruptBackup is wrapped by every error for a file that is not an
	// intact backup: bad magic, truncation, checksum mismatch, a snapshot
	// that does not decode or a header that does not describe it.
	ErrCorruptBackup = errors.New("raftlock: corrupt backup")
	// ErrDataDirNotEmpty: restore writes only into a new or empty data
	// directory.
	ErrDataDirNotEmpty = errors.New("raftlock: data directory not empty")
)

// BackupState is what a backup's state machine holds, as its header says
// and as ParseBackup checks against the snapshot.
type BackupState struct {
	// SnapshotFormat is the format byte of the snapshot (fsm formats 1–3).
	SnapshotFormat uint8 `json:"snapshotFormat"`
	// GateFormat is the cluster's format gate (fsm.Gate.Format).
	GateFormat uint8 `json:"gateFormat"`
	// AppliedIndex is the Raft index of the last entry applied.
	AppliedIndex uint64 `json:"appliedIndex"`
	// FencingCounter is the last token granted.
	FencingCounter uint64 `json:"fencingCounter"`
	// FSMClock is the state machine's clock, unix ns.
	FSMClock int64 `json:"fsmClock"`
	// ClusterID is the cluster's identity ("" for a cluster never
	// restored).
	ClusterID string `json:"clusterId,omitempty"`
	// Leases counts lease holders (exclusive and shared, expired ones
	// not yet released included), Sessions the sessions, LockDelays the
	// lock-delays still running on released keys, DataKeys the data keys
	// (the service's own, the gate and the cluster id, included) and
	// Members the member directory's entries.
	Leases     int `json:"leases"`
	Sessions   int `json:"sessions"`
	LockDelays int `json:"lockDelays"`
	DataKeys   int `json:"dataKeys"`
	Members    int `json:"members"`
}

// BackupHeader is a backup file's header.
type BackupHeader struct {
	BackupState
	// LeaderID and Term are the leader that took the backup and its term.
	LeaderID string `json:"leaderId"`
	Term     uint64 `json:"term"`
	// Taken is when the leader took it, and Seconds how long it took
	// (leadership check, barrier, snapshot).
	Taken   time.Time `json:"taken"`
	Seconds float64   `json:"seconds"`
}

// Backup is a verified backup file.
type Backup struct {
	Header BackupHeader
	// Snapshot is the state machine's snapshot.
	Snapshot []byte
	// Checksum is the file's SHA-256 (over everything before it), Size
	// its length in bytes.
	Checksum [sha256.Size]byte
	Size     int
	// MemberDirectory is the snapshot's member directory: server id →
	// client API address.
	MemberDirectory map[string]string
}

// ParseBackup verifies a backup file and returns it: its framing, its
// SHA-256, its snapshot (which must decode, checksum and all) and its
// header (which must describe the snapshot). Every error for damaged
// bytes wraps ErrCorruptBackup; a snapshot of a format this binary does
// not read wraps fsm.ErrUnknownFormat instead.
func ParseBackup(data []byte) (*Backup, error) {
	b, _, err := loadBackup(data)
	return b, err
}

// ReadBackupFile reads and verifies the backup file at path (ParseBackup).
func ReadBackupFile(path string) (*Backup, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("raftlock: backup: %w", err)
	}
	b, err := ParseBackup(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// encodeBackup frames header h and snapshot snap as a backup file.
func encodeBackup(h BackupHeader, snap []byte) ([]byte, error) {
	hj, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("raftlock: backup header: %w", err)
	}
	if len(hj) > MaxBackupHeader {
		return nil, fmt.Errorf("raftlock: backup header of %d bytes exceeds %d", len(hj), MaxBackupHeader)
	}
	buf := make([]byte, 0, len(BackupMagic)+2+4+len(hj)+8+len(snap)+sha256.Size)
	buf = append(buf, BackupMagic...)
	buf = binary.LittleEndian.AppendUint16(buf, BackupVersion)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(hj)))
	buf = append(buf, hj...)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(len(snap)))
	buf = append(buf, snap...)
	sum := sha256.Sum256(buf)
	return append(buf, sum[:]...), nil
}

// loadBackup is ParseBackup, also returning the state machine decoded from
// the snapshot, with its leases dropped (counting the data keys drops
// them; a restore drops them anyway).
func loadBackup(data []byte) (*Backup, *fsm.FSM, error) {
	corrupt := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrCorruptBackup}, a...)...)
	}
	const fixed = len(BackupMagic) + 2 + 4 // magic, version, header length
	if n := min(len(data), len(BackupMagic)); string(data[:n]) != BackupMagic[:n] {
		return nil, nil, corrupt("bad magic %q: not a lockgate backup file (it starts with %q)", data[:n], BackupMagic)
	}
	if len(data) < fixed {
		return nil, nil, corrupt("truncated: %d bytes, shorter than the framing's first %d", len(data), fixed)
	}
	if v := binary.LittleEndian.Uint16(data[len(BackupMagic):]); v != BackupVersion {
		return nil, nil, corrupt("backup format version %d: this binary reads version %d (a damaged file, or a newer lockgate wrote it)", v, BackupVersion)
	}
	hlen := uint64(binary.LittleEndian.Uint32(data[len(BackupMagic)+2:]))
	if hlen > MaxBackupHeader {
		return nil, nil, corrupt("header length %d exceeds %d", hlen, MaxBackupHeader)
	}
	snapAt := uint64(fixed) + hlen + 8
	if uint64(len(data)) < snapAt+sha256.Size {
		return nil, nil, corrupt("truncated: %d bytes, and the header alone ends at byte %d", len(data), snapAt)
	}
	slen := binary.LittleEndian.Uint64(data[snapAt-8:])
	size := uint64(len(data))
	switch end := snapAt + slen + sha256.Size; {
	case slen > size || end > size:
		return nil, nil, corrupt("truncated: %d bytes, and its framing declares %d (a snapshot of %d bytes)", size, snapAt+slen+sha256.Size, slen)
	case end < size:
		return nil, nil, corrupt("%d bytes after the end its framing declares (byte %d)", size-end, end)
	}
	b := &Backup{Size: len(data)}
	body := data[:len(data)-sha256.Size]
	copy(b.Checksum[:], data[len(body):])
	if sum := sha256.Sum256(body); sum != b.Checksum {
		return nil, nil, corrupt("checksum mismatch: the file says SHA-256 %x, its bytes hash to %x", b.Checksum, sum)
	}
	if err := json.Unmarshal(data[fixed:fixed+int(hlen)], &b.Header); err != nil {
		return nil, nil, corrupt("header: %v", err)
	}
	b.Snapshot = data[snapAt : snapAt+slen]
	f := fsm.New()
	if err := f.Restore(io.NopCloser(bytes.NewReader(b.Snapshot))); err != nil {
		if errors.Is(err, fsm.ErrUnknownFormat) {
			return nil, nil, fmt.Errorf("raftlock: backup: %w", err)
		}
		return nil, nil, corrupt("snapshot: %v", err)
	}
	b.MemberDirectory = f.Members()
	st, err := describeState(f, b.Snapshot)
	if err != nil {
		return nil, nil, corrupt("snapshot: %v", err)
	}
	if st != b.Header.BackupState {
		return nil, nil, corrupt("the header (%+v) does not describe the snapshot (%+v)", b.Header.BackupState, st)
	}
	return b, f, nil
}

// describeState returns what f, decoded from snap, holds. It drops f's
// leases: a snapshot without leases holds only data records, whose count
// is the data keys'.
func describeState(f *fsm.FSM, snap []byte) (BackupState, error) {
	st := BackupState{
		SnapshotFormat: snap[len("LGFS")],
		GateFormat:     f.Gate().Format,
		AppliedIndex:   f.AppliedIndex(),
		FencingCounter: f.LastToken(),
		FSMClock:       f.Now(),
		Leases:         f.NumLocks(),
		Sessions:       f.NumSessions(),
		Members:        len(f.Members()),
	}
	if id, ok := f.Data(fsm.ClusterIDKey); ok {
		st.ClusterID = string(id)
	}
	f.ForEachDelay(func(string, int64) bool { st.LockDelays++; return true })
	f.DropLeases()
	data, err := persist(f)
	if err != nil {
		return st, err
	}
	n, err := snapshotRecords(data)
	st.DataKeys = n
	return st, err
}

// snapshotRecords reads the record count of a snapshot (fsm/snapshot.go:
// magic and format, three integers, the members, the record count).
func snapshotRecords(b []byte) (int, error) {
	b = b[min(len(b), len("LGFS")+1):]
	next := func(signed bool) uint64 {
		var v uint64
		var n int
		if signed {
			var s int64
			s, n = binary.Varint(b)
			v = uint64(s)
		} else {
			v, n = binary.Uvarint(b)
		}
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	next(false) // applied index
	next(false) // counter
	next(true)  // clock
	for m := next(false); m > 0 && b != nil; m-- {
		for range 2 { // id, address
			if l := next(false); l <= uint64(len(b)) {
				b = b[l:]
			} else {
				b = nil
			}
		}
	}
	n := next(false)
	if b == nil {
		return 0, errors.New("snapshot header does not parse")
	}
	return int(n), nil
}

// persist returns f's snapshot as it persists it.
func persist(f *fsm.FSM) ([]byte, error) {
	s, err := f.Snapshot()
	if err != nil {
		return nil, err
	}
	defer s.Release()
	var sink bufferSink
	if err := s.Persist(&sink); err != nil {
		return nil, err
	}
	return sink.Bytes(), nil
}

// bufferSink is a raft.SnapshotSink in memory.
type bufferSink struct{ bytes.Buffer }

func (*bufferSink) ID() string    { return "backup" }
func (*bufferSink) Cancel() error { return nil }
func (*bufferSink) Close() error  { return nil }

// Backup takes a backup of the cluster's state on this node, which must
// be the leader: it checks that a quorum still follows it
// (VerifyLeader), waits until every entry committed before is applied
// (Barrier), snapshots the state machine, and returns the backup file
// and its header. A follower gets a *lock.NotLeaderError.
func (n *Node) Backup(ctx context.Context) ([]byte, *BackupHeader, error) {
	start := time.Now()
	if err := n.fsm.Halted(); err != nil {
		return nil, nil, fmt.Errorf("raftlock: backup: %w", err)
	}
	if err := n.verifyLeader(); err != nil {
		return nil, nil, err
	}
	if err := n.await(n.raft.Barrier(n.timeout(ctx)), 0); err != nil {
		return nil, nil, n.raftErr(err)
	}
	snap, err := persist(n.fsm)
	if err != nil {
		return nil, nil, fmt.Errorf("raftlock: backup: %w", err)
	}
	scratch := fsm.New()
	if err := scratch.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		return nil, nil, fmt.Errorf("raftlock: backup: the snapshot does not decode: %w", err)
	}
	st, err := describeState(scratch, snap)
	if err != nil {
		return nil, nil, fmt.Errorf("raftlock: backup: %w", err)
	}
	h := BackupHeader{BackupState: st, LeaderID: n.cfg.ID, Term: n.term(), Taken: time.Now().UTC()}
	h.Seconds = time.Since(start).Seconds()
	file, err := encodeBackup(h, snap)
	if err != nil {
		return nil, nil, err
	}
	return file, &h, nil
}

func (n *Node) handleBackup(w http.ResponseWriter, r *http.Request) {
	if !n.authorized(w, r) {
		return
	}
	redirect := func(why string) {
		lid, laddr := n.Leader()
		switch {
		case lid == n.cfg.ID:
			writeJSON(w, http.StatusServiceUnavailable, Reply{LeaderID: lid, LeaderAddr: laddr, Term: n.term(),
				Error: fmt.Sprintf("node %s is taking over as leader (%s): retry in a moment", n.cfg.ID, why)})
		case laddr == "":
			writeJSON(w, http.StatusServiceUnavailable, Reply{LeaderID: lid, Term: n.term(),
				Error: fmt.Sprintf("node %s is not the leader and knows none: %s", n.cfg.ID, why)})
		default:
			writeJSON(w, http.StatusMisdirectedRequest, Reply{LeaderID: lid, LeaderAddr: laddr, Term: n.term(),
				Error: fmt.Sprintf("node %s is not the leader: ask the leader, node %s at %s", n.cfg.ID, lid, laddr)})
		}
	}
	if !n.IsLeader() {
		redirect("not the ready leader")
		return
	}
	if !n.backupMu.TryLock() {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusTooManyRequests, Reply{Term: n.term(), Error: "a backup is being taken on this node: one at a time; retry when it is done"})
		return
	}
	data, h, err := n.Backup(r.Context())
	n.backupMu.Unlock()
	if errors.Is(err, lock.ErrNotLeader) {
		redirect(err.Error())
		return
	}
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, Reply{Term: n.term(), Error: err.Error()})
		return
	}
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(backupWriteTimeout))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="lockgate-%d.backup"`, h.AppliedIndex))
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(data); err != nil {
		n.log.Warn("backup not delivered", "remote", r.RemoteAddr, "err", err)
		return
	}
	n.log.Info("backup taken", "remote", r.RemoteAddr, "bytes", len(data), "applied_index", h.AppliedIndex,
		"fencing_counter", h.FencingCounter, "leases", h.Leases, "took", time.Duration(h.Seconds*float64(time.Second)))
	cred, _ := n.Credential(r)
	n.audit(audit.Event{Op: audit.OpSnapshot, Identity: cred.Identity, Remote: r.RemoteAddr, FencingToken: h.FencingCounter,
		Detail: fmt.Sprintf("backup at log index %d, %d leases", h.AppliedIndex, h.Leases)})
}

// finalError is an answer every endpoint would give too (a refused
// credential), or a transfer that already wrote to the caller: Backup
// tries no other endpoint after it.
type finalError struct{ error }

func (e finalError) Unwrap() error { return e.error }

// Backup asks the cluster reachable at any of endpoints (API addresses)
// for a backup (GET PathBackup, with mc's admin token or certificate),
// following a follower's answer to the leader (at most DefaultMaxJoinHops
// hops per endpoint), and copies it to w. It returns the API address that
// sent it. w is written only once a leader answered 200; the caller
// verifies what it got (ParseBackup). The transfer is bounded by ctx, not
// by mc.Timeout.
func (mc *MembershipClient) Backup(ctx context.Context, endpoints []string, w io.Writer) (string, error) {
	var errs []error
	for _, addr := range endpoints {
		for hop := 0; hop < DefaultMaxJoinHops && addr != ""; hop++ {
			next, err := mc.backupFrom(ctx, addr, w)
			if err == nil {
				return addr, nil
			}
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			if fe := (finalError{}); errors.As(err, &fe) || ctx.Err() != nil {
				return "", fmt.Errorf("raftlock: backup: %w", errors.Join(errs...))
			}
			if next == addr {
				break
			}
			addr = next
		}
	}
	return "", fmt.Errorf("raftlock: backup: no leader answered: %w", errors.Join(errs...))
}

// backupFrom asks the node at addr; next is the leader it names when it
// is not the leader.
func (mc *MembershipClient) backupFrom(ctx context.Context, addr string, w io.Writer) (next string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, mc.url(addr, PathBackup), nil)
	if err != nil {
		return "", err
	}
	mc.authorize(req)
	hc := &http.Client{Transport: mc.http().Transport} // no Timeout: ctx bounds a large transfer
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var rep Reply
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &rep) == nil && rep.Error != "" {
			msg = rep.Error
		}
		err := fmt.Errorf("%s: %s", resp.Status, msg)
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			err = finalError{err}
		}
		return rep.LeaderAddr, err
	}
	n, err := io.Copy(w, resp.Body)
	if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = fmt.Errorf("%d of %d bytes", n, resp.ContentLength)
	}
	if err != nil {
		return "", finalError{fmt.Errorf("transfer cut short: %w", err)}
	}
	return "", nil
}

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
