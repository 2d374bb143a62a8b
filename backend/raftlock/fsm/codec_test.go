package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// codecEntries are entries that exercise every field and extreme value.
func codecEntries() []Entry {
	es := []Entry{
		{},
		{Now: -1},
		{Now: math.MaxInt64, Ops: []Op{{Type: OpExtendAll}}},
		{Now: math.MinInt64, Ops: []Op{{
			Type: OpAcquire, Key: strings.Repeat("k", MaxKeyLen), Owner: strings.Repeat("o", MaxOwnerLen),
			Handle: strings.Repeat("h", MaxHandleLen), Token: math.MaxUint64, TTL: math.MinInt64, Value: make([]byte, MaxValueLen),
		}}},
		{Now: t0, Ops: []Op{
			{Type: OpRelease, Key: "k", Handle: hA, Token: 1},
			{Type: OpRenew, Key: "k", Handle: hA, Token: 1, TTL: time.Second},
			{Type: OpExpire, Key: "k", Token: 300},
			{Type: OpAppendData, Key: "d", Value: []byte{0, 1, 2}},
			{Type: OpSetMember, Key: "n1", Value: []byte("127.0.0.1:50051")},
			{Type: OpRemoveMember, Key: "n1"},
			{Type: OpAcquire, Key: "k", Owner: "ü", Handle: hX, TTL: math.MaxInt64, Value: []byte("v")},
		}},
	}
	for _, tc := range opTests {
		for _, s := range tc.steps {
			es = append(es, Entry{Now: s.now, Ops: s.ops})
		}
	}
	for _, tc := range primTests {
		for _, s := range tc.steps {
			es = append(es, Entry{Now: s.now, Ops: s.ops})
		}
	}
	return es
}

func entriesEqual(a, b Entry) bool {
	if a.Now != b.Now || len(a.Ops) != len(b.Ops) {
		return false
	}
	for i := range a.Ops {
		x, y := a.Ops[i], b.Ops[i]
		if !bytes.Equal(x.Value, y.Value) || x.Type != y.Type || x.Key != y.Key || x.Owner != y.Owner ||
			x.Handle != y.Handle || x.Token != y.Token || x.TTL != y.TTL || x.Mode != y.Mode || x.Permits != y.Permits || x.LockDelay != y.LockDelay {
			return false
		}
	}
	return true
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for i, e := range codecEntries() {
		if err := e.Validate(); err != nil {
			t.Fatalf("entry %d: Validate: %v", i, err)
		}
		b := Encode(e)
		want := byte(1)
		for _, o := range e.Ops {
			want = max(want, o.version())
		}
		if b[0] != want {
			t.Fatalf("entry %d: version byte %d, want %d", i, b[0], want)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("entry %d: Decode: %v", i, err)
		}
		if !entriesEqual(got, e) {
			t.Fatalf("entry %d: round trip\n got %+v\nwant %+v", i, got, e)
		}
		if !bytes.Equal(Encode(got), b) {
			t.Fatalf("entry %d: re-encoding differs", i)
		}
	}
	// Typical acquire: compact.
	if n := len(Encode(Entry{Now: t0, Ops: []Op{acq("tenant/resource-0001", "client-000000001", hA, 10*time.Second)}})); n > 90 {
		t.Errorf("a typical acquire encodes to %d bytes", n)
	}
	// Decoded strings must not alias the input.
	b := Encode(Entry{Ops: []Op{{Type: OpAppendData, Key: "k", Value: []byte("v")}}})
	e, _ := Decode(b)
	for i := range b {
		b[i] = 0
	}
	if e.Ops[0].Key != "k" || string(e.Ops[0].Value) != "v" {
		t.Error("decoded entry aliases the input buffer")
	}
}

func TestDecodeErrors(t *testing.T) {
	acquire := Encode(Entry{Now: 5, Ops: []Op{acq("k", "o", "h", 1)}})
	// acquire = 01 0a 01 | 01 1f 01'k' 01'o' 01'h' ttl 02
	with := func(i int, c byte) []byte {
		b := append([]byte{}, acquire...)
		b[i] = c
		return b
	}
	manyOps := binary.AppendUvarint([]byte{1, 0}, MaxOps+1)
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "empty input"},
		{"version", []byte{4, 0, 0}, "unknown format version 4"},
		{"v3 without v3 ops", []byte{3, 0, 0}, "version 3 entry that version 1 can express"},
		{"session op in v2", []byte{2, 0, 1, byte(OpSessionOpen), 0}, "unknown op type 10"},
		{"v2 without v2 ops", []byte{2, 0, 0}, "version 2 entry that version 1 can express"},
		{"v2 op type in v1", with(3, byte(OpAcquireAll)), "unknown op type 9"},
		{"v2 type 10", []byte{2, 0, 1, 10, 0}, "unknown op type 10"},
		{"v2 unknown flags", []byte{2, 0, 1, byte(OpAcquire), 0x80, 0x04}, "unknown field flags 0x200"},
		{"v2 zero mode", []byte{2, 0, 1, byte(OpAcquire), 0x40, 0}, "mode flagged present but zero"},
		{"v2 permits", Encode(Entry{Ops: []Op{{Type: OpAcquire, Permits: MaxPermits + 1}}}), "permits 65537, limit 65536"},
		{"group of 0", []byte{2, 0, 1, byte(OpAcquireAll), 0}, "group of 0 acquires"},
		{"group beyond ops", Encode(Entry{Ops: []Op{{Type: OpAcquireAll, Token: 2}, {Type: OpAcquire}}}), "group of 2 acquires, 1 ops follow"},
		{"group holds a release", Encode(Entry{Ops: []Op{{Type: OpAcquireAll, Token: 1}, {Type: OpRelease}}}), "release inside the group"},
		{"nested group", Encode(Entry{Ops: []Op{{Type: OpAcquireAll, Token: 2}, {Type: OpAcquire}, {Type: OpAcquireAll, Token: 1}, {Type: OpAcquire}}}), "acquire-all inside the group"},
		{"no now", []byte{1}, "truncated now"},
		{"no count", []byte{1, 0}, "truncated op count"},
		{"too many ops", manyOps, "100001 ops, limit 100000"},
		{"count beyond input", []byte{1, 0, 3, 1, 0}, "3 ops declared but only 2 bytes left"},
		{"trailing", append(append([]byte{}, acquire...), 7), "1 trailing bytes"},
		{"truncated", acquire[:len(acquire)-1], "truncated ttl"},
		{"truncated string", acquire[:6], "truncated key"},
		{"unknown type 0", with(3, 0), "unknown op type 0"},
		{"unknown type 9", with(3, 9), "unknown op type 9"},
		{"unknown flags", with(4, 0x7f), "unknown field flags 0x40"},
		{"overlong varint", []byte{1, 0x80, 0x00, 0}, "bad varint for now"},
		{"varint overflow", []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0}, "bad varint for now"},
		{"empty key flagged", []byte{1, 0, 1, 5, fKey, 0}, "key flagged present but zero"},
		{"zero token flagged", []byte{1, 0, 1, 4, fToken, 0}, "token flagged present but zero"},
		{"key too long", Encode(Entry{Ops: []Op{{Type: OpAppendData, Key: strings.Repeat("k", MaxKeyLen+1)}}}), "key is 1025 bytes, limit 1024"},
		{"owner too long", Encode(Entry{Ops: []Op{{Type: OpAcquire, Owner: strings.Repeat("o", MaxOwnerLen+1)}}}), "owner is 1025 bytes"},
		{"handle too long", Encode(Entry{Ops: []Op{{Type: OpAcquire, Handle: strings.Repeat("h", MaxHandleLen+1)}}}), "handle is 257 bytes, limit 256"},
		{"value too long", Encode(Entry{Ops: []Op{{Type: OpAppendData, Value: make([]byte, MaxValueLen+1)}}}), "value is 1048577 bytes"},
		{"huge length", []byte{1, 0, 1, 5, fValue, 0xff, 0xff, 0xff, 0xff, 0x0f}, "value is 4294967295 bytes"},
	} {
		e, err := Decode(tc.in)
		if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Decode = %v; want error containing %q", tc.name, err, tc.want)
		}
		if !reflect.DeepEqual(e, Entry{}) {
			t.Errorf("%s: Decode returned a partial entry %+v", tc.name, e)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := (Entry{Ops: make([]Op, MaxOps+1)}).Validate(); err == nil {
		t.Error("Validate accepted too many ops")
	}
	for _, o := range []Op{
		{Type: 0}, {Type: 9},
		{Type: OpAcquire, Key: strings.Repeat("k", MaxKeyLen+1)},
		{Type: OpAcquire, Owner: strings.Repeat("k", MaxOwnerLen+1)},
		{Type: OpAcquire, Handle: strings.Repeat("k", MaxHandleLen+1)},
		{Type: OpAcquire, Value: make([]byte, MaxValueLen+1)},
	} {
		err := o.Validate()
		if err == nil || !errors.Is(err, ErrMalformed) {
			t.Errorf("Validate(%v key %d owner %d handle %d value %d) = %v", o.Type, len(o.Key), len(o.Owner), len(o.Handle), len(o.Value), err)
		}
		if _, derr := Decode(Encode(Entry{Ops: []Op{o}})); (derr == nil) != (err == nil) {
			t.Errorf("Validate and Decode disagree: %v vs %v", err, derr)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, e := range codecEntries() {
		if b := Encode(e); len(b) < 4096 {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("decoded entry fails Validate: %v", err)
		}
		enc := Encode(e)
		if !bytes.Equal(enc, b) {
			t.Fatalf("non-canonical input accepted:\n in %x\nout %x", b, enc)
		}
		e2, err := Decode(enc)
		if err != nil || !reflect.DeepEqual(e, e2) {
			t.Fatalf("Decode(Encode(e)) = %+v, %v; want %+v", e2, err, e)
		}
	})
}
