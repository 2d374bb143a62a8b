package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strings"

	"github.com/hashicorp/raft"
)

// Snapshot format, version 1 (all of it deterministic: keys sorted):
//
//	"LGFS" byte(1)
//	uvarint applied index, uvarint fencing counter, varint now
//	uvarint #members, then per member (sorted by id): string id, string address
//	uvarint #records, then per record (sorted by prefixed key):
//	  string key ("l/…" or "d/…")
//	  "l/": string owner, handle (byte 0 + 16 raw bytes for 32 lowercase hex
//	        chars, else byte 1 + string), uvarint token, varint ttl,
//	        varint expires, string value
//	  "d/": string value
//	uint32 little-endian CRC-32C of everything before it
//
// where string is uvarint length + bytes.
//
// Version 2, written only when version 1 cannot express the state (shared
// holders, a lock-delay on a grant, or a lock-delay still ahead), so that
// a binary that knows only version 1 still installs the snapshots of an
// exclusive-only workload:
//
//	"LGFS" byte(2)
//	the header, members and records as in version 1, except that a lock
//	  record has one more field after expires: varint lock-delay
//	uvarint #groups, then per group (sorted by key, unprefixed):
//	  string key, uvarint permits, uvarint #holders, then per holder
//	  (oldest first, tokens strictly increasing): the fields of a lock
//	  record after its key (owner … lock-delay, then value)
//	uvarint #delays, then per lock-delay ahead of now (sorted by key):
//	  string key, varint end
//	uint32 little-endian CRC-32C of everything before it
//
// Version 3, written only when the state has sessions:
//
//	"LGFS" byte(3)
//	as version 2, except that a lock record (and a group's holder) has one
//	  more field after lock-delay: string session id ("" for none; a
//	  session lease's expires is 0: its session's applies)
//	then, after the lock-delays: uvarint #sessions, then per session
//	  (sorted by id): string id, string owner, varint ttl, varint expires
//	uint32 little-endian CRC-32C of everything before it
//
// Restore accepts exactly these canonical forms.
const (
	snapMagic     = "LGFS"
	snapVersion   = 1
	snapVersionV2 = 2
	snapVersionV3 = 3
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrCorruptSnapshot is wrapped by every error Restore returns for input
// that is not a valid snapshot.
var ErrCorruptSnapshot = errors.New("fsm: corrupt snapshot")

// snapshot is a point-in-time copy of the state. Records are immutable, so
// copying their pointers is enough; Persist sorts and encodes them.
type snapshot struct {
	index, counter uint64
	now            int64
	members        []kv
	recs           []event
	groups         []keyGroup
	delays         []kvInt
	sessions       []SessionInfo
	version        byte
}

type keyGroup struct {
	key string
	g   *group
}

type kv struct{ k, v string }

// Snapshot returns a point-in-time copy of the state. It only copies the
// table's (key, pointer) pairs and the member directory (a few ms for 100k
// locks); sorting and encoding happen in Persist, which may run concurrently
// with Apply. Persist writes deterministic bytes: two FSMs with equal state
// (including AppliedIndex, Now and LastToken) produce identical snapshots.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := &snapshot{
		index:   f.index,
		counter: f.counter,
		now:     f.now,
		members: make([]kv, 0, len(f.members)),
		recs:    make([]event, 0, len(f.kv)),
	}
	for k, v := range f.members {
		s.members = append(s.members, kv{k, v})
	}
	s.version = snapVersion
	for k, r := range f.kv {
		s.recs = append(s.recs, event{k, r})
		if r.delay() != 0 {
			s.version = snapVersionV2
		}
	}
	for k, g := range f.groups {
		s.groups = append(s.groups, keyGroup{k, g})
	}
	for k, until := range f.delays {
		if until > f.now {
			s.delays = append(s.delays, kvInt{k, until})
		}
	}
	if len(s.groups) > 0 || len(s.delays) > 0 {
		s.version = snapVersionV2
	}
	// Sessions are the one mutable part of the state: copy their fields.
	for _, ss := range f.sessions {
		s.sessions = append(s.sessions, ss.info())
	}
	if len(s.sessions) > 0 {
		s.version = snapVersionV3
	}
	return s, nil
}

// Persist writes the snapshot to sink and closes it, or cancels it on error.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.writeTo(sink); err != nil {
		sink.Cancel()
		return fmt.Errorf("fsm: persist snapshot: %w", err)
	}
	return sink.Close()
}

// Release drops the snapshot's references.
func (s *snapshot) Release() {
	s.members, s.recs, s.groups, s.delays, s.sessions = nil, nil, nil, nil, nil
}

// crcWriter computes the CRC-32C of what passes through it.
type crcWriter struct {
	w   io.Writer
	crc uint32
}

func (c *crcWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.crc = crc32.Update(c.crc, crcTable, p[:n])
	return n, err
}

// writeTo encodes the snapshot to w. It sorts s's slices in place.
func (s *snapshot) writeTo(w io.Writer) error {
	slices.SortFunc(s.members, func(a, b kv) int { return strings.Compare(a.k, b.k) })
	slices.SortFunc(s.recs, func(a, b event) int { return strings.Compare(a.key, b.key) })
	slices.SortFunc(s.groups, func(a, b keyGroup) int { return strings.Compare(a.key, b.key) })
	slices.SortFunc(s.delays, func(a, b kvInt) int { return strings.Compare(a.k, b.k) })
	slices.SortFunc(s.sessions, func(a, b SessionInfo) int { return strings.Compare(a.ID, b.ID) })
	version := s.version
	if version == 0 {
		version = snapVersion
	}
	cw := &crcWriter{w: w}
	bw := bufio.NewWriterSize(cw, 64<<10)
	buf := make([]byte, 0, 256)
	buf = append(buf, snapMagic...)
	buf = append(buf, version)
	buf = binary.AppendUvarint(buf, s.index)
	buf = binary.AppendUvarint(buf, s.counter)
	buf = binary.AppendVarint(buf, s.now)
	buf = binary.AppendUvarint(buf, uint64(len(s.members)))
	for _, m := range s.members {
		buf = appendString(buf, m.k)
		buf = appendString(buf, m.v)
		if _, err := bw.Write(buf); err != nil {
			return err
		}
		buf = buf[:0]
	}
	buf = binary.AppendUvarint(buf, uint64(len(s.recs)))
	for _, e := range s.recs {
		r := e.rec
		buf = appendString(buf, e.key)
		if strings.HasPrefix(e.key, lockPrefix) {
			buf = appendLock(buf, r, version)
		}
		buf = appendString(buf, r.value())
		if _, err := bw.Write(buf); err != nil {
			return err
		}
		buf = buf[:0]
	}
	if version >= snapVersionV2 {
		buf = binary.AppendUvarint(buf, uint64(len(s.groups)))
		for _, kg := range s.groups {
			buf = appendString(buf, kg.key)
			buf = binary.AppendUvarint(buf, uint64(kg.g.permits))
			buf = binary.AppendUvarint(buf, uint64(len(kg.g.holders)))
			for _, r := range kg.g.holders {
				buf = appendLock(buf, r, version)
				buf = appendString(buf, r.value())
				if _, err := bw.Write(buf); err != nil {
					return err
				}
				buf = buf[:0]
			}
		}
		buf = binary.AppendUvarint(buf, uint64(len(s.delays)))
		for _, d := range s.delays {
			buf = appendString(buf, d.k)
			buf = binary.AppendVarint(buf, d.v)
		}
	}
	if version >= snapVersionV3 {
		buf = binary.AppendUvarint(buf, uint64(len(s.sessions)))
		for _, ss := range s.sessions {
			buf = appendString(buf, ss.ID)
			buf = appendString(buf, ss.Owner)
			buf = binary.AppendVarint(buf, int64(ss.TTL))
			buf = binary.AppendVarint(buf, ss.Expires)
			if _, err := bw.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	if _, err := bw.Write(buf); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(binary.LittleEndian.AppendUint32(nil, cw.crc))
	return err
}

// appendLock appends a lock record's fields after its key, before its
// value.
func appendLock(buf []byte, r *record, version byte) []byte {
	buf = appendString(buf, r.owner)
	if hs := r.hstr(); hs == "" {
		buf = append(buf, 0)
		buf = append(buf, r.h[:]...)
	} else {
		buf = append(buf, 1)
		buf = appendString(buf, hs)
	}
	buf = binary.AppendUvarint(buf, r.token)
	buf = binary.AppendVarint(buf, r.ttl)
	buf = binary.AppendVarint(buf, r.expires)
	if version >= snapVersionV2 {
		buf = binary.AppendVarint(buf, r.delay())
	}
	if version >= snapVersionV3 {
		sid := ""
		if r.sess != nil {
			sid = r.sess.id
		}
		buf = appendString(buf, sid)
	}
	return buf
}
