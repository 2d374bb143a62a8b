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
// where string is uvarint length + bytes. Restore accepts exactly this
// canonical form.
const (
	snapMagic   = "LGFS"
	snapVersion = 1
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
	for k, r := range f.kv {
		s.recs = append(s.recs, event{k, r})
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
func (s *snapshot) Release() { s.members, s.recs = nil, nil }

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
	cw := &crcWriter{w: w}
	bw := bufio.NewWriterSize(cw, 64<<10)
	buf := make([]byte, 0, 256)
	buf = append(buf, snapMagic...)
	buf = append(buf, snapVersion)
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
			buf = appendString(buf, r.owner)
			if r.hstr == "" {
				buf = append(buf, 0)
				buf = append(buf, r.h[:]...)
			} else {
				buf = append(buf, 1)
				buf = appendString(buf, r.hstr)
			}
			buf = binary.AppendUvarint(buf, r.token)
			buf = binary.AppendVarint(buf, r.ttl)
			buf = binary.AppendVarint(buf, r.expires)
		}
		buf = appendString(buf, r.value)
		if _, err := bw.Write(buf); err != nil {
			return err
		}
		buf = buf[:0]
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

// state is a decoded snapshot, ready to be swapped into an FSM.
type state struct {
	kv             map[string]*record
	members        map[string]string
	counter, index uint64
	now            int64
	nlocks         int
}

// Restore replaces all state with the snapshot read from r (and closes r).
// It reads the whole snapshot into memory and validates it before touching
// the FSM: on any error (an error wrapping ErrCorruptSnapshot for bad
// input, saying what is wrong and where) the FSM is unchanged. Restore does
// not call the observer.
func (f *FSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("fsm: restore: read snapshot: %w", err)
	}
	st, err := decodeSnapshot(data, true)
	if err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	f.install(st)
	return nil
}

// install replaces f's state with st.
func (f *FSM) install(st *state) {
	f.mu.Lock()
	f.kv, f.members = st.kv, st.members
	f.counter, f.index, f.now, f.nlocks = st.counter, st.index, st.now, st.nlocks
	f.mu.Unlock()
}

// decodeSnapshot parses and validates a snapshot. checkCRC=false skips only
// the checksum comparison (so that fuzzing reaches the parser).
func decodeSnapshot(data []byte, checkCRC bool) (*state, error) {
	const head = len(snapMagic) + 1
	if len(data) < head+4 {
		return nil, fmt.Errorf("%w: %d bytes is too short", ErrCorruptSnapshot, len(data))
	}
	if string(data[:len(snapMagic)]) != snapMagic {
		return nil, fmt.Errorf("%w: bad magic %q", ErrCorruptSnapshot, data[:len(snapMagic)])
	}
	if v := data[len(snapMagic)]; v != snapVersion {
		return nil, fmt.Errorf("%w: unknown format version %d (want %d)", ErrCorruptSnapshot, v, snapVersion)
	}
	body := data[:len(data)-4]
	if want, got := binary.LittleEndian.Uint32(data[len(body):]), crc32.Checksum(body, crcTable); checkCRC && want != got {
		return nil, fmt.Errorf("%w: checksum mismatch (stored %#08x, computed %#08x)", ErrCorruptSnapshot, want, got)
	}
	d := decoder{b: body, off: head, op: -1, kind: ErrCorruptSnapshot, what: "record"}
	st := &state{}
	st.index = d.uvarint("applied index")
	st.counter = d.uvarint("fencing counter")
	st.now = d.varint("now")

	// Members: each takes at least 4 bytes (two non-empty strings).
	n := d.uvarint("member count")
	if d.err == nil && n > uint64(len(body)-d.off)/4 {
		d.fail("%d members declared but only %d bytes left", n, len(body)-d.off)
	}
	if d.err != nil {
		return nil, d.err
	}
	st.members = make(map[string]string, n)
	prev := ""
	d.what = "member"
	for i := 0; i < int(n) && d.err == nil; i++ {
		d.op = i
		id := d.str("member id", MaxKeyLen)
		addr := d.str("member address", MaxValueLen)
		switch {
		case d.err != nil:
		case id == "" || addr == "":
			d.fail("empty member id or address")
		case i > 0 && id <= prev:
			d.fail("member ids not strictly increasing")
		}
		st.members[id], prev = addr, id
	}
	d.op = -1

	// Records: each takes at least 4 bytes (a key of 3 or more, a value).
	n = d.uvarint("record count")
	if d.err == nil && n > uint64(len(body)-d.off)/4 {
		d.fail("%d records declared but only %d bytes left", n, len(body)-d.off)
	}
	if d.err != nil {
		return nil, d.err
	}
	st.kv = make(map[string]*record, n)
	d.what = "record"
	for i := 0; i < int(n) && d.err == nil; i++ {
		d.op = i
		k := d.str("key", len(lockPrefix)+MaxKeyLen)
		if d.err != nil {
			break
		}
		if i > 0 && k <= prev {
			d.fail("keys not strictly increasing")
			break
		}
		prev = k
		r := &record{}
		switch {
		case len(k) > len(lockPrefix) && strings.HasPrefix(k, lockPrefix):
			d.decodeLock(r, st.counter)
			st.nlocks++
		case len(k) > len(dataPrefix) && strings.HasPrefix(k, dataPrefix):
		default:
			d.fail("key %q has no known prefix", k)
		}
		r.value = d.str("value", MaxValueLen)
		st.kv[k] = r
	}
	d.op = -1
	if d.err == nil && d.off != len(body) {
		d.fail("%d trailing bytes", len(body)-d.off)
	}
	if d.err != nil {
		return nil, d.err
	}
	return st, nil
}

// decodeLock reads a lock record's fields after its key (but not its value).
func (d *decoder) decodeLock(r *record, counter uint64) {
	r.owner = d.str("owner", MaxOwnerLen)
	if d.err != nil {
		return
	}
	if d.off >= len(d.b) {
		d.fail("truncated handle")
		return
	}
	form := d.b[d.off]
	d.off++
	switch form {
	case 0:
		if len(d.b)-d.off < len(r.h) {
			d.fail("truncated handle")
			return
		}
		copy(r.h[:], d.b[d.off:])
		d.off += len(r.h)
	case 1:
		r.hstr = d.str("handle", MaxHandleLen)
		if d.err == nil && r.hstr == "" {
			d.fail("empty handle")
		} else if d.err == nil {
			if _, s := packHandle(r.hstr); s == "" {
				d.fail("handle stored as string, not as 16 bytes (non-canonical)")
			}
		}
	default:
		d.fail("unknown handle form %d", form)
	}
	r.token = d.uvarint("token")
	r.ttl = d.varint("ttl")
	r.expires = d.varint("expires")
	switch {
	case d.err != nil:
	case r.token == 0 || r.token > counter:
		d.fail("token %d outside 1..%d (the fencing counter)", r.token, counter)
	case r.ttl <= 0:
		d.fail("ttl %d is not positive", r.ttl)
	}
}
