package locktest

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"testing"
)

// brokenLockers are MemStores with one deliberate defect each, and the suite
// case that must catch it.
var brokenLockers = []struct {
	name     string
	bugs     bugs
	caughtBy string
}{
	{"grants-held-key-twice", bugs{grantHeldKey: true}, "MutualExclusion"},
	{"never-expires", bugs{neverExpire: true}, "CrashedHolderExpires"},
	{"reuses-token-on-takeover", bugs{reuseTokenOnTakeover: true}, "FencingTokens"},
	{"stale-release-frees-new-holder", bugs{releaseIgnoresHandle: true}, "StaleRelease"},
	{"grants-cancelled-waiter", bugs{grantCancelledWaiter: true}, "CancelledWaiter"},
	{"renew-revives-expired-lease", bugs{renewRevivesExpired: true}, "Renew"},
	{"serves-waiters-newest-first", bugs{lifoWaiters: true}, "FIFO"},
	{"release-wakes-no-waiter", bugs{releaseWakesNobody: true}, "BlockedAcquire"},
	{"never-tells-holder-wanted", bugs{neverWanted: true}, "Wanted"},
	{"tells-every-holder-wanted", bugs{wantedByAny: true}, "Wanted"},
	{"shared-admits-exclusive", bugs{sharedAdmitsExclusive: true}, "SharedExclusion"},
	{"readers-bypass-writer", bugs{readersBypassWriter: true}, "WriterNotStarved"},
	{"permits-exceeded", bugs{permitsExceeded: true}, "Semaphore"},
	{"multikey-partial-hold", bugs{multiKeyPartialHold: true}, "MultiKey"},
	{"watch-drops-expired", bugs{watchDropsExpired: true}, "Watch"},
	{"watch-drops-queued-grant", bugs{watchDropsQueuedGrant: true}, "Election"},
	{"lockdelay-ignored", bugs{lockDelayIgnored: true}, "LockDelay"},
	{"pretends-shared", bugs{pretendsShared: true}, "Unsupported"},
}

const brokenEnv = "LOCKTEST_BROKEN"

// TestBroken proves that the suite catches each broken locker: it runs the
// case that targets the defect on each one in a child test process (a
// failing suite must fail a test, which cannot be contained inside this
// one) and asserts that the child fails, in that case.
func TestBroken(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole suite once per broken locker")
	}
	failLine := regexp.MustCompile(`--- FAIL: TestBrokenLocker/([A-Za-z]+)`)
	for _, bl := range brokenLockers {
		t.Run(bl.name, func(t *testing.T) {
			t.Parallel()
			// Only the case that targets the defect runs: the whole suite
			// once per broken locker, two at a time on two cores, took
			// minutes; set LOCKTEST_BROKEN and run TestBrokenLocker to see
			// every case a defect fails.
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenLocker$/^"+bl.caughtBy+"$", "-test.v", "-test.count=1", "-test.timeout=5m")
			cmd.Env = append(os.Environ(), brokenEnv+"="+bl.name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed broken locker %q:\n%s", bl.name, out)
			}
			var failed []string
			for _, m := range failLine.FindAllSubmatch(out, -1) {
				if c := string(m[1]); !slices.Contains(failed, c) {
					failed = append(failed, c)
				}
			}
			if !slices.Contains(failed, bl.caughtBy) {
				t.Fatalf("broken locker %q: want case %s to fail, failed cases: %v\n%s", bl.name, bl.caughtBy, failed, tail(out))
			}
			t.Logf("%s caught by %v", bl.name, failed)
		})
	}
}

// TestBrokenLocker runs the suite on the broken locker named by
// $LOCKTEST_BROKEN. It is the child process of TestBroken and does nothing
// on its own.
func TestBrokenLocker(t *testing.T) {
	name := os.Getenv(brokenEnv)
	if name == "" {
		t.Skip("child of TestBroken; set " + brokenEnv + " to a broken locker's name to run it")
	}
	i := slices.IndexFunc(brokenLockers, func(b struct {
		name     string
		bugs     bugs
		caughtBy string
	}) bool {
		return b.name == name
	})
	if i < 0 {
		t.Fatalf("no broken locker named %q", name)
	}
	Run(t, memFactory(brokenLockers[i].bugs))
}

// tail returns the last lines of a test's output.
func tail(out []byte) []byte {
	lines := bytes.Split(out, []byte("\n"))
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	return bytes.Join(lines, []byte("\n"))
}
