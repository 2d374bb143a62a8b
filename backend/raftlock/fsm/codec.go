package fsm

import (
	"encoding/binary"
	"fmt"
	"time"
)

// The entry format versions: the first byte of every encoded Entry.
// Encode writes version 1 for an entry that version 1 can express (no
// OpAcquireAll, no Mode, Permits or LockDelay), so that binaries that know
// only version 1 still apply everything an exclusive-only workload writes
// during a rolling upgrade, and version 2 otherwise.
const (
	entryVersion   = 1
	entryVersionV2 = 2
	entryVersionV3 = 3 // sessions: the session ops, and Op.Session
)

// Field-presence bits of an encoded op: only non-zero fields are written.
const (
	fKey = 1 << iota
	fOwner
	fHandle
	fToken
	fTTL
	fValue
	fMode    // version 2 on
	fPermits // version 2 on
	fDelay   // version 2 on
	fSession // version 3 on
	fAll     = fKey | fOwner | fHandle | fToken | fTTL | fValue
	fAllV2   = fAll | fMode | fPermits | fDelay
	fAllV3   = fAllV2 | fSession
)

// Encode returns the binary form of e, version 1:
//
//	byte     version (1)
//	varint   Now
//	uvarint  number of ops
//	per op:  byte Type, byte presence flags, then the present (non-zero)
//	         fields in the order Key, Owner, Handle (uvarint length + bytes),
//	         Token (uvarint), TTL (varint), Value (uvarint length + bytes).
//
// Version 2 (written when an op needs it, see entryVersionV2) differs in
// the presence flags, a uvarint instead of a byte, and in three more
// optional fields after Value: Mode (byte), Permits (uvarint) and
// LockDelay (varint); and it may hold OpAcquireAll.
//
// Version 3 (written when an op needs it: a session op, or an acquire in a
// session) is version 2 with one more optional field after LockDelay:
// Session (uvarint length + bytes); and it may hold the session ops.
//
// The encoding is canonical: Decode accepts exactly the outputs of Encode,
// and Encode(Decode(b)) == b. An empty Value is encoded as absent, so it
// decodes as nil. Encode does not check limits: an Entry that fails
// Entry.Validate encodes to bytes that Decode (and so Apply) rejects.
func Encode(e Entry) []byte {
	n := 1 + binary.MaxVarintLen64*2
	for i := range e.Ops {
		o := &e.Ops[i]
		n += 2 + 5*3 + binary.MaxVarintLen64*3 + len(o.Key) + len(o.Owner) + len(o.Handle) + len(o.Value)
	}
	version := byte(entryVersion)
	for i := range e.Ops {
		version = max(version, e.Ops[i].version())
	}
	b := make([]byte, 0, n)
	b = append(b, version)
	b = binary.AppendVarint(b, e.Now)
	b = binary.AppendUvarint(b, uint64(len(e.Ops)))
	for i := range e.Ops {
		o := &e.Ops[i]
		var flags uint64
		if o.Key != "" {
			flags |= fKey
		}
		if o.Owner != "" {
			flags |= fOwner
		}
		if o.Handle != "" {
			flags |= fHandle
		}
		if o.Token != 0 {
			flags |= fToken
		}
		if o.TTL != 0 {
			flags |= fTTL
		}
		if len(o.Value) != 0 {
			flags |= fValue
		}
		if o.Mode != 0 {
			flags |= fMode
		}
		if o.Permits != 0 {
			flags |= fPermits
		}
		if o.LockDelay != 0 {
			flags |= fDelay
		}
		if o.Session != "" {
			flags |= fSession
		}
		b = append(b, byte(o.Type))
		if version == entryVersion {
			b = append(b, byte(flags))
		} else {
			b = binary.AppendUvarint(b, flags)
		}
		if flags&fKey != 0 {
			b = appendString(b, o.Key)
		}
		if flags&fOwner != 0 {
			b = appendString(b, o.Owner)
		}
		if flags&fHandle != 0 {
			b = appendString(b, o.Handle)
		}
		if flags&fToken != 0 {
			b = binary.AppendUvarint(b, o.Token)
		}
		if flags&fTTL != 0 {
			b = binary.AppendVarint(b, int64(o.TTL))
		}
		if flags&fValue != 0 {
			b = binary.AppendUvarint(b, uint64(len(o.Value)))
			b = append(b, o.Value...)
		}
		if flags&fMode != 0 {
			b = append(b, o.Mode)
		}
		if flags&fPermits != 0 {
			b = binary.AppendUvarint(b, uint64(o.Permits))
		}
		if flags&fDelay != 0 {
			b = binary.AppendVarint(b, int64(o.LockDelay))
		}
		if flags&fSession != 0 {
			b = appendString(b, o.Session)
		}
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Decode parses the output of Encode. It rejects, with an error wrapping
// ErrMalformed that says what is wrong and where: empty input, an unknown
// version, truncated data, trailing bytes, unknown op types or presence
// flags, non-canonical encodings (over-long varints, a field flagged present
// but zero), strings and values over the limits (MaxKeyLen, MaxOwnerLen,
// MaxHandleLen, MaxValueLen) and more than MaxOps ops. It never panics, and
// it checks every length and count against the remaining input before
// allocating. Every string and value of the result is a separate allocation,
// independent of b.
func Decode(b []byte) (Entry, error) {
	var e Entry
	if len(b) == 0 {
		return e, fmt.Errorf("%w: empty input", ErrMalformed)
	}
	if b[0] < entryVersion || b[0] > entryVersionV3 {
		return e, fmt.Errorf("%w: unknown format version %d (want %d to %d)", ErrMalformed, b[0], entryVersion, entryVersionV3)
	}
	d := decoder{b: b, off: 1, op: -1, kind: ErrMalformed, version: b[0]}
	e.Now = d.varint("now")
	n := d.uvarint("op count")
	if d.err != nil {
		return Entry{}, d.err
	}
	if n > MaxOps {
		return Entry{}, d.fail("%d ops, limit %d", n, MaxOps)
	}
	// Every op takes at least 2 bytes: don't trust n beyond what is left.
	if n > uint64(len(b)-d.off)/2 {
		return Entry{}, d.fail("truncated: %d ops declared but only %d bytes left", n, len(b)-d.off)
	}
	if n > 0 {
		e.Ops = make([]Op, n)
	}
	for i := range e.Ops {
		d.op = i
		d.decodeOp(&e.Ops[i])
		if d.err != nil {
			return Entry{}, d.err
		}
	}
	if d.off != len(b) {
		d.op = -1
		return Entry{}, d.fail("%d trailing bytes", len(b)-d.off)
	}
	if d.version > entryVersion {
		need := byte(entryVersion)
		for i := range e.Ops {
			need = max(need, e.Ops[i].version())
		}
		if need < d.version {
			d.op = -1
			return Entry{}, d.fail("version %d entry that version %d can express (non-canonical)", d.version, need)
		}
	}
	if err := checkGroups(e.Ops); err != nil {
		return Entry{}, err
	}
	return e, nil
}

func (d *decoder) decodeOp(o *Op) {
	if len(d.b)-d.off < 2 {
		d.fail("truncated op header")
		return
	}
	o.Type, d.off = OpType(d.b[d.off]), d.off+1
	maxType, all := maxOpType, uint64(fAllV3)
	switch d.version {
	case entryVersion:
		maxType, all = maxV1OpType, fAll
	case entryVersionV2:
		maxType, all = maxV2OpType, fAllV2
	}
	if o.Type < OpAcquire || o.Type > maxType {
		d.fail("unknown op type %d", uint8(o.Type))
		return
	}
	var flags uint64
	if d.version == entryVersion {
		flags = uint64(d.b[d.off])
		d.off++
	} else {
		flags = d.uvarint("field flags")
		if d.err != nil {
			return
		}
	}
	if flags&^all != 0 {
		d.fail("unknown field flags %#x", flags&^all)
		return
	}
	if flags&fKey != 0 {
		o.Key = d.str("key", MaxKeyLen)
		d.nonZero(o.Key == "", "key")
	}
	if flags&fOwner != 0 {
		o.Owner = d.str("owner", MaxOwnerLen)
		d.nonZero(o.Owner == "", "owner")
	}
	if flags&fHandle != 0 {
		o.Handle = d.str("handle", MaxHandleLen)
		d.nonZero(o.Handle == "", "handle")
	}
	if flags&fToken != 0 {
		o.Token = d.uvarint("token")
		d.nonZero(o.Token == 0, "token")
	}
	if flags&fTTL != 0 {
		o.TTL = time.Duration(d.varint("ttl"))
		d.nonZero(o.TTL == 0, "ttl")
	}
	if flags&fValue != 0 {
		if v := d.bytes("value", MaxValueLen); d.err == nil {
			d.nonZero(len(v) == 0, "value")
			o.Value = append([]byte(nil), v...)
		}
	}
	if flags&fMode != 0 {
		if d.err == nil && d.off >= len(d.b) {
			d.fail("truncated mode")
			return
		}
		if d.err == nil {
			o.Mode, d.off = d.b[d.off], d.off+1
			d.nonZero(o.Mode == 0, "mode")
		}
	}
	if flags&fPermits != 0 {
		p := d.uvarint("permits")
		if d.err == nil && p > MaxPermits {
			d.fail("permits %d, limit %d", p, MaxPermits)
		}
		o.Permits = uint32(p)
		d.nonZero(p == 0, "permits")
	}
	if flags&fDelay != 0 {
		o.LockDelay = time.Duration(d.varint("lock delay"))
		d.nonZero(o.LockDelay == 0, "lock delay")
	}
	if flags&fSession != 0 {
		o.Session = d.str("session", MaxSessionLen)
		d.nonZero(o.Session == "", "session")
	}
	if d.err == nil && o.Type == OpAcquireAll && (o.Token < 1 || o.Token > MaxGroup) {
		d.fail("group of %d acquires, want 1..%d", o.Token, MaxGroup)
	}
}

// decoder reads canonical varints and length-prefixed strings from b,
// remembering the first error (later calls are no-ops returning zero values).
type decoder struct {
	b    []byte
	off  int
	op   int    // index of the op or record being decoded, -1 outside (for messages)
	kind error  // the sentinel that errors wrap
	what string // "op" or "record", for messages
	err  error
	// version is the entry format version being decoded (0 for
	// snapshots).
	version byte
}

func (d *decoder) fail(format string, args ...any) error {
	if d.err == nil {
		where := fmt.Sprintf("at byte %d", d.off)
		if d.op >= 0 {
			what := d.what
			if what == "" {
				what = "op"
			}
			where = fmt.Sprintf("%s %d, byte %d", what, d.op, d.off)
		}
		d.err = fmt.Errorf("%w: %s: %s", d.kind, where, fmt.Sprintf(format, args...))
	}
	return d.err
}

func (d *decoder) nonZero(zero bool, what string) {
	if zero && d.err == nil {
		d.fail("%s flagged present but zero (non-canonical)", what)
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := readUvarint(d.b[d.off:])
	switch {
	case n == 0:
		d.fail("truncated %s", what)
		return 0
	case n < 0:
		d.fail("bad varint for %s", what)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint(what string) int64 {
	u := d.uvarint(what)
	// Zig-zag decoding, as in encoding/binary.Varint.
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}

// bytes returns the next length-prefixed byte string, aliasing d.b.
func (d *decoder) bytes(what string, limit int) []byte {
	n := d.uvarint(what + " length")
	if d.err != nil {
		return nil
	}
	if n > uint64(limit) {
		d.fail("%s is %d bytes, limit %d", what, n, limit)
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail("truncated %s: %d bytes declared, %d left", what, n, len(d.b)-d.off)
		return nil
	}
	v := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return v
}

func (d *decoder) str(what string, limit int) string {
	return string(d.bytes(what, limit))
}

// readUvarint is binary.Uvarint that also rejects non-minimal encodings
// (n < 0 for those, as for overflow): the canonical form has no trailing
// zero groups.
func readUvarint(b []byte) (uint64, int) {
	v, n := binary.Uvarint(b)
	if n > 1 && b[n-1] == 0 {
		return 0, -n
	}
	return v, n
}
