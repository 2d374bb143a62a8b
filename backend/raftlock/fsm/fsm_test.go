package fsm

import (
	"bytes"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/hashicorp/raft"
)

const (
	t0  = int64(1_700_000_000) * int64(time.Second)
	sec = int64(time.Second)
)

const (
	hA = "00112233445566778899aabbccddeeff"
	hB = "ffeeddccbbaa99887766554433221100"
	hX = "Handle-X"                         // not hex: stored as a string
	hU = "00112233445566778899AABBCCDDEEFF" // upper-case hex: stored as a string
	hZ = "00112233445566778899aabbccddeefZ" // 32 chars, one not hex: stored as a string
)

func acq(key, owner, handle string, ttl time.Duration) Op {
	return Op{Type: OpAcquire, Key: key, Owner: owner, Handle: handle, TTL: ttl}
}
func rel(key, handle string, tok uint64) Op {
	return Op{Type: OpRelease, Key: key, Handle: handle, Token: tok}
}
func renew(key, handle string, tok uint64, ttl time.Duration) Op {
	return Op{Type: OpRenew, Key: key, Handle: handle, Token: tok, TTL: ttl}
}
func expire(key string, tok uint64) Op { return Op{Type: OpExpire, Key: key, Token: tok} }

func ok(tok uint64, owner string, exp int64) Result {
	return Result{Status: StatusOK, Token: tok, Owner: owner, Expires: exp}
}
func held(tok uint64, owner string, exp int64) Result {
	return Result{Status: StatusHeld, Token: tok, Owner: owner, Expires: exp}
}
func notHeld(tok uint64, owner string, exp int64) Result {
	return Result{Status: StatusNotHeld, Token: tok, Owner: owner, Expires: exp}
}

var (
	rOK      = Result{Status: StatusOK}
	rNotHeld = Result{Status: StatusNotHeld}
	rInvalid = Result{Status: StatusInvalid}
)

type step struct {
	now  int64
	ops  []Op
	want []Result
}

const (
	s10   = 10 * time.Second
	exp10 = t0 + 10*sec
)

// stepTest is one table test: steps applied in order to a new FSM at
// indexes 1, 2, ..., then check (if any) on the state they leave.
type stepTest struct {
	name  string
	steps []step
	check func(t *testing.T, f *FSM)
}

// runSteps applies tc's steps to a new FSM, failing the test when a step's
// results differ from its want, runs tc.check and returns the FSM.
func runSteps(t *testing.T, tc stepTest) *FSM {
	t.Helper()
	f := New()
	for i, s := range tc.steps {
		got := apply(t, f, uint64(i+1), Entry{Now: s.now, Ops: s.ops})
		for j := range got {
			// Result.Key only shares the table's bytes with the leader
			// (TestGrantResultKey): the steps state the rest.
			if j < len(s.ops) && got[j].Key != "" && got[j].Key != s.ops[j].Key {
				t.Fatalf("step %d: result %d names key %q, its op %q", i, j, got[j].Key, s.ops[j].Key)
			}
			got[j].Key = ""
		}
		if !slices.Equal(got, s.want) {
			t.Fatalf("step %d:\n got %+v\nwant %+v", i, got, s.want)
		}
	}
	if tc.check != nil {
		tc.check(t, f)
	}
	return f
}

// opTests are the per-op table tests; FuzzDecode also seeds from them.
var opTests = []stepTest{
	{"acquire free key", []step{
		{t0, []Op{{Type: OpAcquire, Key: "k", Owner: "alice", Handle: hA, TTL: s10, Value: []byte("v")}}, []Result{ok(1, "alice", exp10)}},
	}, func(t *testing.T, f *FSM) {
		want := Lock{Key: "k", Owner: "alice", Handle: hA, Token: 1, TTL: s10, Expires: exp10, Value: []byte("v")}
		if l, found := f.Lock("k"); !found || !lockEqual(l, want) {
			t.Errorf("Lock = %+v, %v; want %+v", l, found, want)
		}
		if f.LastToken() != 1 || f.NumLocks() != 1 || f.Now() != t0 {
			t.Errorf("LastToken %d NumLocks %d Now %d", f.LastToken(), f.NumLocks(), f.Now())
		}
	}},
	{"idempotent acquire keeps the grant", []step{
		{t0, []Op{acq("k", "alice", hA, s10)}, []Result{ok(1, "alice", exp10)}},
		{t0 + sec, []Op{acq("k", "alice", hA, 30*time.Second)}, []Result{ok(1, "alice", exp10)}},
	}, func(t *testing.T, f *FSM) {
		if l, _ := f.Lock("k"); f.LastToken() != 1 || l.TTL != s10 || l.Expires != exp10 {
			t.Errorf("LastToken %d, lock %+v: a resend changed the grant", f.LastToken(), l)
		}
	}},
	{"held by another handle", []step{
		{t0, []Op{acq("k", "alice", hA, s10)}, []Result{ok(1, "alice", exp10)}},
		{exp10 - 1, []Op{acq("k", "bob", hB, s10)}, []Result{held(1, "alice", exp10)}},
	}, nil},
	{"takeover at expiry decided by entry time", []step{
		{t0, []Op{acq("k", "alice", hA, s10)}, []Result{ok(1, "alice", exp10)}},
		{exp10 - 1, []Op{acq("k", "bob", hB, s10)}, []Result{held(1, "alice", exp10)}},
		{exp10, []Op{acq("k", "bob", hB, s10)}, []Result{ok(2, "bob", exp10+10*sec)}},
	}, func(t *testing.T, f *FSM) {
		if l, _ := f.Lock("k"); l.Handle != hB || l.Owner != "bob" || f.NumLocks() != 1 {
			t.Errorf("lock %+v, NumLocks %d", l, f.NumLocks())
		}
	}},
	{"clock never goes backwards", []step{
		{t0, []Op{acq("k", "alice", hA, s10)}, []Result{ok(1, "alice", exp10)}},
		{exp10, nil, nil},
		{t0, []Op{acq("k", "bob", hB, s10)}, []Result{ok(2, "bob", exp10+10*sec)}},
	}, func(t *testing.T, f *FSM) {
		if f.Now() != exp10 {
			t.Errorf("Now = %d, want %d", f.Now(), exp10)
		}
	}},
	{"resend after expiry is a new grant", []step{
		{t0, []Op{acq("k", "alice", hA, s10)}, []Result{ok(1, "alice", exp10)}},
		{exp10, []Op{acq("k", "alice", hA, s10)}, []Result{ok(2, "alice", exp10+10*sec)}},
	}, nil},
	{"invalid acquires change nothing", []step{
		{t0, []Op{acq("k", "a", hA, 0), acq("k", "a", hA, -1), acq("", "a", hA, s10), acq("k", "a", "", s10)},
			[]Result{rInvalid, rInvalid, rInvalid, rInvalid}},
	}, func(t *testing.T, f *FSM) {
		if f.LastToken() != 0 || f.NumLocks() != 0 {
			t.Errorf("LastToken %d NumLocks %d", f.LastToken(), f.NumLocks())
		}
	}},
	{"release", []step{
		{t0, []Op{acq("k", "alice", hA, s10)}, []Result{ok(1, "alice", exp10)}},
		{t0 + sec, []Op{rel("k", hA, 1)}, []Result{rOK}},
		{t0 + sec, []Op{rel("k", hA, 1)}, []Result{rNotHeld}},
	}, func(t *testing.T, f *FSM) {
		if _, found := f.Lock("k"); found || f.NumLocks() != 0 {
			t.Errorf("released lock still there (NumLocks %d)", f.NumLocks())
		}
	}},
	{"release refused", []step{
		{t0, []Op{acq("k", "alice", hA, s10)}, []Result{ok(1, "alice", exp10)}},
		{t0 + sec, []Op{rel("k", hB, 1), rel("k", hA, 2), rel("k", hA, 0), rel("other", hA, 1), rel("", hA, 1), rel("k", "", 1)},
			[]Result{notHeld(1, "alice", exp10), notHeld(1, "alice", exp10), notHeld(1, "alice", exp10), rNotHeld, rInvalid, rInvalid}},
		{exp10, []Op{rel("k", hA, 1)}, []Result{notHeld(1, "alice", exp10)}},
	}, func(t *testing.T, f *FSM) {
		if _, found := f.Lock("k"); !found {
			t.Error("a refused release freed the lock")
		}
	}},
	{"renew", []step{
		{t0, []Op{acq("k", "alice", hA, s10)}, []Result{ok(1, "alice", exp10)}},
		{t0 + 5*sec, []Op{renew("k", hA, 1, 3*time.Second)}, []Result{ok(1, "alice", t0+8*sec)}},
		{t0 + 8*sec - 1, []Op{acq("k", "bob", hB, s10)}, []Result{held(1, "alice", t0+8*sec)}},
		{t0 + 8*sec, []Op{acq("k", "bob", hB, s10)}, []Result{ok(2, "bob", t0+18*sec)}},
	}, nil},
	{"renew sets TTL", []step{
		{t0, []Op{acq("k", "alice", hA, s10)}, []Result{ok(1, "alice", exp10)}},
		{t0 + 5*sec, []Op{renew("k", hA, 1, 30*time.Second)}, []Result{ok(1, "alice", t0+35*sec)}},
	}, func(t *testing.T, f *FSM) {
		if l, _ := f.Lock("k"); l.TTL != 30*time.Second || l.Expires != t0+35*sec || l.Token != 1 {
			t.Errorf("after renew: %+v", l)
		}
	}},
	{"renew refused", []step{
		{t0, []Op{acq("k", "alice", hA, s10)}, []Result{ok(1, "alice", exp10)}},
		{t0 + sec, []Op{renew("k", hB, 1, s10), renew("k", hA, 2, s10), renew("k", hA, 1, 0), renew("k", hA, 1, -5), renew("free", hA, 1, s10)},
			[]Result{notHeld(1, "alice", exp10), notHeld(1, "alice", exp10), rInvalid, rInvalid, rNotHeld}},
		{exp10, []Op{renew("k", hA, 1, s10)}, []Result{notHeld(1, "alice", exp10)}},
	}, func(t *testing.T, f *FSM) {
		if l, _ := f.Lock("k"); l.Expires != exp10 || l.TTL != s10 {
			t.Errorf("a refused renew changed the lock: %+v", l)
		}
	}},
	{"expire", []step{
		{t0, []Op{acq("k", "alice", hA, s10)}, []Result{ok(1, "alice", exp10)}},
		{exp10 - 1, []Op{expire("k", 1)}, []Result{notHeld(1, "alice", exp10)}},
		{exp10, []Op{expire("k", 2), expire("", 1), expire("free", 1)}, []Result{notHeld(1, "alice", exp10), rInvalid, rNotHeld}},
		{exp10, []Op{expire("k", 1)}, []Result{rOK}},
		{exp10, []Op{expire("k", 1)}, []Result{rNotHeld}},
	}, func(t *testing.T, f *FSM) {
		if _, found := f.Lock("k"); found || f.NumLocks() != 0 {
			t.Error("expired lock still there")
		}
	}},
	{"expire after a renew is refused", []step{
		{t0, []Op{acq("k", "alice", hA, s10)}, []Result{ok(1, "alice", exp10)}},
		{t0 + 8*sec, []Op{renew("k", hA, 1, s10)}, []Result{ok(1, "alice", t0+18*sec)}},
		{exp10, []Op{expire("k", 1)}, []Result{notHeld(1, "alice", t0+18*sec)}},
	}, func(t *testing.T, f *FSM) {
		if _, found := f.Lock("k"); !found {
			t.Error("renewed lock was expired")
		}
	}},
	{"expire of a regranted key is refused", []step{
		{t0, []Op{acq("k", "alice", hA, s10)}, []Result{ok(1, "alice", exp10)}},
		{exp10, []Op{acq("k", "bob", hB, s10), expire("k", 1)}, []Result{ok(2, "bob", exp10+10*sec), notHeld(2, "bob", exp10+10*sec)}},
	}, nil},
	{"release then acquire in one entry hands off", []step{
		{t0, []Op{acq("k", "alice", hA, s10)}, []Result{ok(1, "alice", exp10)}},
		{t0 + sec, []Op{acq("k", "bob", hB, s10), rel("k", hA, 1), acq("k", "bob", hB, s10)},
			[]Result{held(1, "alice", exp10), rOK, ok(2, "bob", t0+11*sec)}},
	}, func(t *testing.T, f *FSM) {
		if l, _ := f.Lock("k"); l.Token != 2 || l.Handle != hB {
			t.Errorf("after handoff: %+v", l)
		}
	}},
	{"extend all", []step{
		{t0, []Op{acq("a", "alice", hA, s10), acq("b", "bob", hB, 2*time.Second), acq("c", "carol", hX, 100*time.Second)},
			[]Result{ok(1, "alice", exp10), ok(2, "bob", t0+2*sec), ok(3, "carol", t0+100*sec)}},
		{t0, []Op{{Type: OpExtendAll}}, []Result{rOK}}, // same time: nothing moves
		{t0 + 5*sec, []Op{{Type: OpExtendAll}}, []Result{rOK}},
	}, func(t *testing.T, f *FSM) {
		for key, want := range map[string]int64{"a": t0 + 15*sec, "b": t0 + 2*sec, "c": t0 + 105*sec} {
			if l, _ := f.Lock(key); l.Expires != want {
				t.Errorf("%s expires %d, want %d (an expired lock must not be revived)", key, l.Expires-t0, want-t0)
			}
		}
	}},
	{"append data", []step{
		{t0, []Op{{Type: OpAppendData, Key: "x", Value: []byte("1")}, {Type: OpAppendData, Key: "x", Value: []byte("22")},
			{Type: OpAppendData, Value: []byte("3")}, acq("x", "alice", hA, s10)},
			[]Result{rOK, rOK, rInvalid, ok(1, "alice", exp10)}},
	}, func(t *testing.T, f *FSM) {
		if v, found := f.Data("x"); !found || string(v) != "22" {
			t.Errorf("Data(x) = %q, %v", v, found)
		}
		if _, found := f.Lock("x"); !found || f.NumLocks() != 1 {
			t.Errorf("lock x and data x collide: lock found %v, NumLocks %d", found, f.NumLocks())
		}
		if _, found := f.Data("y"); found {
			t.Error("Data(y) found")
		}
	}},
	{"members", []step{
		{t0, []Op{{Type: OpSetMember, Key: "n1", Value: []byte("a1")}, {Type: OpSetMember, Key: "n2", Value: []byte("a2")},
			{Type: OpSetMember, Key: "n1", Value: []byte("a3")}, {Type: OpRemoveMember, Key: "n2"}, {Type: OpRemoveMember, Key: "n9"},
			{Type: OpSetMember, Value: []byte("a")}, {Type: OpSetMember, Key: "n4"}},
			[]Result{rOK, rOK, rOK, rOK, rInvalid, rInvalid, rInvalid}},
	}, func(t *testing.T, f *FSM) {
		if m := f.Members(); !maps.Equal(m, map[string]string{"n1": "a3"}) {
			t.Errorf("Members = %v", m)
		}
	}},
	{"handles compare exactly", []step{
		{t0, []Op{acq("x", "o", hX, s10), acq("u", "o", hU, s10), acq("a", "o", hA, s10)},
			[]Result{ok(1, "o", exp10), ok(2, "o", exp10), ok(3, "o", exp10)}},
		{t0, []Op{rel("u", hA, 2), rel("a", hU, 3), rel("a", hA[:31]+"e", 3), rel("a", hA[:31], 3), rel("x", "handle-x", 1)},
			[]Result{notHeld(2, "o", exp10), notHeld(3, "o", exp10), notHeld(3, "o", exp10), notHeld(3, "o", exp10), notHeld(1, "o", exp10)}},
		{t0, []Op{acq("z", "o", hZ, s10), rel("z", hA[:31]+"0", 4)}, []Result{ok(4, "o", exp10), notHeld(4, "o", exp10)}},
		{t0, []Op{rel("u", hU, 2), rel("a", hA, 3), rel("x", hX, 1), rel("z", hZ, 4)}, []Result{rOK, rOK, rOK, rOK}},
	}, nil},
	{"handles are stored exactly", []step{
		{t0, []Op{acq("x", "o", hX, s10), acq("u", "o", hU, s10), acq("a", "o", hA, s10), acq("z", "o", hZ, s10)},
			[]Result{ok(1, "o", exp10), ok(2, "o", exp10), ok(3, "o", exp10), ok(4, "o", exp10)}},
	}, func(t *testing.T, f *FSM) {
		for key, h := range map[string]string{"x": hX, "u": hU, "a": hA, "z": hZ} {
			if l, _ := f.Lock(key); l.Handle != h {
				t.Errorf("Lock(%q).Handle = %q, want %q", key, l.Handle, h)
			}
		}
	}},
}

func TestOps(t *testing.T) {
	for _, tc := range opTests {
		t.Run(tc.name, func(t *testing.T) {
			f := runSteps(t, tc)
			if f.AppliedIndex() != uint64(len(tc.steps)) {
				t.Errorf("AppliedIndex = %d, want %d", f.AppliedIndex(), len(tc.steps))
			}
		})
	}
}

func lockEqual(a, b Lock) bool {
	return a.Key == b.Key && a.Owner == b.Owner && a.Handle == b.Handle && a.Token == b.Token &&
		a.TTL == b.TTL && a.Expires == b.Expires && bytes.Equal(a.Value, b.Value)
}

// TestAgainstModel applies a random log to the FSM and to a naive model and
// compares every result and the final state.
func TestAgainstModel(t *testing.T) {
	log := randomLog(t, 7, 3000)
	f, m := New(), newModel()
	counts := map[Status]int{}
	for i, e := range log {
		got := apply(t, f, uint64(i+1), e)
		want := m.apply(e)
		if !slices.Equal(got, want) {
			t.Fatalf("entry %d %+v:\n got %+v\nwant %+v", i, e, got, want)
		}
		for _, r := range got {
			counts[r.Status]++
		}
	}
	for s := StatusOK; s <= StatusInvalid; s++ {
		if counts[s] < 50 {
			t.Errorf("only %d results with status %s: the random log is too tame", counts[s], s)
		}
	}
	n := 0
	f.ForEachLock(func(l Lock) bool {
		n++
		if want, found := m.locks[l.Key]; !found || !lockEqual(l, want) {
			t.Errorf("lock %+v, model %+v", l, want)
		}
		return true
	})
	if n != len(m.locks) || f.NumLocks() != n {
		t.Errorf("%d locks iterated, NumLocks %d, model has %d", n, f.NumLocks(), len(m.locks))
	}
	for k, v := range m.data {
		if got, _ := f.Data(k); !bytes.Equal(got, v) {
			t.Errorf("Data(%q) = %q, want %q", k, got, v)
		}
	}
	if !maps.Equal(f.Members(), m.members) || f.LastToken() != m.counter || f.Now() != m.now {
		t.Errorf("members %v / %v, counter %d / %d, now %d / %d", f.Members(), m.members, f.LastToken(), m.counter, f.Now(), m.now)
	}
}

func TestTokensStrictlyIncrease(t *testing.T) {
	f := New()
	seen := map[uint64]bool{}
	ops, grants := 0, 0
	for i, e := range randomLog(t, 99, 600) {
		before := f.LastToken()
		res := apply(t, f, uint64(i+1), e)
		next := before
		for j, r := range res {
			ops++
			if e.Ops[j].Type != OpAcquire || r.Status != StatusOK {
				continue
			}
			if r.Token > next { // a new grant: exactly the next token
				if r.Token != next+1 || seen[r.Token] {
					t.Fatalf("entry %d: granted token %d after %d (seen before: %v)", i, r.Token, next, seen[r.Token])
				}
				next, seen[r.Token] = r.Token, true
				grants++
			} else if !seen[r.Token] {
				t.Fatalf("entry %d: idempotent acquire returned token %d never granted", i, r.Token)
			}
		}
		if f.LastToken() != next {
			t.Fatalf("entry %d: LastToken %d, want %d", i, f.LastToken(), next)
		}
	}
	if ops < 1000 || grants < 100 {
		t.Fatalf("only %d ops, %d grants", ops, grants)
	}
}

func TestObserver(t *testing.T) {
	f := New()
	type call struct {
		index uint64
		key   string
		kind  EventKind
		l     *Lock
	}
	var calls []call
	f.SetObserver(func(index uint64, ev Event) {
		// Reads must not deadlock and must see the whole entry applied.
		_ = f.NumLocks()
		l := ev.Lock
		calls = append(calls, call{index, ev.Key, ev.Kind, &l})
	})
	// The observer reads the FSM: if Apply called it under the FSM's lock,
	// this would deadlock.
	done := make(chan struct{})
	go func() {
		defer close(done)
		apply(t, f, 1, Entry{Now: t0, Ops: []Op{acq("a", "alice", hA, s10), acq("a", "alice", hA, s10), acq("a", "bob", hB, s10), acq("b", "bob", hB, time.Second)}})
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Apply deadlocked: the observer is called under the FSM's lock")
	}
	apply(t, f, 2, Entry{Now: t0 + sec, Ops: []Op{renew("a", hA, 1, s10), rel("b", hB, 9)}})
	apply(t, f, 3, Entry{Now: t0 + 2*sec, Ops: []Op{rel("a", hA, 1), acq("a", "bob", hB, s10), expire("b", 2), {Type: OpExtendAll}}})
	want := []struct {
		index uint64
		key   string
		kind  EventKind
		token uint64 // the token granted, renewed or freed
		exp   int64
	}{
		{1, "a", EventGranted, 1, t0 + 10*sec}, {1, "b", EventGranted, 2, t0 + sec},
		{2, "a", EventRenewed, 1, t0 + 11*sec},
		{3, "a", EventReleased, 1, t0 + 11*sec}, {3, "a", EventGranted, 3, t0 + 12*sec}, {3, "b", EventExpired, 2, t0 + sec},
	}
	if len(calls) != len(want) {
		t.Fatalf("%d observer calls, want %d: %+v", len(calls), len(want), calls)
	}
	for i, w := range want {
		c := calls[i]
		if c.index != w.index || c.key != w.key || c.kind != w.kind || c.l.Token != w.token || c.l.Expires != w.exp || c.l.Key != w.key {
			t.Errorf("call %d: %d %q %v %+v, want %+v", i, c.index, c.key, c.kind, c.l, w)
		}
	}
	// ExtendAll calls for each lock it moved.
	calls = nil
	apply(t, f, 4, Entry{Now: t0 + 5*sec, Ops: []Op{{Type: OpExtendAll}}})
	if len(calls) != 1 || calls[0].key != "a" || calls[0].l.Expires != t0+15*sec || calls[0].l.Handle != hB {
		t.Errorf("ExtendAll calls: %+v", calls)
	}
	// The observer gets copies.
	calls[0].l.Value = []byte("mutated")
	if l, _ := f.Lock("a"); l.Value != nil {
		t.Error("observer's Lock aliases the FSM's state")
	}
	f.SetObserver(nil)
	calls = nil
	apply(t, f, 5, Entry{Now: t0 + 5*sec, Ops: []Op{rel("a", hB, 3)}})
	if len(calls) != 0 {
		t.Errorf("removed observer still called: %+v", calls)
	}
}

func TestReadsReturnCopies(t *testing.T) {
	f := New()
	apply(t, f, 1, Entry{Now: t0, Ops: []Op{
		{Type: OpAcquire, Key: "k", Owner: "o", Handle: hA, TTL: time.Second, Value: []byte("lockval")},
		{Type: OpAppendData, Key: "k", Value: []byte("data")},
		{Type: OpSetMember, Key: "n", Value: []byte("addr")},
	}})
	l, _ := f.Lock("k")
	l.Value[0] = 'X'
	d, _ := f.Data("k")
	d[0] = 'X'
	f.Members()["n"] = "changed"
	f.ForEachLock(func(l Lock) bool { l.Value[1] = 'X'; return true })
	l, _ = f.Lock("k")
	d, _ = f.Data("k")
	if string(l.Value) != "lockval" || string(d) != "data" || f.Members()["n"] != "addr" {
		t.Errorf("state changed through returned values: %q %q %v", l.Value, d, f.Members())
	}
}

func TestForEachLockStops(t *testing.T) {
	f := New()
	var ops []Op
	for _, k := range []string{"a", "b", "c", "d"} {
		ops = append(ops, acq(k, "o", hA, time.Second))
	}
	apply(t, f, 1, Entry{Now: t0, Ops: append(ops, Op{Type: OpAppendData, Key: "zz", Value: []byte("1")})})
	n := 0
	f.ForEachLock(func(Lock) bool { n++; return n < 2 })
	if n != 2 {
		t.Errorf("fn called %d times after returning false at 2", n)
	}
	keys := []string{}
	f.ForEachLock(func(l Lock) bool { keys = append(keys, l.Key); return true })
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"a", "b", "c", "d"}) {
		t.Errorf("ForEachLock keys %v", keys)
	}
}

func TestApplyRejectsUndecodable(t *testing.T) {
	f := New()
	for i, e := range randomLog(t, 3, 200) {
		apply(t, f, uint64(i+1), e)
	}
	before := snapBytes(t, f)
	good := Encode(Entry{Now: t0 * 2, Ops: []Op{acq("new", "o", hA, time.Second)}})
	for name, data := range map[string][]byte{
		"empty":        nil,
		"version 2":    append([]byte{2}, good[1:]...),
		"truncated":    good[:len(good)-1],
		"trailing":     append(append([]byte{}, good...), 0),
		"unknown type": Encode(Entry{Ops: []Op{{Type: 9, Key: "k"}}}),
		"key too long": Encode(Entry{Ops: []Op{acq(string(make([]byte, MaxKeyLen+1)), "o", hA, time.Second)}}),
	} {
		out := f.Apply(&raft.Log{Index: 1000, Type: raft.LogCommand, Data: data})
		err, isErr := out.(error)
		if !isErr || !errorsIs(err, ErrMalformed) {
			t.Errorf("%s: Apply = %v (%T), want an error wrapping ErrMalformed", name, out, out)
		}
		if after := snapBytes(t, f); !bytes.Equal(before, after) {
			t.Errorf("%s: an undecodable entry changed the state", name)
		}
	}
	if out := f.Apply(&raft.Log{Index: 1000, Type: raft.LogNoop, Data: good}); out != nil {
		t.Errorf("Apply(LogNoop) = %v", out)
	}
	if after := snapBytes(t, f); !bytes.Equal(before, after) {
		t.Errorf("a non-command entry changed the state")
	}
}

// TestConcurrentReads runs readers during Apply, for the race detector and to
// check that reads never see half an entry.
func TestConcurrentReads(t *testing.T) {
	f := New()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Every entry below releases and re-acquires "k" in one
				// go, so once the first entry applied a reader always
				// finds it held. (Read the index first: read after the
				// lock, it could count an entry applied in between.)
				applied := f.AppliedIndex()
				if _, found := f.Lock("k"); !found && applied > 0 {
					t.Error("reader saw the middle of an entry")
					return
				}
				f.ForEachLock(func(Lock) bool { return true })
				_, _ = f.Data("d")
				_ = f.Members()
				_, _ = f.Snapshot()
			}
		}()
	}
	for i := uint64(1); i <= 2000; i++ {
		ops := []Op{acq("k", "o", hA, time.Hour)}
		if i > 1 {
			ops = []Op{rel("k", hA, i-1), acq("k", "o", hA, time.Hour), {Type: OpAppendData, Key: "d", Value: []byte("x")}}
		}
		apply(t, f, i, Entry{Now: t0 + int64(i), Ops: ops})
	}
	close(stop)
	wg.Wait()
}

// TestGrantResultKey: an exclusive grant's result names its key with the
// lock table's own bytes, which the leader's lease shares (so the request's
// copy of the key is not kept per held lease); other results name none.
func TestGrantResultKey(t *testing.T) {
	f := New()
	got := apply(t, f, 1, Entry{Now: 1, Ops: []Op{
		{Type: OpAcquire, Key: "k", Owner: "alice", Handle: hA, TTL: s10},
		{Type: OpAcquire, Key: "r", Owner: "bob", Handle: hU, TTL: s10, Mode: ModeShared},
	}})
	if got[0].Status != StatusOK || got[0].Key != "k" {
		t.Fatalf("exclusive grant: %+v, want ok naming k", got[0])
	}
	if got[1].Status != StatusOK || got[1].Key != "" {
		t.Fatalf("shared grant: %+v, want ok naming no key", got[1])
	}
	f.mu.RLock()
	var stored string
	for k := range f.kv {
		if k == lockPrefix+"k" {
			stored = k
		}
	}
	f.mu.RUnlock()
	if unsafe.StringData(got[0].Key) != unsafe.StringData(stored[len(lockPrefix):]) {
		t.Error("the result's key does not share the table's bytes")
	}
}
