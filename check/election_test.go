package check_test

import (
	"testing"

	"github.com/lockgate/lockgate/check"
	. "github.com/lockgate/lockgate/check/internal/checktest"
)

// seen is a report of a leader with token tok by observer o at ms.
func seen(o int, key string, at float64, tok uint64) check.Observation {
	return check.Observation{Observer: o, Key: key, At: D(at), Present: true, Token: tok}
}

func vacant(o int, key string, at float64) check.Observation {
	return check.Observation{Observer: o, Key: key, At: D(at)}
}

// watch is a session of observer o synced at synced ms that ended at end
// ms (broken or not).
func watch(o int, key string, start, synced, end float64, broken bool) check.WatchSession {
	return check.WatchSession{Observer: o, Key: key, Start: D(start), Synced: D(synced), End: D(end), Broken: broken}
}

// terms: three leaders of "e" in turn, tokens 1, 2, 3.
var electionTerms = H(
	Acq(0, "e", 10, 12, 1, 1000, 1000), Rel(0, "e", 100, 101, 1),
	Acq(1, "e", 20, 102, 2, 1000, 1100), Rel(1, "e", 200, 201, 2),
	Acq(2, "e", 30, 202, 3, 1000, 1200), Rel(2, "e", 300, 301, 3),
)

func TestElectionsValid(t *testing.T) {
	obs := []check.Observation{
		vacant(0, "e", 6), seen(0, "e", 12, 1), vacant(0, "e", 101), seen(0, "e", 102, 2), seen(0, "e", 202, 3), vacant(0, "e", 301),
		vacant(1, "e", 7), seen(1, "e", 13, 1), seen(1, "e", 103, 2), seen(1, "e", 203, 3),
	}
	sessions := []check.WatchSession{watch(0, "e", 1, 5, 400, false), watch(1, "e", 1, 6, 400, false)}
	r := check.Elections(electionTerms, obs, sessions, 0)
	if r.Violations() != 0 || r.Terms != 3 || r.Seen != 6 || r.Reports != 6 || r.Vacant != 4 || r.Rewatches != 0 {
		t.Fatalf("a valid election failed: %+v", r)
	}
}

// TestElectionsOrder: an observer that reports term 2 after term 3.
func TestElectionsOrder(t *testing.T) {
	obs := []check.Observation{seen(0, "e", 12, 1), seen(0, "e", 202, 3), seen(0, "e", 203, 2)}
	r := check.Elections(electionTerms, obs, []check.WatchSession{watch(0, "e", 1, 5, 400, false)}, 0)
	if r.OrderViolations != 1 || r.Violations() != 1 || len(r.Examples) != 1 {
		t.Fatalf("a token going back passed: %+v", r)
	}
	// The same token twice is not an increase either.
	obs = []check.Observation{seen(0, "e", 12, 1), seen(0, "e", 102, 2), seen(0, "e", 110, 2), seen(0, "e", 202, 3)}
	if r := check.Elections(electionTerms, obs, []check.WatchSession{watch(0, "e", 1, 5, 400, false)}, 0); r.OrderViolations != 1 {
		t.Fatalf("a token reported twice passed: %+v", r)
	}
}

// TestElectionsPhantom: a token that no grant carried, or reported before
// its acquire started, is a violation unless an unknown acquire of the
// key, started before the report, may have been granted it.
func TestElectionsPhantom(t *testing.T) {
	sessions := []check.WatchSession{watch(0, "e", 1, 5, 400, true)} // broken: completeness excuses the terms
	r := check.Elections(electionTerms, []check.Observation{seen(0, "e", 150, 7)}, sessions, 0)
	if r.PhantomTokens != 1 || r.PhantomsExplained != 0 || r.Violations() != 1 {
		t.Fatalf("a token granted to nobody passed: %+v", r)
	}
	// Reported before its acquire started: not this grant's.
	r = check.Elections(electionTerms, []check.Observation{seen(0, "e", 15, 3)}, sessions, 0)
	if r.PhantomTokens != 1 || r.Violations() != 1 {
		t.Fatalf("a token reported before its grant was asked for passed: %+v", r)
	}
	// An unknown acquire started before the report explains one phantom,
	// not two; one started after the report explains none.
	hist := append(check.History{AcqUnknown(5, "e", 140, 160, 1000)}, electionTerms...)
	r = check.Elections(hist, []check.Observation{seen(0, "e", 150, 7)}, sessions, 0)
	if r.PhantomTokens != 1 || r.PhantomsExplained != 1 || r.Violations() != 0 {
		t.Fatalf("a phantom explained by an unknown acquire failed: %+v", r)
	}
	r = check.Elections(hist, []check.Observation{seen(0, "e", 150, 7), seen(0, "e", 250, 8)}, sessions, 0)
	if r.PhantomTokens != 2 || r.PhantomsExplained != 1 || r.Violations() != 1 {
		t.Fatalf("two phantoms, one unknown acquire: %+v", r)
	}
	// A phantom named after a client whose acquire was in flight: a
	// ghost term, a violation all the same.
	ghost := seen(0, "e", 50, 7)
	ghost.Value = "1"
	r = check.Elections(electionTerms, []check.Observation{ghost}, sessions, 0)
	if r.PhantomTokens != 1 || r.PhantomsInFlight != 1 || r.Violations() != 1 {
		t.Fatalf("a ghost term: %+v", r)
	}
	r = check.Elections(hist, []check.Observation{seen(0, "e", 130, 7)}, sessions, 0)
	if r.PhantomTokens != 1 || r.PhantomsExplained != 0 || r.Violations() != 1 {
		t.Fatalf("a phantom reported before the unknown acquire started passed: %+v", r)
	}
}

// TestElectionsCompleteness: a term skipped by an unbroken watch in sync
// before it was requested is a violation; one skipped by a watch that
// broke before reporting it (or anything later) is missed during the
// re-watch; one requested before the first sync is not judged.
func TestElectionsCompleteness(t *testing.T) {
	// Term 2 skipped, the watch unbroken.
	obs := []check.Observation{seen(0, "e", 12, 1), seen(0, "e", 202, 3)}
	r := check.Elections(electionTerms, obs, []check.WatchSession{watch(0, "e", 1, 5, 400, false)}, 0)
	if r.Unseen != 1 || r.Violations() != 1 || r.Seen != 2 {
		t.Fatalf("a term skipped by an unbroken watch passed: %+v", r)
	}
	// Term 2 skipped by a watch that broke, but only after reporting term
	// 3: it saw term 2's grant, which came first.
	sessions := []check.WatchSession{watch(0, "e", 1, 5, 250, true), watch(0, "e", 260, 270, 400, false)}
	r = check.Elections(electionTerms, obs, sessions, 0)
	if r.Unseen != 1 || r.Violations() != 1 {
		t.Fatalf("a term skipped by a watch that reported a later one passed: %+v", r)
	}
	// The watch broke at 90 ms, before term 2's grant; the re-watch
	// synced at 210 ms, when term 3 led: term 2 came and went unseen.
	sessions = []check.WatchSession{watch(0, "e", 1, 5, 90, true), watch(0, "e", 200, 210, 400, false)}
	r = check.Elections(electionTerms, []check.Observation{seen(0, "e", 12, 1), seen(0, "e", 210, 3)}, sessions, 0)
	if r.Violations() != 0 || r.MissedDuringRewatch != 1 || r.Rewatches != 1 || r.Watches != 2 {
		t.Fatalf("a term missed during a re-watch: %+v", r)
	}
	// The observer's first watch synced at 25 ms: term 1 (asked at 10
	// ms) is not judged, term 2 (asked at 20 ms) neither; term 3 is.
	sessions = []check.WatchSession{watch(0, "e", 1, 25, 400, false)}
	r = check.Elections(electionTerms, []check.Observation{seen(0, "e", 25, 1)}, sessions, 0)
	if r.BeforeSync != 1 || r.Unseen != 1 || r.Seen != 1 {
		t.Fatalf("terms before the first sync: %+v", r)
	}
	// A watch that never synced covers nothing.
	r = check.Elections(electionTerms, nil, []check.WatchSession{{Observer: 0, Key: "e", Start: D(1), End: D(400), Broken: true}}, 0)
	if r.Violations() != 0 || r.BeforeSync != 3 {
		t.Fatalf("a watch that never synced: %+v", r)
	}
}
