package lock

import (
	"errors"
	"testing"
	"time"
)

// TestSessionLeasesFollowAndEnd: a session's leases take its TTL and
// deadline, follow its extensions, and end with it, with its cause; a
// released lease leaves it; a lease granted into an ended session is over
// at once.
func TestSessionLeasesFollowAndEnd(t *testing.T) {
	t0 := time.Now()
	s := NewSession(SessionGrant{ID: "s", Owner: "o", TTL: time.Minute, Sent: t0})
	a := NewLease(Grant{Key: "a", Token: 1, TTL: time.Second, Sent: t0, Session: s})
	b := NewLease(Grant{Key: "b", Token: 2, Sent: t0, Session: s})
	if a.TTL() != time.Minute || !a.Deadline().Equal(s.Deadline()) {
		t.Fatalf("lease TTL %v deadline %v, want the session's %v %v", a.TTL(), a.Deadline(), time.Minute, s.Deadline())
	}
	if s.Leases() != 2 {
		t.Fatalf("%d leases in the session, want 2", s.Leases())
	}
	t1 := t0.Add(10 * time.Second)
	if !s.Extend(t1) || !a.Deadline().Equal(DeadlineFor(t1, time.Minute, 0)) || !b.Deadline().Equal(s.Deadline()) {
		t.Fatalf("after Extend: session %v, a %v, b %v", s.Deadline(), a.Deadline(), b.Deadline())
	}
	if s.Extend(t0); !s.Deadline().Equal(DeadlineFor(t1, time.Minute, 0)) {
		t.Fatal("an older keep-alive moved the deadline back")
	}
	b.End(ErrReleased)
	if s.Leases() != 1 {
		t.Fatalf("%d leases after a release, want 1", s.Leases())
	}
	// The backend says the TTL is 2 s: the session (and a) take it.
	if !s.Renewed(t1, 2*time.Second) || s.TTL() != 2*time.Second || !a.Deadline().Equal(DeadlineFor(t1, 2*time.Second, 0)) {
		t.Fatalf("after Renewed: TTL %v, a's deadline %v", s.TTL(), a.Deadline())
	}
	err := s.Refused(nil)
	if !errors.Is(err, ErrSessionExpired) || !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Refused = %v, want ErrSessionExpired and ErrNotHeld", err)
	}
	select {
	case <-a.Done():
	default:
		t.Fatal("a lease outlived its session")
	}
	if !errors.Is(a.Err(), ErrSessionExpired) || !errors.Is(b.Err(), ErrReleased) {
		t.Fatalf("a: %v, b: %v", a.Err(), b.Err())
	}
	late := NewLease(Grant{Key: "c", Token: 3, Sent: time.Now(), Session: s})
	if late.Err() == nil {
		t.Fatal("a lease granted into an ended session is live")
	}
	<-late.Done()
	if s.Extend(time.Now()) {
		t.Fatal("an ended session was extended")
	}
}

// TestSessionDeadlineEndsLeases: past its deadline a session ends every
// lease in it with ErrExpired.
func TestSessionDeadlineEndsLeases(t *testing.T) {
	s := NewSession(SessionGrant{ID: "s", TTL: 50 * time.Millisecond, Sent: time.Now()})
	l := NewLease(Grant{Key: "a", Token: 1, Sent: time.Now(), Session: s})
	<-l.Done()
	if !errors.Is(l.Err(), ErrExpired) || !errors.Is(s.Err(), ErrExpired) {
		t.Fatalf("lease %v, session %v, want ErrExpired", l.Err(), s.Err())
	}
	if time.Now().Before(s.Deadline()) {
		t.Fatal("ended before its deadline")
	}
}

// TestSessionOptions: the session's TTL and owner are validated, and a
// lease in a session takes the session's TTL and owner and refuses
// another TTL.
func TestSessionOptions(t *testing.T) {
	if err := ValidateSessionOptions(SessionOptions{TTL: time.Millisecond}); !errors.Is(err, ErrInvalidTTL) {
		t.Errorf("1 ms session: %v", err)
	}
	if err := ValidateSessionOptions(SessionOptions{Owner: "a\x00b"}); !errors.Is(err, ErrInvalidOwner) {
		t.Errorf("control character in the owner: %v", err)
	}
	s := NewSession(SessionGrant{ID: "s", Owner: "alice", TTL: 5 * time.Second, Sent: time.Now()})
	o, err := AcquireOptions{Session: s}.Normalize("k", "default")
	if err != nil || o.TTL != 5*time.Second || o.AutoRenew || o.Owner != "alice" {
		t.Fatalf("Normalize = %+v %v", o, err)
	}
	if _, err := (AcquireOptions{Session: s, TTL: time.Second}).Normalize("k", "d"); !errors.Is(err, ErrInvalidTTL) {
		t.Errorf("another TTL in a session: %v", err)
	}
	if (AcquireOptions{Session: s}).Needs() != FeatureSessions {
		t.Error("a session lease does not need FeatureSessions")
	}
	s.End(nil)
	if _, err := (AcquireOptions{Session: s}).Normalize("k", "d"); !errors.Is(err, ErrSessionExpired) {
		t.Errorf("acquire in an ended session: %v", err)
	}
	if f, _ := ParseFeatures([]string{"sessions"}); f != FeatureSessions || FeatureSessions.String() != "sessions" {
		t.Errorf("feature name: %v %q", f, FeatureSessions.String())
	}
}
