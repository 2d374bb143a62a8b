package raftlock

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
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

// The backup file's framing.
const (
	BackupMagic   = "LGBACKUP"
	BackupVersion = 1
	// MaxBackupHeader bounds the header's length.
	MaxBackupHeader = 64 << 10
)

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
