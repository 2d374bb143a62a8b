package fsm

// Restore: decoding, validating and installing a snapshot.

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
)

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
			v2 = v2 || r.delay() != 0
		case len(k) > len(dataPrefix) && strings.HasPrefix(k, dataPrefix):
		default:
			d.fail("key %q has no known prefix", k)
		}
		r.setValue(d.str("value", MaxValueLen))
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
			r.setValue(d.str("value", MaxValueLen))
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
		hs := d.str("handle", MaxHandleLen)
		r.setHstr(hs)
		if d.err == nil && hs == "" {
			d.fail("empty handle")
		} else if d.err == nil {
			if _, s := packHandle(hs); s == "" {
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
		r.setDelay(d.varint("lock delay"))
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
	case r.delay() < 0 || r.delay() > int64(MaxLockDelay):
		d.fail("lock delay %d outside 0..%d", r.delay(), int64(MaxLockDelay))
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
		s := &session{}
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
