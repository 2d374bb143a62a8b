package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func shared(key, owner, handle string, ttl time.Duration, permits uint32) Op {
	return Op{Type: OpAcquire, Key: key, Owner: owner, Handle: handle, TTL: ttl, Mode: ModeShared, Permits: permits}
}

func delayed(o Op, d time.Duration) Op { o.LockDelay = d; return o }

func all(ops ...Op) []Op {
	return append([]Op{{Type: OpAcquireAll, Token: uint64(len(ops))}}, ops...)
}

const (
	hC = "0123456789abcdef0123456789abcdef"
	hD = "fedcba9876543210fedcba9876543210"
)

var (
	rAborted = Result{Status: StatusAborted}
)

func mismatch(tok uint64, owner string, exp int64) Result {
	return Result{Status: StatusPermitsMismatch, Token: tok, Owner: owner, Expires: exp}
}

// primTests are the table tests of the primitives (shared locks,
// semaphores, lock-delay, all-or-nothing groups); FuzzDecode seeds from
// them too.
var primTests = []stepTest{
	{"readers share, a writer waits for all of them", []step{
		{t0, []Op{shared("k", "r1", hA, s10, 0), shared("k", "r2", hB, s10, 0)}, []Result{ok(1, "r1", exp10), ok(2, "r2", exp10)}},
		{t0, []Op{acq("k", "w", hC, s10)}, []Result{held(1, "r1", exp10)}},
		{t0, []Op{rel("k", hA, 1), acq("k", "w", hC, s10)}, []Result{rOK, held(2, "r2", exp10)}},
		{t0, []Op{rel("k", hB, 2), acq("k", "w", hC, s10), shared("k", "r3", hD, s10, 0)}, []Result{rOK, ok(3, "w", exp10), held(3, "w", exp10)}},
	}, func(t *testing.T, f *FSM) {
		if ls, _ := f.Holders("k"); len(ls) != 1 || ls[0].Mode != ModeExclusive || ls[0].Token != 3 {
			t.Errorf("Holders = %+v", ls)
		}
	}},
	{"semaphore of 2, its N fixed while held", []step{
		{t0, []Op{shared("s", "a", hA, s10, 2), shared("s", "b", hB, s10, 2), shared("s", "c", hC, s10, 2)},
			[]Result{ok(1, "a", exp10), ok(2, "b", exp10), held(1, "a", exp10)}},
		{t0, []Op{shared("s", "c", hC, s10, 3), shared("s", "c", hC, s10, 0)}, []Result{mismatch(1, "a", exp10), mismatch(1, "a", exp10)}},
		{t0 + sec, []Op{rel("s", hA, 1), shared("s", "c", hC, s10, 2), renew("s", hB, 2, s10)},
			[]Result{rOK, ok(3, "c", exp10+sec), ok(2, "b", exp10+sec)}},
		{t0 + 2*sec, []Op{rel("s", hB, 2), rel("s", hC, 3), shared("s", "d", hD, s10, 0)}, []Result{rOK, rOK, ok(4, "d", exp10+2*sec)}},
	}, func(t *testing.T, f *FSM) {
		ls, _ := f.Holders("s")
		if len(ls) != 1 || ls[0].Permits != 0 || ls[0].Mode != ModeShared || f.NumLocks() != 1 {
			t.Errorf("Holders = %+v, NumLocks %d", ls, f.NumLocks())
		}
	}},
	{"resend of a shared grant is idempotent", []step{
		{t0, []Op{shared("k", "a", hA, s10, 3), shared("k", "a", hA, s10, 3)}, []Result{ok(1, "a", exp10), ok(1, "a", exp10)}},
	}, nil},
	{"invalid primitives", []step{
		{t0, []Op{{Type: OpAcquire, Key: "k", Handle: hA, TTL: s10, Mode: 2}, {Type: OpAcquire, Key: "k", Handle: hA, TTL: s10, Permits: 2},
			delayed(acq("k", "a", hA, s10), -1), delayed(acq("k", "a", hA, s10), MaxLockDelay+1)},
			[]Result{rInvalid, rInvalid, rInvalid, rInvalid}},
	}, func(t *testing.T, f *FSM) {
		if f.NumLocks() != 0 || f.LastToken() != 0 {
			t.Errorf("an invalid acquire changed the state")
		}
	}},
	{"expired holders are taken over, the live ones kept", []step{
		{t0, []Op{shared("k", "a", hA, time.Second, 0), shared("k", "b", hB, s10, 0)}, []Result{ok(1, "a", t0+sec), ok(2, "b", exp10)}},
		{t0 + sec, []Op{shared("k", "c", hC, s10, 0), renew("k", hA, 1, s10), expire("k", 2)},
			[]Result{ok(3, "c", exp10+sec), notHeld(2, "b", exp10), notHeld(2, "b", exp10)}},
	}, func(t *testing.T, f *FSM) {
		ls, _ := f.Holders("k")
		if len(ls) != 2 || ls[0].Token != 2 || ls[1].Token != 3 || f.NumLocks() != 2 {
			t.Errorf("Holders = %+v", ls)
		}
	}},
	{"expire of one shared holder", []step{
		{t0, []Op{shared("k", "a", hA, time.Second, 0), shared("k", "b", hB, s10, 0)}, []Result{ok(1, "a", t0+sec), ok(2, "b", exp10)}},
		{t0 + sec, []Op{expire("k", 2), expire("k", 1), expire("k", 1)}, []Result{notHeld(2, "b", exp10), rOK, notHeld(2, "b", exp10)}},
	}, nil},
	{"lock-delay after expiry", []step{
		{t0, []Op{delayed(acq("k", "a", hA, s10), 5*time.Second)}, []Result{ok(1, "a", exp10)}},
		{exp10, []Op{expire("k", 1), acq("k", "b", hB, s10), shared("k", "b", hB, s10, 0)},
			[]Result{rOK, {Status: StatusDelayed, Expires: exp10 + 5*sec}, {Status: StatusDelayed, Expires: exp10 + 5*sec}}},
		{exp10 + 5*sec - 1, []Op{acq("k", "b", hB, s10)}, []Result{{Status: StatusDelayed, Expires: exp10 + 5*sec}}},
		{exp10 + 5*sec, []Op{acq("k", "b", hB, s10)}, []Result{ok(2, "b", exp10+15*sec)}},
	}, func(t *testing.T, f *FSM) {
		if f.Delay("k") != 0 {
			t.Errorf("Delay = %d after it passed", f.Delay("k"))
		}
	}},
	{"lock-delay of an expired holder taken over", []step{
		{t0, []Op{delayed(shared("k", "a", hA, s10, 2), 5*time.Second)}, []Result{ok(1, "a", exp10)}},
		{exp10, []Op{shared("k", "b", hB, s10, 2)}, []Result{{Status: StatusDelayed, Expires: exp10 + 5*sec}}},
		{exp10 + 5*sec, []Op{shared("k", "b", hB, s10, 2)}, []Result{ok(2, "b", exp10+15*sec)}},
	}, nil},
	{"a release ends no delay", []step{
		{t0, []Op{delayed(acq("k", "a", hA, s10), time.Minute), rel("k", hA, 1), acq("k", "b", hB, s10)}, []Result{ok(1, "a", exp10), rOK, ok(2, "b", exp10)}},
	}, nil},
	{"a group is granted whole", []step{
		{t0, all(acq("a", "o", hA, s10), shared("b", "o", hA, s10, 2)), []Result{rOK, ok(1, "o", exp10), ok(2, "o", exp10)}},
	}, func(t *testing.T, f *FSM) {
		if f.NumLocks() != 2 {
			t.Errorf("NumLocks %d", f.NumLocks())
		}
	}},
	{"a re-sent group renews the grants it already holds", []step{
		{t0, all(acq("a", "o", hA, s10), shared("b", "o", hA, s10, 2)), []Result{rOK, ok(1, "o", exp10), ok(2, "o", exp10)}},
		{t0 + 2*sec, []Op{rel("a", hA, 1)}, []Result{rOK}},
		{t0 + 3*sec, all(acq("a", "o", hA, s10), shared("b", "o", hA, s10, 2)), []Result{rOK, ok(3, "o", exp10+3*sec), ok(2, "o", exp10+3*sec)}},
	}, func(t *testing.T, f *FSM) {
		if ls, _ := f.Holders("b"); len(ls) != 1 || ls[0].Token != 2 || ls[0].Expires != exp10+3*sec {
			t.Errorf("b's holder %+v: want token 2 renewed to t0+13s", ls)
		}
	}},
	{"a group is refused whole", []step{
		{t0, []Op{acq("b", "x", hB, s10)}, []Result{ok(1, "x", exp10)}},
		{t0, all(acq("a", "o", hA, s10), acq("b", "o", hA, s10), acq("c", "o", hA, s10)),
			[]Result{held(1, "x", exp10), rAborted, held(1, "x", exp10), rAborted}},
		{t0, all(acq("a", "o", hA, s10), acq("a", "o", hA, s10)), []Result{rInvalid, rInvalid, rInvalid}},
		{t0, append(all(acq("a", "o", hA, s10)), acq("c", "y", hC, s10)), []Result{rOK, ok(2, "o", exp10), ok(3, "y", exp10)}},
	}, func(t *testing.T, f *FSM) {
		if f.NumLocks() != 3 || f.LastToken() != 3 {
			t.Errorf("NumLocks %d LastToken %d", f.NumLocks(), f.LastToken())
		}
	}},
	{"extend-all extends shared holders", []step{
		{t0, []Op{shared("k", "a", hA, s10, 0), shared("k", "b", hB, time.Second, 0)}, []Result{ok(1, "a", exp10), ok(2, "b", t0+sec)}},
		{t0 + 2*sec, []Op{{Type: OpExtendAll}}, []Result{rOK}},
	}, func(t *testing.T, f *FSM) {
		ls, _ := f.Holders("k")
		if len(ls) != 2 || ls[0].Expires != exp10+2*sec || ls[1].Expires != t0+sec {
			t.Errorf("Holders = %+v (b expired at t0+1s, must not be revived)", ls)
		}
	}},
}

func TestPrimitives(t *testing.T) {
	for _, tc := range primTests {
		t.Run(tc.name, func(t *testing.T) {
			f := runSteps(t, tc)
			// Every state round-trips through a snapshot.
			b := snapBytes(t, f)
			if !bytes.Equal(snapBytes(t, restored(t, b)), b) {
				t.Error("the snapshot does not restore to the same state")
			}
		})
	}
}

// TestSharedCopyOnWrite: a snapshot taken before changes to a group
// persists the group as it was (records and groups are immutable).
func TestSharedCopyOnWrite(t *testing.T) {
	f := New()
	apply(t, f, 1, Entry{Now: t0, Ops: []Op{shared("k", "a", hA, s10, 0), shared("k", "b", hB, s10, 0), delayed(acq("x", "c", hC, time.Second), time.Minute)}})
	apply(t, f, 2, Entry{Now: t0 + sec, Ops: []Op{expire("x", 3)}})
	before := snapBytes(t, f)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	apply(t, f, 3, Entry{Now: t0 + 2*sec, Ops: []Op{renew("k", hA, 1, s10), rel("k", hB, 2), shared("k", "d", hD, s10, 0), {Type: OpExtendAll}}})
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sink.Bytes(), before) {
		t.Error("changes after Snapshot leaked into it: a group was changed in place")
	}
	if before[4] != snapVersionV2 {
		t.Errorf("snapshot version %d with shared holders, want 2", before[4])
	}
}

// TestObserverPrimitives: the observer's event kinds for the primitives.
func TestObserverPrimitives(t *testing.T) {
	f := New()
	var got []string
	f.SetObserver(func(index uint64, ev Event) {
		got = append(got, fmt.Sprintf("%d %s %s tok=%d mode=%d permits=%d until=%d", index, ev.Kind, ev.Key, ev.Lock.Token, ev.Lock.Mode, ev.Lock.Permits, ev.DelayUntil-t0))
	})
	apply(t, f, 1, Entry{Now: t0, Ops: []Op{delayed(shared("k", "a", hA, time.Second, 2), 3*time.Second), shared("k", "b", hB, s10, 2)}})
	apply(t, f, 2, Entry{Now: t0 + sec, Ops: []Op{expire("k", 1), rel("k", hB, 2)}})
	apply(t, f, 3, Entry{Now: t0 + 4*sec, Ops: all(acq("k", "c", hC, time.Second), acq("j", "c", hC, time.Second))})
	apply(t, f, 4, Entry{Now: t0 + 6*sec, Ops: []Op{acq("k", "d", hD, s10)}})
	want := []string{
		"1 granted k tok=1 mode=1 permits=2 until=-" + fmt.Sprint(t0),
		"1 granted k tok=2 mode=1 permits=2 until=-" + fmt.Sprint(t0),
		fmt.Sprintf("2 expired k tok=1 mode=1 permits=2 until=%d", 4*sec),
		"2 released k tok=2 mode=1 permits=2 until=-" + fmt.Sprint(t0),
		"3 granted k tok=3 mode=0 permits=0 until=-" + fmt.Sprint(t0),
		"3 granted j tok=4 mode=0 permits=0 until=-" + fmt.Sprint(t0),
		"4 expired k tok=3 mode=0 permits=0 until=-" + fmt.Sprint(t0),
		"4 granted k tok=5 mode=0 permits=0 until=-" + fmt.Sprint(t0),
	}
	if !slices.Equal(got, want) {
		t.Errorf("events:\n%s\nwant\n%s", got, want)
	}
}

// randomPrimLog is randomLog's mix with the primitives: shared and
// semaphore acquires, lock-delays and groups.
func randomPrimLog(t testing.TB, seed uint64, n int) []Entry {
	r := rand.New(rand.NewPCG(seed, 2))
	g := New()
	keys := []string{"a", "b", "c", "d", "e", "f"}
	handles := []string{hexHandle(r), hexHandle(r), hexHandle(r), hexHandle(r), "odd-handle"}
	now := t0
	var log []Entry
	for i := 0; i < n; i++ {
		now += int64(r.IntN(300)) * int64(time.Millisecond)
		e := Entry{Now: now}
		for j := 1 + r.IntN(3); j > 0; j-- {
			key := keys[r.IntN(len(keys))]
			o := Op{Key: key, TTL: time.Duration(1+r.IntN(2000)) * time.Millisecond, Owner: fmt.Sprintf("o%d", r.IntN(3)), Handle: handles[r.IntN(len(handles))]}
			if ls, _ := g.Holders(key); len(ls) > 0 && r.IntN(2) == 0 {
				l := ls[r.IntN(len(ls))]
				o.Handle, o.Token = l.Handle, l.Token
			}
			switch x := r.IntN(100); {
			case x < 45:
				o.Type = OpAcquire
				if r.IntN(2) == 0 {
					o.Mode = ModeShared
					o.Permits = uint32(r.IntN(3))
				}
				if r.IntN(4) == 0 {
					o.LockDelay = time.Duration(r.IntN(1000)) * time.Millisecond
				}
				if r.IntN(8) == 0 {
					k2 := keys[r.IntN(len(keys))]
					o2 := o
					o2.Key = k2
					e.Ops = append(e.Ops, all(o, o2)...)
					continue
				}
			case x < 60:
				o.Type = OpRelease
			case x < 75:
				o.Type = OpRenew
			case x < 97:
				o.Type = OpExpire
			default:
				o.Type = OpExtendAll
			}
			e.Ops = append(e.Ops, o)
		}
		apply(t, g, uint64(i+1), e)
		log = append(log, e)
	}
	return log
}

// TestPrimitivesDeterministic: two FSMs that apply the same log of
// primitives end in the same snapshot bytes, the snapshot restores to the
// same bytes, and every grant's token is above every earlier one.
func TestPrimitivesDeterministic(t *testing.T) {
	log := randomPrimLog(t, 99, 3000)
	a, b := New(), New()
	counts := map[Status]int{}
	var last uint64
	for i, e := range log {
		ra := apply(t, a, uint64(i+1), e)
		rb := apply(t, b, uint64(i+1), e)
		if !slices.Equal(ra, rb) {
			t.Fatalf("entry %d: results differ", i)
		}
		for j, r := range ra {
			counts[r.Status]++
			if e.Ops[j].Type == OpAcquire && r.Status == StatusOK && r.Token > last {
				last = r.Token
			}
		}
		if i%500 == 0 {
			if !bytes.Equal(snapBytes(t, a), snapBytes(t, b)) {
				t.Fatalf("entry %d: snapshots differ", i)
			}
		}
	}
	sa := snapBytes(t, a)
	if !bytes.Equal(sa, snapBytes(t, b)) {
		t.Fatal("two FSMs that applied the same log snapshot differently")
	}
	if !bytes.Equal(snapBytes(t, restored(t, sa)), sa) {
		t.Fatal("the v2 snapshot does not restore to the same bytes")
	}
	for _, s := range []Status{StatusOK, StatusHeld, StatusNotHeld, StatusPermitsMismatch, StatusDelayed, StatusAborted} {
		if counts[s] < 10 {
			t.Errorf("only %d results with status %s: the random log is too tame", counts[s], s)
		}
	}
	if last != a.LastToken() {
		t.Errorf("last granted token %d, counter %d", last, a.LastToken())
	}
}

// TestEncodeVersion: an entry version 1 can express is written as version
// 1 (old binaries apply it), any other as version 2; both round-trip.
func TestEncodeVersion(t *testing.T) {
	for _, tc := range []struct {
		e    Entry
		want byte
	}{
		{Entry{Ops: []Op{acq("k", "o", hA, s10)}}, 1},
		{Entry{Ops: []Op{acq("k", "o", hA, s10), shared("k", "o", hB, s10, 0)}}, 2},
		{Entry{Ops: []Op{{Type: OpAcquire, Key: "k", Handle: hA, TTL: s10, Permits: 1}}}, 2},
		{Entry{Ops: []Op{delayed(acq("k", "o", hA, s10), time.Second)}}, 2},
		{Entry{Ops: all(acq("k", "o", hA, s10))}, 2},
	} {
		b := Encode(tc.e)
		if b[0] != tc.want {
			t.Errorf("%+v encodes as version %d, want %d", tc.e, b[0], tc.want)
		}
		e, err := Decode(b)
		if err != nil || !entriesEqual(e, tc.e) {
			t.Errorf("round trip of %+v: %+v, %v", tc.e, e, err)
		}
	}
}

// TestSnapshotVersion: a state version 1 can express persists as version
// 1, and a lock-delay that has passed does not force version 2.
func TestSnapshotVersion(t *testing.T) {
	f := New()
	apply(t, f, 1, Entry{Now: t0, Ops: []Op{acq("k", "o", hA, time.Second)}})
	if v := snapBytes(t, f)[4]; v != 1 {
		t.Errorf("exclusive-only state persists as version %d", v)
	}
	apply(t, f, 2, Entry{Now: t0, Ops: []Op{delayed(acq("j", "o", hB, time.Second), time.Second)}})
	if v := snapBytes(t, f)[4]; v != 2 {
		t.Errorf("a grant with a lock-delay persists as version %d", v)
	}
	apply(t, f, 3, Entry{Now: t0 + sec, Ops: []Op{expire("j", 2)}})
	if v := snapBytes(t, f)[4]; v != 2 || f.Delay("j") != t0+2*sec {
		t.Errorf("a lock-delay ahead persists as version %d (delay %d)", v, f.Delay("j"))
	}
	apply(t, f, 4, Entry{Now: t0 + 2*sec, Ops: []Op{{Type: OpExtendAll}}})
	if v := snapBytes(t, f)[4]; v != 1 {
		t.Errorf("a passed lock-delay still persists as version %d", v)
	}
}

// TestEachHolder: EachHolder shows what Holders copies, and stops when
// told.
func TestEachHolder(t *testing.T) {
	f := New()
	apply(t, f, 1, Entry{Now: t0, Ops: []Op{shared("k", "a", hA, s10, 3), delayed(shared("k", "b", hX, s10, 3), time.Second), acq("x", "c", hC, s10)}})
	for _, key := range []string{"k", "x", "free"} {
		ls, _ := f.Holders(key)
		var refs []HolderRef
		f.EachHolder(key, func(r HolderRef) bool { refs = append(refs, r); return true })
		if len(refs) != len(ls) {
			t.Fatalf("%s: %d refs, %d holders", key, len(refs), len(ls))
		}
		for i, r := range refs {
			l := ls[i]
			if r.Owner != l.Owner || r.Token != l.Token || r.Expires != l.Expires || r.LockDelay != l.LockDelay || r.Mode != l.Mode || r.Permits != l.Permits || !r.HandleIs(l.Handle) || r.HandleIs(l.Handle+"0") {
				t.Errorf("%s holder %d: ref %+v, lock %+v", key, i, r, l)
			}
		}
	}
	n := 0
	f.EachHolder("k", func(HolderRef) bool { n++; return false })
	if n != 1 {
		t.Errorf("EachHolder went on after false: %d calls", n)
	}
}
