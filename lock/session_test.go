package lock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// TestSessionLeasesFollowAndEnd: a session's leases take its TTL and
// deadline, follow its extensions, and end with it, with its cause; a
// released lease leaves it; a lease granted into an ended session is over
// at once.
func TestSessionLeasesFollowAndEnd(t *testing.T) {
	t0 := time.Now()
	s := kit.NewSession(kit.SessionGrant{ID: "s", Owner: "o", TTL: time.Minute, Sent: t0})
	a := kit.NewLease(kit.Grant{Key: "a", Token: 1, TTL: time.Second, Sent: t0, Session: s})
	b := kit.NewLease(kit.Grant{Key: "b", Token: 2, Sent: t0, Session: s})
	if a.TTL() != time.Minute || !a.Deadline().Equal(s.Deadline()) {
		t.Fatalf("lease TTL %v deadline %v, want the session's %v %v", a.TTL(), a.Deadline(), time.Minute, s.Deadline())
	}
	if s.Leases() != 2 {
		t.Fatalf("%d leases in the session, want 2", s.Leases())
	}
	t1 := t0.Add(10 * time.Second)
	if !kit.ExtendSession(s, t1) || !a.Deadline().Equal(kit.DeadlineFor(t1, time.Minute, 0)) || !b.Deadline().Equal(s.Deadline()) {
		t.Fatalf("after Extend: session %v, a %v, b %v", s.Deadline(), a.Deadline(), b.Deadline())
	}
	if kit.ExtendSession(s, t0); !s.Deadline().Equal(kit.DeadlineFor(t1, time.Minute, 0)) {
		t.Fatal("an older keep-alive moved the deadline back")
	}
	b.End(lock.ErrReleased)
	if s.Leases() != 1 {
		t.Fatalf("%d leases after a release, want 1", s.Leases())
	}
	// The backend says the TTL is 2 s: the session (and a) take it.
	if !kit.SessionRenewed(s, t1, 2*time.Second) || s.TTL() != 2*time.Second || !a.Deadline().Equal(kit.DeadlineFor(t1, 2*time.Second, 0)) {
		t.Fatalf("after Renewed: TTL %v, a's deadline %v", s.TTL(), a.Deadline())
	}
	err := kit.SessionRefused(s, nil)
	if !errors.Is(err, lock.ErrSessionExpired) || !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Refused = %v, want lock.ErrSessionExpired and lock.ErrNotHeld", err)
	}
	select {
	case <-a.Done():
	default:
		t.Fatal("a lease outlived its session")
	}
	if !errors.Is(a.Err(), lock.ErrSessionExpired) || !errors.Is(b.Err(), lock.ErrReleased) {
		t.Fatalf("a: %v, b: %v", a.Err(), b.Err())
	}
	late := kit.NewLease(kit.Grant{Key: "c", Token: 3, Sent: time.Now(), Session: s})
	if late.Err() == nil {
		t.Fatal("a lease granted into an ended session is live")
	}
	<-late.Done()
	if kit.ExtendSession(s, time.Now()) {
		t.Fatal("an ended session was extended")
	}
}

// TestSessionDeadlineEndsLeases: past its deadline a session ends every
// lease in it with lock.ErrExpired.
func TestSessionDeadlineEndsLeases(t *testing.T) {
	s := kit.NewSession(kit.SessionGrant{ID: "s", TTL: 50 * time.Millisecond, Sent: time.Now()})
	l := kit.NewLease(kit.Grant{Key: "a", Token: 1, Sent: time.Now(), Session: s})
	<-l.Done()
	if !errors.Is(l.Err(), lock.ErrExpired) || !errors.Is(s.Err(), lock.ErrExpired) {
		t.Fatalf("lease %v, session %v, want lock.ErrExpired", l.Err(), s.Err())
	}
	if time.Now().Before(s.Deadline()) {
		t.Fatal("ended before its deadline")
	}
}

// TestSessionOptions: the session's TTL and owner are validated, and a
// lease in a session takes the session's TTL and owner and refuses
// another TTL.
func TestSessionOptions(t *testing.T) {
	if err := kit.ValidateSessionOptions(lock.SessionOptions{TTL: time.Millisecond}); !errors.Is(err, lock.ErrInvalidTTL) {
		t.Errorf("1 ms session: %v", err)
	}
	if err := kit.ValidateSessionOptions(lock.SessionOptions{Owner: "a\x00b"}); !errors.Is(err, lock.ErrInvalidOwner) {
		t.Errorf("control character in the owner: %v", err)
	}
	s := kit.NewSession(kit.SessionGrant{ID: "s", Owner: "alice", TTL: 5 * time.Second, Sent: time.Now()})
	o, err := kit.Normalize(lock.AcquireOptions{Session: s}, "k", "default")
	if err != nil || o.TTL != 5*time.Second || o.AutoRenew || o.Owner != "alice" {
		t.Fatalf("Normalize = %+v %v", o, err)
	}
	if _, err := kit.Normalize(lock.AcquireOptions{Session: s, TTL: time.Second}, "k", "d"); !errors.Is(err, lock.ErrInvalidTTL) {
		t.Errorf("another TTL in a session: %v", err)
	}
	if kit.Needs(lock.AcquireOptions{Session: s}) != lock.FeatureSessions {
		t.Error("a session lease does not need lock.FeatureSessions")
	}
	s.End(nil)
	if _, err := kit.Normalize(lock.AcquireOptions{Session: s}, "k", "d"); !errors.Is(err, lock.ErrSessionExpired) {
		t.Errorf("acquire in an ended session: %v", err)
	}
	if f, _ := lock.ParseFeatures([]string{"sessions"}); f != lock.FeatureSessions || lock.FeatureSessions.String() != "sessions" {
		t.Errorf("feature name: %v %q", f, lock.FeatureSessions.String())
	}
}
