package fsm

import (
	"testing"
	"time"
)

func TestOwnerTagRoundTrip(t *testing.T) {
	for _, c := range []struct{ id, owner string }{{"billing", "worker-1"}, {"", "plain"}, {"a", ""}} {
		id, owner := SplitOwner(TagOwner(c.id, c.owner))
		if id != c.id || owner != c.owner {
			t.Errorf("TagOwner(%q, %q) splits into %q, %q", c.id, c.owner, id, owner)
		}
	}
	if id, owner := SplitOwner("\x1enever-closed"); id != "" || owner != "\x1enever-closed" {
		t.Errorf("an unterminated tag split into %q, %q", id, owner)
	}
}

// The per-identity counts follow every way a lease or session comes and
// goes, and a restored snapshot rebuilds them.
func TestIdentityUsage(t *testing.T) {
	f := New()
	sec := int64(time.Second)
	a, b := TagOwner("alice", "w1"), TagOwner("bob", "w2")
	r := apply(t, f, 1, Entry{Now: sec, Ops: []Op{
		{Type: OpAcquire, Key: "x", Owner: a, Handle: "h1", TTL: time.Second},
		{Type: OpAcquire, Key: "y", Owner: a, Handle: "h2", TTL: time.Minute},
		{Type: OpAcquire, Key: "s", Owner: b, Handle: "h3", TTL: time.Minute, Mode: ModeShared, Permits: 3},
		{Type: OpAcquire, Key: "s", Owner: a, Handle: "h4", TTL: time.Minute, Mode: ModeShared, Permits: 3},
		{Type: OpSessionOpen, Key: "sess1", Owner: b, TTL: time.Minute},
		{Type: OpAcquire, Key: "z", Owner: b, Handle: "h5", Session: "sess1", TTL: time.Minute},
		{Type: OpAcquire, Key: "plain", Owner: "untagged", Handle: "h6", TTL: time.Minute},
	}})
	for i, res := range r {
		if res.Status != StatusOK {
			t.Fatalf("op %d: %+v", i, res)
		}
	}
	want := func(id string, leases, sessions int) {
		t.Helper()
		if u := f.IdentityUsage(id); u.Leases != leases || u.Sessions != sessions {
			t.Fatalf("%s: %+v, want %d leases, %d sessions", id, u, leases, sessions)
		}
	}
	want("alice", 3, 0)
	want("bob", 2, 1)
	want("", 0, 0)
	restoredWants := func(f2 *FSM) {
		t.Helper()
		for _, id := range []string{"alice", "bob"} {
			if u, u2 := f.IdentityUsage(id), f2.IdentityUsage(id); u != u2 {
				t.Fatalf("%s after restore: %+v, before %+v", id, u2, u)
			}
		}
	}
	restoredWants(restored(t, snapBytes(t, f)))
	// Release one, expire one (taken over by bob), close bob's session.
	r = apply(t, f, 2, Entry{Now: 3 * sec, Ops: []Op{
		{Type: OpRelease, Key: "y", Handle: "h2", Token: 2},
		{Type: OpAcquire, Key: "x", Owner: b, Handle: "h7", TTL: time.Minute},
		{Type: OpSessionClose, Key: "sess1"},
	}})
	for i, res := range r {
		if res.Status != StatusOK {
			t.Fatalf("op %d: %+v", i, res)
		}
	}
	want("alice", 1, 0) // the shared holder
	want("bob", 2, 0)   // the shared holder and x
	restoredWants(restored(t, snapBytes(t, f)))
	f.DropLeases()
	want("alice", 0, 0)
	want("bob", 0, 0)
}
