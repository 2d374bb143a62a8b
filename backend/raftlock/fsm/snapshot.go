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
		if r.delay != 0 {
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
		buf = appendString(buf, r.value)
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
				buf = appendString(buf, r.value)
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
	if version >= snapVersionV2 {
		buf = binary.AppendVarint(buf, r.delay)
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

// state is a decoded snapshot, ready to be swapped into an FSM.
type state struct {
	kv              map[string]*record
	groups          map[string]*group
	delays          map[string]int64
	members         map[string]string
	sessions        map[string]*session
	counter, index  uint64
	now             int64
	nlocks, nshared int
	links           []event // session leases to link to their sessions
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
	if newerSnapshot(data, f.ReadsFormat()) {
		return fmt.Errorf("fsm: restore: %w: a snapshot of format %d, and this node reads up to format %d: run a binary that reads format %d",
			ErrUnknownFormat, data[len(snapMagic)], f.ReadsFormat(), data[len(snapMagic)])
	}
	st, err := decodeSnapshot(data, true)
	if err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	if g := gateOf(st.kv[dataPrefix+GateKey]); g.Format > f.ReadsFormat() {
		return fmt.Errorf("fsm: restore: %w: the snapshot's cluster writes format %d (its gate) and this node reads up to format %d",
			ErrUnknownFormat, g.Format, f.ReadsFormat())
	}
	f.install(st)
	return nil
}

// newerSnapshot reports whether data is a whole snapshot (its magic and
// its CRC-32C intact) of a format above reads: a newer binary's, not a
// corrupt one, which a node must not skip or fall back past.
func newerSnapshot(data []byte, reads uint8) bool {
	const head = len(snapMagic) + 1
	if len(data) < head+4 || string(data[:len(snapMagic)]) != snapMagic || data[len(snapMagic)] <= reads {
		return false
	}
	body := data[:len(data)-4]
	return binary.LittleEndian.Uint32(data[len(body):]) == crc32.Checksum(body, crcTable)
}

// install replaces f's state with st.
func (f *FSM) install(st *state) {
	f.mu.Lock()
	f.kv, f.members, f.groups, f.delays, f.sessions = st.kv, st.members, st.groups, st.delays, st.sessions
	if f.sessions == nil {
		f.sessions = make(map[string]*session)
	}
	if f.groups == nil {
		f.groups = make(map[string]*group)
	}
	if f.delays == nil {
		f.delays = make(map[string]int64)
	}
	f.counter, f.index, f.now, f.nlocks, f.nshared = st.counter, st.index, st.now, st.nlocks, st.nshared
	f.gate = gateOf(f.kv[dataPrefix+GateKey])
	f.recount()
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
	version := data[len(snapMagic)]
	if version < snapVersion || version > snapVersionV3 {
		return nil, fmt.Errorf("%w: unknown format version %d (want %d to %d)", ErrCorruptSnapshot, version, snapVersion, snapVersionV3)
	}
	body := data[:len(data)-4]
	if want, got := binary.LittleEndian.Uint32(data[len(body):]), crc32.Checksum(body, crcTable); checkCRC && want != got {
		return nil, fmt.Errorf("%w: checksum mismatch (stored %#08x, computed %#08x)", ErrCorruptSnapshot, want, got)
	}
	d := decoder{b: body, off: head, op: -1, kind: ErrCorruptSnapshot, what: "record", version: version}
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
	v2 := false // the state needs version 2
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
			d.pending(st, k[len(lockPrefix):], r)
			st.nlocks++
			v2 = v2 || r.delay != 0
		case len(k) > len(dataPrefix) && strings.HasPrefix(k, dataPrefix):
		default:
			d.fail("key %q has no known prefix", k)
		}
		r.value = d.str("value", MaxValueLen)
		st.kv[k] = r
	}
	d.op = -1
	if version >= snapVersionV2 && d.err == nil {
		d.decodeGroups(st, body)
		v2 = v2 || len(st.groups) > 0 || len(st.delays) > 0
		if d.err == nil && !v2 && version == snapVersionV2 {
			d.fail("version 2 snapshot of a state that version 1 can express (non-canonical)")
		}
	}
	if version >= snapVersionV3 && d.err == nil {
		d.decodeSessions(st, body)
	}
	if d.err == nil && d.off != len(body) {
		d.fail("%d trailing bytes", len(body)-d.off)
	}
	if d.err != nil {
		return nil, d.err
	}
	return st, nil
}

// decodeGroups reads version 2's groups and lock-delays into st.
func (d *decoder) decodeGroups(st *state, body []byte) {
	// Groups: each takes at least 3 bytes (key, permits, count).
	n := d.uvarint("group count")
	if d.err == nil && n > uint64(len(body)-d.off)/3 {
		d.fail("%d groups declared but only %d bytes left", n, len(body)-d.off)
	}
	if d.err != nil {
		return
	}
	st.groups = make(map[string]*group, n)
	d.what = "group"
	prev := ""
	for i := 0; i < int(n) && d.err == nil; i++ {
		d.op = i
		k := d.str("key", MaxKeyLen)
		p := d.uvarint("permits")
		m := d.uvarint("holder count")
		switch {
		case d.err != nil:
			return
		case k == "":
			d.fail("empty key")
		case i > 0 && k <= prev:
			d.fail("keys not strictly increasing")
		case st.kv[lockPrefix+k] != nil:
			d.fail("key %q held both exclusively and shared", k)
		case p > MaxPermits:
			d.fail("permits %d, limit %d", p, MaxPermits)
		case m == 0 || m > MaxHolders || (p > 0 && m > p):
			d.fail("%d holders (permits %d)", m, p)
		case m > uint64(len(body)-d.off)/8:
			d.fail("%d holders declared but only %d bytes left", m, len(body)-d.off)
		}
		if d.err != nil {
			return
		}
		prev = k
		g := &group{permits: uint32(p), holders: make([]*record, 0, m)}
		for j := 0; j < int(m) && d.err == nil; j++ {
			r := &record{}
			d.decodeLock(r, st.counter)
			d.pending(st, k, r)
			r.value = d.str("value", MaxValueLen)
			if d.err == nil && j > 0 && r.token <= g.holders[j-1].token {
				d.fail("holder tokens not strictly increasing")
			}
			g.holders = append(g.holders, r)
		}
		st.groups[k] = g
		st.nshared += len(g.holders)
	}
	d.op = -1
	if d.err != nil {
		return
	}
	// Lock-delays: each takes at least 2 bytes.
	n = d.uvarint("delay count")
	if d.err == nil && n > uint64(len(body)-d.off)/2 {
		d.fail("%d delays declared but only %d bytes left", n, len(body)-d.off)
	}
	if d.err != nil {
		return
	}
	st.delays = make(map[string]int64, n)
	d.what = "delay"
	prev = ""
	for i := 0; i < int(n) && d.err == nil; i++ {
		d.op = i
		k := d.str("key", MaxKeyLen)
		until := d.varint("end")
		switch {
		case d.err != nil:
		case k == "":
			d.fail("empty key")
		case i > 0 && k <= prev:
			d.fail("keys not strictly increasing")
		case until <= st.now:
			d.fail("lock-delay ended at %d, before now %d (non-canonical)", until, st.now)
		}
		prev = k
		st.delays[k] = until
	}
	d.op = -1
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
	if d.version >= snapVersionV2 {
		r.delay = d.varint("lock delay")
	}
	if d.version >= snapVersionV3 {
		if sid := d.str("session", MaxSessionLen); sid != "" {
			// Linked to its session once the sessions are read
			// (decodeSessions); meanwhile a placeholder holds the id.
			r.sess = &session{id: sid}
		}
	}
	switch {
	case d.err != nil:
	case r.token == 0 || r.token > counter:
		d.fail("token %d outside 1..%d (the fencing counter)", r.token, counter)
	case r.ttl <= 0:
		d.fail("ttl %d is not positive", r.ttl)
	case r.delay < 0 || r.delay > int64(MaxLockDelay):
		d.fail("lock delay %d outside 0..%d", r.delay, int64(MaxLockDelay))
	}
}

// pending remembers a session lease read from a snapshot, to link it to
// its session once the sessions are read.
func (d *decoder) pending(st *state, key string, r *record) {
	if r.sess != nil && d.err == nil {
		st.links = append(st.links, event{key, r})
		if r.expires != 0 {
			d.fail("session lease with expires %d, want 0 (non-canonical)", r.expires)
		}
	}
}

// decodeSessions reads version 3's sessions into st and links the session
// leases to them.
func (d *decoder) decodeSessions(st *state, body []byte) {
	// Sessions: each takes at least 4 bytes.
	n := d.uvarint("session count")
	if d.err == nil && n > uint64(len(body)-d.off)/4 {
		d.fail("%d sessions declared but only %d bytes left", n, len(body)-d.off)
	}
	if d.err != nil {
		return
	}
	if n == 0 {
		d.fail("version 3 snapshot without sessions (non-canonical)")
		return
	}
	st.sessions = make(map[string]*session, n)
	d.what = "session"
	prev := ""
	for i := 0; i < int(n) && d.err == nil; i++ {
		d.op = i
		s := &session{leases: make(map[sessKey]struct{})}
		s.id = d.str("id", MaxSessionLen)
		s.owner = d.str("owner", MaxOwnerLen)
		s.ttl = d.varint("ttl")
		s.expires.Store(d.varint("expires"))
		switch {
		case d.err != nil:
		case s.id == "":
			d.fail("empty session id")
		case i > 0 && s.id <= prev:
			d.fail("session ids not strictly increasing")
		case s.ttl <= 0:
			d.fail("ttl %d is not positive", s.ttl)
		}
		prev = s.id
		st.sessions[s.id] = s
	}
	d.op = -1
	if d.err != nil {
		return
	}
	for _, e := range st.links {
		s := st.sessions[e.rec.sess.id]
		if s == nil {
			d.fail("lease of %q in an unknown session", e.key)
			return
		}
		e.rec.sess = s
		e.rec.link(e.key)
	}
	st.links = nil
}
