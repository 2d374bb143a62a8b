package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// sessionLog is a small history of sessions: two sessions, leases in both
// (exclusive, shared, a lock-delay), a keep-alive, a takeover.
func sessionLog(t *testing.T) (*FSM, *[]Event) {
	t.Helper()
	f := New()
	evs := new([]Event)
	f.SetObserver(func(_ uint64, ev Event) { *evs = append(*evs, ev) })
	const h1, h2, h3, h4 = "h1", "h2", "h3", "h4"
	sec := int64(time.Second)
	res := apply(t, f, 1, Entry{Now: 1 * sec, Ops: []Op{
		{Type: OpSessionOpen, Key: "s1", Owner: "alice", TTL: 10 * time.Second},
		{Type: OpSessionOpen, Key: "s2", Owner: "bob", TTL: 5 * time.Second},
		{Type: OpAcquire, Key: "a", Owner: "alice", Handle: h1, TTL: time.Hour, Session: "s1", LockDelay: 3 * time.Second},
		{Type: OpAcquire, Key: "r", Owner: "alice", Handle: h2, TTL: time.Hour, Session: "s1", Mode: ModeShared},
		{Type: OpAcquire, Key: "r", Owner: "bob", Handle: h3, TTL: time.Hour, Session: "s2", Mode: ModeShared},
		{Type: OpAcquire, Key: "b", Owner: "bob", Handle: h4, TTL: time.Hour, Session: "s2"},
		{Type: OpAcquire, Key: "x", Owner: "bob", Handle: "hx", TTL: time.Hour, Session: "nope"},
	}})
	want := []Status{StatusOK, StatusOK, StatusOK, StatusOK, StatusOK, StatusOK, StatusNoSession}
	for i, r := range res {
		if r.Status != want[i] {
			t.Fatalf("op %d: %v, want %v", i, r.Status, want[i])
		}
	}
	if res[2].Expires != 11*sec {
		t.Fatalf("session lease expires %d, want the session's %d (not the op's TTL)", res[2].Expires, 11*sec)
	}
	return f, evs
}

func TestSessionLeasesFollowTheirSession(t *testing.T) {
	f, _ := sessionLog(t)
	sec := int64(time.Second)
	// A keep-alive at 4 s moves every lease of s1 to 14 s, in one op.
	r := apply(t, f, 2, Entry{Now: 4 * sec, Ops: []Op{{Type: OpSessionRenew, Key: "s1"}}})
	if r[0].Status != StatusOK || r[0].Expires != 14*sec {
		t.Fatalf("renew: %+v", r[0])
	}
	for _, k := range []string{"a", "r"} {
		var exp []int64
		f.EachHolder(k, func(h HolderRef) bool { exp = append(exp, h.Expires); return true })
		if !slices.Contains(exp, 14*sec) {
			t.Errorf("%s: holders expire %v, want one at 14 s", k, exp)
		}
	}
	// Renewing a lease of s2 renews s2.
	r = apply(t, f, 3, Entry{Now: 5 * sec, Ops: []Op{{Type: OpRenew, Key: "b", Handle: "h4", Token: 4, TTL: time.Second}}})
	if r[0].Status != StatusOK || r[0].Expires != 10*sec {
		t.Fatalf("renew of a session lease: %+v, want its session renewed to 10 s", r[0])
	}
	if s, _ := f.Session("s2"); s.Expires != 10*sec || s.Leases != 2 {
		t.Fatalf("s2 = %+v", s)
	}
	// An early expire is refused, naming the expiry to re-arm at.
	r = apply(t, f, 4, Entry{Now: 9 * sec, Ops: []Op{{Type: OpSessionExpire, Key: "s2"}}})
	if r[0].Status != StatusNotHeld || r[0].Expires != 10*sec {
		t.Fatalf("early expire: %+v", r[0])
	}
	// An acquire of b after s2's expiry takes b over; s2's expiry then
	// ends only r's shared lease of s2, not the new holder of b.
	r = apply(t, f, 5, Entry{Now: 10 * sec, Ops: []Op{
		{Type: OpAcquire, Key: "b", Owner: "carol", Handle: "h5", TTL: time.Minute},
		{Type: OpSessionExpire, Key: "s2"},
		{Type: OpSessionRenew, Key: "s2"},
	}})
	if r[0].Status != StatusOK || r[1].Status != StatusOK || r[1].Token != 1 || r[2].Status != StatusNotHeld {
		t.Fatalf("takeover + expire + renew: %+v", r)
	}
	if l, ok := f.Lock("b"); !ok || l.Owner != "carol" {
		t.Fatalf("b = %+v %v, want carol's", l, ok)
	}
	if hs, _ := f.Holders("r"); len(hs) != 1 || hs[0].Owner != "alice" || hs[0].Session != "s1" {
		t.Fatalf("r holders = %+v, want alice's alone, in s1", hs)
	}
	if _, ok := f.Session("s2"); ok {
		t.Fatal("s2 still stored after its expiry")
	}
}

func TestSessionCloseReleasesAndExpiryDelays(t *testing.T) {
	f, evs := sessionLog(t)
	sec := int64(time.Second)
	*evs = (*evs)[:0]
	r := apply(t, f, 2, Entry{Now: 2 * sec, Ops: []Op{{Type: OpSessionClose, Key: "s2"}, {Type: OpSessionClose, Key: "s2"}}})
	if r[0].Status != StatusOK || r[0].Token != 2 || r[1].Status != StatusNotHeld {
		t.Fatalf("close twice: %+v", r)
	}
	var kinds []string
	for _, ev := range *evs {
		kinds = append(kinds, ev.Kind.String()+":"+ev.Key)
	}
	if want := []string{"released:b", "released:r", "session-ended:"}; !slices.Equal(kinds, want) {
		t.Fatalf("events %v, want %v (key order, then the session)", kinds, want)
	}
	// s1 expires at 11 s: a's lock-delay (3 s) holds the key until 14 s.
	r = apply(t, f, 3, Entry{Now: 11 * sec, Ops: []Op{
		{Type: OpSessionExpire, Key: "s1"},
		{Type: OpAcquire, Key: "a", Owner: "dan", Handle: "h6", TTL: time.Minute},
	}})
	if r[0].Status != StatusOK || r[0].Token != 2 || r[1].Status != StatusDelayed || r[1].Expires != 14*sec {
		t.Fatalf("expire + acquire in the delay: %+v", r)
	}
	if f.NumLocks() != 0 || f.NumSessions() != 0 {
		t.Fatalf("%d locks, %d sessions left", f.NumLocks(), f.NumSessions())
	}
}

func TestSessionExtendAll(t *testing.T) {
	f, _ := sessionLog(t)
	sec := int64(time.Second)
	// A new leader at 3 s: s1 (TTL 10 s) to 13 s, s2 (5 s) to 8 s.
	apply(t, f, 2, Entry{Now: 3 * sec, Ops: []Op{{Type: OpExtendAll}}})
	for id, want := range map[string]int64{"s1": 13 * sec, "s2": 8 * sec} {
		if s, _ := f.Session(id); s.Expires != want {
			t.Errorf("%s expires %d, want %d", id, s.Expires, want)
		}
	}
	if l, _ := f.Lock("a"); l.Expires != 13*sec {
		t.Errorf("a expires %d, want its session's 13 s", l.Expires)
	}
	// An expired session is not revived.
	apply(t, f, 3, Entry{Now: 9 * sec, Ops: []Op{{Type: OpExtendAll}}})
	if s, _ := f.Session("s2"); s.Expires != 8*sec {
		t.Errorf("expired s2 extended to %d", s.Expires)
	}
}

func TestSessionSnapshotRoundTrip(t *testing.T) {
	f, _ := sessionLog(t)
	b := snapBytes(t, f)
	if b[len(snapMagic)] != snapVersionV3 {
		t.Fatalf("snapshot version %d, want 3", b[len(snapMagic)])
	}
	g := restored(t, b)
	if !bytes.Equal(snapBytes(t, g), b) {
		t.Fatal("restored state snapshots differently")
	}
	// The restored sessions own their leases: closing s1 frees a and r's.
	sec := int64(time.Second)
	r := apply(t, g, 2, Entry{Now: 2 * sec, Ops: []Op{{Type: OpSessionClose, Key: "s1"}}})
	if r[0].Status != StatusOK || r[0].Token != 2 {
		t.Fatalf("close after restore: %+v, want 2 leases ended", r[0])
	}
	if _, ok := g.Lock("a"); ok {
		t.Fatal("a still held after its session closed")
	}
	// A session lease whose session is missing is refused.
	bad := New()
	apply(t, bad, 1, Entry{Now: sec, Ops: []Op{{Type: OpSessionOpen, Key: "s", TTL: time.Second},
		{Type: OpAcquire, Key: "k", Handle: "h", TTL: time.Second, Session: "s"}}})
	raw := snapBytes(t, bad)
	i := bytes.LastIndex(raw, []byte{1, 's'}) // the session table's id
	if i < 0 {
		t.Fatal("no session id in the snapshot")
	}
	raw[i+1] = 't'
	if _, err := decodeSnapshot(raw, false); err == nil {
		t.Fatal("a snapshot whose lease names an unknown session was accepted")
	}
}

// randomSessionLog mixes sessions into random lock traffic: opens,
// keep-alives, closes and expiries of a few sessions, acquires in them
// (exclusive, shared, with lock-delays, in groups), and plain leases.
func randomSessionLog(t testing.TB, seed uint64, n int) []Entry {
	r := rand.New(rand.NewPCG(seed, 3))
	g := New()
	keys := []string{"a", "b", "c", "d", "e", "f", "g"}
	sids := []string{"s0", "s1", "s2", "s3"}
	now := t0
	var log []Entry
	for i := 0; i < n; i++ {
		now += int64(r.IntN(400)) * int64(time.Millisecond)
		e := Entry{Now: now}
		for j := 1 + r.IntN(3); j > 0; j-- {
			key, sid := keys[r.IntN(len(keys))], sids[r.IntN(len(sids))]
			o := Op{Key: key, TTL: time.Duration(1+r.IntN(3000)) * time.Millisecond, Owner: "o" + sid, Handle: hexHandle(r)}
			if ls, _ := g.Holders(key); len(ls) > 0 && r.IntN(2) == 0 {
				l := ls[r.IntN(len(ls))]
				o.Handle, o.Token = l.Handle, l.Token
			}
			switch x := r.IntN(100); {
			case x < 40:
				o.Type = OpAcquire
				if r.IntN(3) > 0 {
					o.Session = sid
				}
				if r.IntN(3) == 0 {
					o.Mode = ModeShared
				}
				if r.IntN(5) == 0 {
					o.LockDelay = time.Duration(r.IntN(800)) * time.Millisecond
				}
				if r.IntN(8) == 0 {
					o2 := o
					o2.Key = keys[(slices.Index(keys, key)+1)%len(keys)]
					e.Ops = append(e.Ops, all(o, o2)...)
					continue
				}
			case x < 50:
				o.Type = OpRelease
			case x < 57:
				o.Type = OpRenew
			case x < 62:
				o.Type = OpExpire
			case x < 72:
				o = Op{Type: OpSessionOpen, Key: sid, Owner: "o" + sid, TTL: time.Duration(1+r.IntN(2000)) * time.Millisecond}
			case x < 85:
				o = Op{Type: OpSessionRenew, Key: sid}
			case x < 89:
				o = Op{Type: OpSessionClose, Key: sid}
			case x < 98:
				o = Op{Type: OpSessionExpire, Key: sid}
			default:
				o = Op{Type: OpExtendAll}
			}
			e.Ops = append(e.Ops, o)
		}
		apply(t, g, uint64(i+1), e)
		log = append(log, e)
	}
	return log
}

// TestSessionsDeterministic: two FSMs that apply the same log with
// sessions give the same results, the same observer events in the same
// order, and the same snapshot bytes, which restore to the same bytes; a
// session ends with none of its leases left, and no lease outlives its
// session.
func TestSessionsDeterministic(t *testing.T) {
	log := randomSessionLog(t, 23, 3000)
	a, b := New(), New()
	var ea, eb []string
	rec := func(out *[]string) func(uint64, Event) {
		return func(i uint64, ev Event) {
			*out = append(*out, fmt.Sprint(i, ev.Kind, ev.Key, ev.Lock.Token, ev.Session.ID, ev.DelayUntil))
		}
	}
	a.SetObserver(rec(&ea))
	b.SetObserver(rec(&eb))
	counts := map[string]int{}
	for i, e := range log {
		ra := apply(t, a, uint64(i+1), e)
		rb := apply(t, b, uint64(i+1), e)
		if !slices.Equal(ra, rb) {
			t.Fatalf("entry %d: results differ", i)
		}
		for j, r := range ra {
			counts[e.Ops[j].Type.String()+"/"+r.Status.String()]++
		}
		// No lease of a session that is gone; every session counts the
		// leases that name it.
		held := map[string]int{}
		a.ForEachLock(func(l Lock) bool {
			if _, ok := a.Session(l.Session); l.Session != "" && !ok {
				t.Fatalf("entry %d: %s (token %d) outlived its session %s", i, l.Key, l.Token, l.Session)
			}
			if l.Session != "" {
				held[l.Session]++
			}
			return true
		})
		a.ForEachSession(func(s SessionInfo) bool {
			if s.Leases != held[s.ID] {
				t.Fatalf("entry %d: session %s counts %d leases, %d name it", i, s.ID, s.Leases, held[s.ID])
			}
			return true
		})
		if i%300 == 0 && !bytes.Equal(snapBytes(t, a), snapBytes(t, b)) {
			t.Fatalf("entry %d: snapshots differ", i)
		}
	}
	// Extend-all reports its renewals in map order (documented); the
	// rest, session ends included, in op order: compare as multisets.
	slices.Sort(ea)
	slices.Sort(eb)
	if !slices.Equal(ea, eb) {
		t.Fatal("observer events differ between two FSMs that applied the same log")
	}
	sa := snapBytes(t, a)
	if !bytes.Equal(snapBytes(t, restored(t, sa)), sa) {
		t.Fatal("the snapshot does not restore to itself")
	}
	// The log exercised what it claims to.
	for _, k := range []string{"session-open/ok", "session-renew/ok", "session-close/ok", "session-expire/ok",
		"session-expire/not-held", "acquire/no-session", "acquire/ok"} {
		if counts[k] == 0 {
			t.Errorf("no %s in the random log: %v", k, counts)
		}
	}
}
