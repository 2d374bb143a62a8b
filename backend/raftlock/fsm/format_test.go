package fsm

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestHaltOnUnreadableEntry: an FSM capped at format 2 meets a session
// (format 3) entry: it halts, applies neither that entry nor any later
// one (not even a format-1 entry it could read), and says which index and
// format stopped it. An uncapped FSM applies the same log.
func TestHaltOnUnreadableEntry(t *testing.T) {
	log := []Entry{
		{Now: t0, Ops: []Op{acq("a", "o", hA, s10)}},
		{Now: t0 + 1, Ops: []Op{{Type: OpSessionOpen, Key: "s1", Owner: "o", TTL: s10}}},
		{Now: t0 + 2, Ops: []Op{acq("b", "o", hA, s10)}},
	}
	capped, full := New(), New()
	capped.SetMaxFormat(2)
	var halted []error
	done := make(chan struct{})
	capped.SetHaltHandler(func(err error) { halted = append(halted, err); close(done) })
	for i, e := range log {
		idx := uint64(i + 1)
		apply(t, full, idx, e)
		out := capped.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: Encode(e)})
		if i == 0 {
			if _, ok := out.(*ApplyResult); !ok {
				t.Fatalf("entry 1 (format 1): %v", out)
			}
			continue
		}
		err, _ := out.(error)
		if !errors.Is(err, ErrUnknownFormat) || errors.Is(err, ErrMalformed) {
			t.Fatalf("entry %d on the capped FSM: %v, want an ErrUnknownFormat (not ErrMalformed: skipping it would diverge)", idx, out)
		}
	}
	<-done
	if len(halted) != 1 || !strings.Contains(halted[0].Error(), "log index 2") || !strings.Contains(halted[0].Error(), "format 3") {
		t.Errorf("halt handler got %v, want one error naming log index 2 and format 3", halted)
	}
	if capped.AppliedIndex() != 1 || capped.NumLocks() != 1 {
		t.Errorf("capped FSM after halting: applied %d, %d locks; want 1 and 1 (nothing after the unreadable entry)", capped.AppliedIndex(), capped.NumLocks())
	}
	if capped.Halted() == nil {
		t.Error("Halted() = nil after the halt")
	}
	if full.AppliedIndex() != 3 || full.NumLocks() != 2 || full.NumSessions() != 1 {
		t.Errorf("uncapped FSM: applied %d, %d locks, %d sessions; want 3, 2, 1", full.AppliedIndex(), full.NumLocks(), full.NumSessions())
	}
	// A format no binary knows yet (a newer release's) halts an uncapped
	// FSM the same way.
	future := Encode(Entry{Now: t0 + 3})
	future[0] = MaxFormat + 1
	if err, _ := full.Apply(&raft.Log{Index: 4, Type: raft.LogCommand, Data: future}).(error); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("a format-%d entry: %v, want ErrUnknownFormat", MaxFormat+1, err)
	}
}

// TestHaltOnGateAbove: a node that applies a gate above what it reads halts
// at once (before any entry of that format reaches it), and one that
// restores a snapshot whose gate is above refuses it.
func TestHaltOnGateAbove(t *testing.T) {
	f := New()
	f.SetMaxFormat(1)
	done := make(chan error, 1)
	f.SetHaltHandler(func(err error) { done <- err })
	apply(t, f, 1, Entry{Now: t0, Ops: []Op{{Type: OpAppendData, Key: GateKey, Value: Gate{Format: 1, Offer: 1}.Encode()}}})
	if f.Halted() != nil {
		t.Fatalf("halted at a gate it reads: %v", f.Halted())
	}
	apply(t, f, 2, Entry{Now: t0, Ops: []Op{{Type: OpAppendData, Key: GateKey, Value: Gate{Format: 3, Offer: 3}.Encode()}}})
	if err := <-done; !errors.Is(err, ErrUnknownFormat) || !strings.Contains(err.Error(), "writes format 3") {
		t.Errorf("halt = %v, want ErrUnknownFormat saying the cluster writes format 3", err)
	}

	src := New()
	apply(t, src, 1, Entry{Now: t0, Ops: []Op{{Type: OpAppendData, Key: GateKey, Value: Gate{Format: 3, Offer: 3}.Encode()}}})
	snap := snapBytes(t, src) // format 1: the state itself needs no more
	if snap[len(snapMagic)] != 1 {
		t.Fatalf("snapshot format %d, want 1", snap[len(snapMagic)])
	}
	dst := New()
	dst.SetMaxFormat(2)
	if err := dst.Restore(readCloser{bytes.NewReader(snap)}); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("restoring a snapshot whose gate is 3 on a format-2 node: %v, want ErrUnknownFormat", err)
	}
	if g := restored(t, snap).Gate(); g != (Gate{Format: 3, Offer: 3}) {
		t.Errorf("gate after a restore: %+v", g)
	}
}

// TestRestoreUnreadableSnapshot: a snapshot of a format above the node's
// is ErrUnknownFormat, not ErrCorruptSnapshot (a node must not fall back
// past it), and changes nothing.
func TestRestoreUnreadableSnapshot(t *testing.T) {
	src := New()
	apply(t, src, 1, Entry{Now: t0, Ops: []Op{{Type: OpSessionOpen, Key: "s1", Owner: "o", TTL: s10}}})
	snap := snapBytes(t, src)
	if snap[len(snapMagic)] != 3 {
		t.Fatalf("snapshot format %d, want 3", snap[len(snapMagic)])
	}
	dst := New()
	dst.SetMaxFormat(2)
	before := snapBytes(t, dst)
	err := dst.Restore(readCloser{bytes.NewReader(snap)})
	if !errors.Is(err, ErrUnknownFormat) || errors.Is(err, ErrCorruptSnapshot) {
		t.Errorf("Restore = %v, want ErrUnknownFormat and not ErrCorruptSnapshot", err)
	}
	if !bytes.Equal(snapBytes(t, dst), before) {
		t.Error("a refused restore changed the state")
	}
}

// TestGateParse: only well-formed gates are read; a bad one is the
// default (format 1), never a higher one.
func TestGateParse(t *testing.T) {
	for _, bad := range []string{"", "{", `{"format":0,"offer":0}`, `{"format":2,"offer":3}`, `{"format":3}`} {
		if _, err := ParseGate([]byte(bad)); err == nil {
			t.Errorf("ParseGate(%q) accepted", bad)
		}
	}
	g := Gate{Format: 3, Offer: 1, Ceiling: 1}
	if got, err := ParseGate(g.Encode()); err != nil || got != g {
		t.Errorf("round trip %+v: %+v, %v", g, got, err)
	}
	if f := New(); f.Gate() != DefaultGate {
		t.Errorf("a new FSM's gate: %+v, want %+v", f.Gate(), DefaultGate)
	}
}

// TestTokenFloor: the floor is above the counter, the backup's clock and
// the restore's clock; raising never lowers the counter; a restored
// cluster's next token is above the floor.
func TestTokenFloor(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		counter uint64
		fsmNow  int64
		want    uint64
	}{
		{5, t0, uint64(now.UnixNano()) + 1},
		{5, now.UnixNano() + 10, uint64(now.UnixNano()) + 11},
		{uint64(now.UnixNano()) + 100, t0, uint64(now.UnixNano()) + 101},
	} {
		if got := TokenFloor(now, tc.counter, tc.fsmNow); got != tc.want {
			t.Errorf("TokenFloor(counter %d, fsmNow %d) = %d, want %d", tc.counter, tc.fsmNow, got, tc.want)
		}
	}
	f := New()
	apply(t, f, 1, Entry{Now: t0, Ops: []Op{acq("a", "o", hA, s10)}})
	floor := TokenFloor(now, f.LastToken(), f.Now())
	f.RaiseCounter(floor)
	f.RaiseCounter(3) // never lowers
	f.DropLeases()
	if f.NumLocks() != 0 || f.LastToken() != floor {
		t.Fatalf("after DropLeases: %d locks, counter %d; want 0 and %d", f.NumLocks(), f.LastToken(), floor)
	}
	res := apply(t, f, 2, Entry{Now: t0 + 1, Ops: []Op{acq("a", "o2", hB, s10)}})
	if res[0].Status != StatusOK || res[0].Token <= floor {
		t.Errorf("grant after the floor: %+v, want a token above %d", res[0], floor)
	}
}

// TestDigestAndNeeds: equal states have equal digests, different ones
// differ; NeedsFormat follows the state, not the log.
func TestDigestAndNeeds(t *testing.T) {
	a, b := New(), New()
	e := Entry{Now: t0, Ops: []Op{acq("a", "o", hA, s10)}}
	apply(t, a, 1, e)
	apply(t, b, 1, e)
	if a.Digest() != b.Digest() {
		t.Error("equal states, different digests")
	}
	apply(t, b, 2, Entry{Now: t0, Ops: []Op{{Type: OpSessionOpen, Key: "s1", Owner: "o", TTL: s10}}})
	if a.Digest() == b.Digest() {
		t.Error("different states, equal digests")
	}
	if a.NeedsFormat() != 1 || b.NeedsFormat() != 3 {
		t.Errorf("NeedsFormat: %d and %d, want 1 and 3", a.NeedsFormat(), b.NeedsFormat())
	}
	if d := b.Draining(); d.Sessions != 1 {
		t.Errorf("Draining %+v, want one session", d)
	}
	apply(t, b, 3, Entry{Now: t0, Ops: []Op{{Type: OpSessionClose, Key: "s1"}}})
	if b.NeedsFormat() != 1 {
		t.Errorf("NeedsFormat after the session closed: %d, want 1", b.NeedsFormat())
	}
	// NeedsFormat is the format the snapshot is written in, entry by
	// entry of a random log of every op.
	seen := map[uint8]bool{}
	for name, log := range map[string][]Entry{"v1": randomLog(t, 7, 1000), "primitives": randomPrimLog(t, 7, 1000), "sessions": randomSessionLog(t, 7, 1000)} {
		f := New()
		for i, e := range log {
			f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: Encode(e)})
			if i%25 != 0 {
				continue
			}
			got, want := f.NeedsFormat(), snapBytes(t, f)[len(snapMagic)]
			if got != want {
				t.Fatalf("%s log, after entry %d: NeedsFormat %d, snapshot format %d", name, i+1, got, want)
			}
			seen[got] = true
		}
	}
	if len(seen) != 3 {
		t.Errorf("the random logs reached formats %v; want 1, 2 and 3", seen)
	}
}
