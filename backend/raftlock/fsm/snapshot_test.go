package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestDeterminism(t *testing.T) {
	log := randomLog(t, 42, 4000)
	a, b := New(), New()
	for i, e := range log {
		apply(t, a, uint64(i+1), e)
	}
	time.Sleep(100 * time.Millisecond) // the wall clock must not matter
	for i, e := range log {
		apply(t, b, uint64(i+1), e)
	}
	if a.NumLocks() == 0 || len(a.Members()) == 0 || a.LastToken() < 100 {
		t.Fatalf("random log too tame: %d locks, %d members, %d tokens", a.NumLocks(), len(a.Members()), a.LastToken())
	}
	sa, sb := snapBytes(t, a), snapBytes(t, b)
	if !bytes.Equal(sa, sb) {
		t.Fatal("two FSMs fed the same log have different snapshots")
	}
	if !bytes.Equal(snapBytes(t, a), sa) {
		t.Fatal("two snapshots of one FSM differ")
	}
	c := restored(t, sa)
	if sc := snapBytes(t, c); !bytes.Equal(sc, sa) {
		t.Fatal("an FSM restored from a snapshot snapshots differently")
	}
	if c.AppliedIndex() != uint64(len(log)) || c.Now() != a.Now() || c.LastToken() != a.LastToken() || c.NumLocks() != a.NumLocks() {
		t.Fatalf("restored index %d now %d token %d locks %d", c.AppliedIndex(), c.Now(), c.LastToken(), c.NumLocks())
	}
	// The restored FSM goes on exactly like the original.
	for i, e := range randomLog(t, 43, 300) {
		ra, rc := apply(t, a, uint64(len(log)+i+1), e), apply(t, c, uint64(len(log)+i+1), e)
		if fmt.Sprint(ra) != fmt.Sprint(rc) {
			t.Fatalf("entry %d after restore: %v vs %v", i, rc, ra)
		}
	}
	if !bytes.Equal(snapBytes(t, a), snapBytes(t, c)) {
		t.Fatal("original and restored FSM diverged")
	}
}

func TestSnapshotIsPointInTime(t *testing.T) {
	f := New()
	apply(t, f, 1, Entry{Now: t0, Ops: []Op{acq("a", "o", hA, s10), acq("b", "o", hB, s10)}})
	want := snapBytes(t, f)
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	apply(t, f, 2, Entry{Now: t0 + sec, Ops: []Op{renew("a", hA, 1, s10), rel("b", hB, 2), acq("c", "o", hA, s10),
		{Type: OpAppendData, Key: "d", Value: []byte("x")}, {Type: OpSetMember, Key: "n", Value: []byte("x")}, {Type: OpExtendAll}}})
	var sink memSink
	if err := s.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	s.Release()
	if !bytes.Equal(sink.Bytes(), want) {
		t.Fatal("entries applied after Snapshot changed what Persist wrote")
	}
}

func TestPersistCancelsOnError(t *testing.T) {
	f := New()
	for i, e := range randomLog(t, 5, 300) {
		apply(t, f, uint64(i+1), e)
	}
	s, _ := f.Snapshot()
	sink := memSink{failAfter: 10}
	if err := s.Persist(&sink); err == nil || !sink.cancelled || sink.closed {
		t.Fatalf("Persist = %v, cancelled %v, closed %v", err, sink.cancelled, sink.closed)
	}
}

// snapWith builds a snapshot with a valid header and checksum around body.
func snapWith(body ...[]byte) []byte {
	b := []byte(snapMagic + "\x01")
	for _, p := range body {
		b = append(b, p...)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

func str(s string) []byte { return appendString(nil, s) }
func uv(v uint64) []byte  { return binary.AppendUvarint(nil, v) }
func sv(v int64) []byte   { return binary.AppendVarint(nil, v) }

// lockRec encodes a lock record with a compact handle.
func lockRec(key string, token uint64, ttl int64) []byte {
	b := append(str("l/"+key), str("owner")...)
	b = append(b, 0)
	b = append(b, make([]byte, 16)...)
	return append(append(append(append(b, uv(token)...), sv(ttl)...), sv(t0)...), str("")...)
}

type closeRecorder struct {
	readCloser
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestRestoreRejectsCorrupt(t *testing.T) {
	src := New()
	for i, e := range randomLog(t, 11, 500) {
		apply(t, src, uint64(i+1), e)
	}
	good := snapBytes(t, src)
	header := append(append(uv(7), uv(5)...), sv(t0)...) // index 7, counter 5, now t0
	noMembers := uv(0)
	flipped := append([]byte{}, good...)
	flipped[len(flipped)/2] ^= 0x10
	for _, tc := range []struct {
		name, want string
		in         []byte
	}{
		{"empty", "too short", nil},
		{"bad magic", "bad magic", append([]byte("XXXX"), good[4:]...)},
		{"version", "unknown format version 9", append([]byte(snapMagic+"\x09"), good[5:]...)},
		{"bit flip", "checksum mismatch", flipped},
		{"truncated", "checksum mismatch", good[:len(good)-10]},
		{"trailing", "checksum mismatch", append(append([]byte{}, good...), 0)},
		{"truncated body", "truncated", snapWith(header[:2])},
		{"body trailing", "1 trailing bytes", snapWith(header, noMembers, uv(0), []byte{0})},
		{"member count", "9 members declared", snapWith(header, uv(9), str("n"), str("a"))},
		{"members unsorted", "member ids not strictly increasing", snapWith(header, uv(2), str("n2"), str("a"), str("n1"), str("a"), uv(0))},
		{"empty member", "empty member id", snapWith(header, uv(1), str(""), str("a"), uv(0))},
		{"record count", "1000 records declared", snapWith(header, noMembers, uv(1000), lockRec("a", 1, 1))},
		{"keys unsorted", "keys not strictly increasing", snapWith(header, noMembers, uv(2), lockRec("b", 1, 1), lockRec("a", 2, 1))},
		{"duplicate key", "keys not strictly increasing", snapWith(header, noMembers, uv(2), lockRec("a", 1, 1), lockRec("a", 2, 1))},
		{"unknown prefix", `key "x/a" has no known prefix`, snapWith(header, noMembers, uv(1), str("x/a"), str("v"))},
		{"bare prefix", `key "d/" has no known prefix`, snapWith(header, noMembers, uv(1), str("d/"), str("v"))},
		{"token above counter", "token 6 outside 1..5", snapWith(header, noMembers, uv(1), lockRec("a", 6, 1))},
		{"token zero", "token 0 outside", snapWith(header, noMembers, uv(1), lockRec("a", 0, 1))},
		{"ttl zero", "ttl 0 is not positive", snapWith(header, noMembers, uv(1), lockRec("a", 1, 0))},
		{"handle form", "unknown handle form 2", snapWith(header, noMembers, uv(1), str("l/a"), str("o"), []byte{2})},
		{"handle not compact", "non-canonical", snapWith(header, noMembers, uv(1), str("l/a"), str("o"), []byte{1}, str(hA), uv(1), sv(1), sv(1), str(""))},
		{"empty handle", "empty handle", snapWith(header, noMembers, uv(1), str("l/a"), str("o"), []byte{1}, str(""), uv(1), sv(1), sv(1), str(""))},
		{"overlong varint", "bad varint for applied index", snapWith([]byte{0x81, 0x00})},
		{"huge value", "value is 68719476735 bytes", snapWith(header, noMembers, uv(1), str("d/a"), uv(1<<36-1))},
	} {
		f := New()
		apply(t, f, 1, Entry{Now: t0, Ops: []Op{acq("keep", "o", hA, s10)}})
		before := snapBytes(t, f)
		rc := &closeRecorder{readCloser: readCloser{bytes.NewReader(tc.in)}}
		err := f.Restore(rc)
		if err == nil || !errors.Is(err, ErrCorruptSnapshot) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Restore = %v; want an ErrCorruptSnapshot containing %q", tc.name, err, tc.want)
		}
		if !rc.closed {
			t.Errorf("%s: Restore did not close its reader", tc.name)
		}
		if !bytes.Equal(snapBytes(t, f), before) {
			t.Errorf("%s: a failed Restore changed the state", tc.name)
		}
	}
	// A valid hand-built snapshot restores.
	f := restored(t, snapWith(header, uv(1), str("n1"), str("addr"), uv(2), str("d/x"), str("v"), lockRec("x", 5, 1)))
	if l, found := f.Lock("x"); !found || l.Token != 5 || l.Handle != strings.Repeat("0", 32) || f.LastToken() != 5 || f.AppliedIndex() != 7 {
		t.Errorf("hand-built snapshot: %+v %v, token %d index %d", l, found, f.LastToken(), f.AppliedIndex())
	}
}

// build100k returns an FSM holding n locks with ~20-byte keys, 16-byte
// owners and hex handles (every 100th handle is not hex, every 10th lock has
// a value), plus a little data and three members.
func build100k(t testing.TB, n int) *FSM {
	f := New()
	r := rand.New(rand.NewPCG(1, 2))
	idx := uint64(0)
	apply(t, f, idx+1, Entry{Now: t0, Ops: []Op{
		{Type: OpSetMember, Key: "1", Value: []byte("10.0.0.1:50051")},
		{Type: OpSetMember, Key: "2", Value: []byte("10.0.0.2:50052")},
		{Type: OpSetMember, Key: "3", Value: []byte("10.0.0.3:50053")},
		{Type: OpAppendData, Key: "config", Value: []byte("{}")},
	}})
	idx++
	for i := 0; i < n; {
		e := Entry{Now: t0 + int64(i)}
		for j := 0; j < 1000 && i < n; j, i = j+1, i+1 {
			o := acq(fmt.Sprintf("tenant-%03d/res-%06d", i%997, i), fmt.Sprintf("client-%09d", r.IntN(1e9)), hexHandle(r), time.Duration(1+r.IntN(60))*time.Second)
			if i%100 == 0 {
				o.Handle = fmt.Sprintf("custom-handle-%d", i)
			}
			if i%10 == 0 {
				o.Value = []byte("some value")
			}
			e.Ops = append(e.Ops, o)
		}
		idx++
		apply(t, f, idx, e)
	}
	return f
}

func TestSnapshotRestore100k(t *testing.T) {
	const n = 100_000
	a := build100k(t, n)
	if a.NumLocks() != n || a.LastToken() != n {
		t.Fatalf("built %d locks, counter %d", a.NumLocks(), a.LastToken())
	}
	sa := snapBytes(t, a)
	c := restored(t, sa)
	if !bytes.Equal(snapBytes(t, c), sa) {
		t.Fatal("restored FSM snapshots differently")
	}
	if c.NumLocks() != n || c.LastToken() != n || c.Now() != a.Now() || c.AppliedIndex() != a.AppliedIndex() || len(c.Members()) != 3 {
		t.Fatalf("restored: %d locks, counter %d, now %d, index %d, members %v", c.NumLocks(), c.LastToken(), c.Now(), c.AppliedIndex(), c.Members())
	}
	seen := 0
	c.ForEachLock(func(l Lock) bool {
		seen++
		if orig, found := a.Lock(l.Key); !found || !lockEqual(orig, l) {
			t.Fatalf("restored %+v, original %+v", l, orig)
		}
		return true
	})
	if seen != n {
		t.Fatalf("ForEachLock saw %d locks", seen)
	}
	if v, _ := c.Data("config"); string(v) != "{}" {
		t.Fatalf("restored data %q", v)
	}
	// Tokens continue above the restored counter, and the restored FSM judges
	// holders like the original.
	next := Entry{Now: a.Now() + 30*sec, Ops: []Op{
		acq("fresh", "o", hA, s10),
		acq("tenant-000/res-000000", "o", hB, s10), // TTL ≤ 60s: maybe expired
		{Type: OpExtendAll},
	}}
	ra, rc := apply(t, a, a.AppliedIndex()+1, next), apply(t, c, c.AppliedIndex()+1, next)
	if ra[0].Token != n+1 || fmt.Sprint(ra) != fmt.Sprint(rc) {
		t.Fatalf("after restore: %+v, original %+v", rc, ra)
	}
	if !bytes.Equal(snapBytes(t, a), snapBytes(t, c)) {
		t.Fatal("original and restored FSM diverged")
	}
}

// TestHeapPerLock asserts the memory goal: at most 250 heap bytes per held
// lock (20-byte key, 16-byte owner, 32-hex-char handle, no value).
func TestHeapPerLock(t *testing.T) {
	const n = 100_000
	r := rand.New(rand.NewPCG(3, 4))
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	f := New()
	for i := 0; i < n; {
		e := Entry{Now: t0}
		for j := 0; j < 1000; j, i = j+1, i+1 {
			e.Ops = append(e.Ops, acq(fmt.Sprintf("lockkey-%012d", i), fmt.Sprintf("owner-%010d", i), hexHandle(r), time.Minute))
		}
		apply(t, f, uint64(i/1000), e)
	}
	after := heap()
	if f.NumLocks() != n {
		t.Fatalf("%d locks", f.NumLocks())
	}
	per := float64(int64(after)-int64(before)) / n
	t.Logf("heap per held lock: %.1f bytes", per)
	if per > 250 {
		t.Errorf("heap per held lock %.1f bytes, want ≤ 250", per)
	}
	runtime.KeepAlive(f)
}

func FuzzRestore(f *testing.F) {
	src := New()
	for i, e := range randomLog(f, 13, 8) {
		apply(f, src, uint64(i+1), e)
	}
	f.Add(snapBytes(f, src))
	f.Add(snapBytes(f, New()))
	v2 := New()
	for i, e := range randomPrimLog(f, 5, 40) {
		apply(f, v2, uint64(i+1), e)
	}
	f.Add(snapBytes(f, v2))
	header := append(append(uv(7), uv(5)...), sv(t0)...)
	f.Add(snapWith(header, uv(1), str("n1"), str("addr"), uv(2), str("d/x"), str("v"), lockRec("x", 5, 1)))
	f.Fuzz(func(t *testing.T, b []byte) {
		// The real thing, checksum included: must not panic.
		g := New()
		if err := g.Restore(readCloser{bytes.NewReader(b)}); err == nil {
			if !bytes.Equal(snapBytes(t, g), b) {
				t.Fatal("restored snapshot re-encodes differently")
			}
		} else if !errors.Is(err, ErrCorruptSnapshot) && !(errors.Is(err, ErrUnknownFormat) && newerSnapshot(b, MaxFormat)) {
			t.Fatalf("error %v does not wrap ErrCorruptSnapshot (nor ErrUnknownFormat for an intact snapshot of a newer format)", err)
		}
		// The parser without the checksum, so that mutations reach it.
		st, err := decodeSnapshot(b, false)
		if err != nil {
			return
		}
		h := New()
		h.install(st)
		out := snapBytes(t, h)
		if !bytes.Equal(out[:len(out)-4], b[:len(b)-4]) {
			t.Fatalf("non-canonical snapshot accepted:\n in %x\nout %x", b, out)
		}
		shared := 0
		for _, g := range st.groups {
			shared += len(g.holders)
		}
		if h.NumLocks() < 0 || h.NumLocks() > len(st.kv)+shared {
			t.Fatalf("NumLocks %d of %d records and %d shared holders", h.NumLocks(), len(st.kv), shared)
		}
	})
}
