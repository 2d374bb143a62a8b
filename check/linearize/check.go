package linearize

import (
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/lockgate/lockgate/check"
)

// Result is what Check found.
type Result struct {
	// Overlaps counts pairs of beliefs of different clients on the same key
	// that intersect in time (see Overlaps).
	Overlaps int
	// OverlapExamples describes a few of them (client, key, intervals).
	OverlapExamples []string
	// StaleWritesAccepted counts fenced-store writes applied with a token
	// lower than one that store had applied before for the key. Must be 0.
	StaleWritesAccepted int
	// StaleWritesRejected counts fenced writes that completed and were
	// rejected (OK false, Unknown false): the fence at work.
	StaleWritesRejected int
	// UnfencedConflicts counts unfenced-store writes applied with a token
	// lower than one that store had applied before for the key.
	UnfencedConflicts int
	// TokensChecked is false when Options.NoTokens skipped the token
	// check.
	TokensChecked bool
	// TokensReused counts grants of a key whose token an earlier grant of
	// the key carried; TokenRegressions grants whose token is lower than
	// one granted for the key before they were requested (see Tokens).
	// Both must be 0.
	TokensReused, TokenRegressions int
	// TokenExamples describes a few of them.
	TokenExamples []string
	// ModeTokenViolations counts, in a history with shared holds, the
	// grants whose token is not above that of every grant of the other
	// mode received before them (see ModeTokens). Must be 0. Included in
	// TokenRegressions too.
	ModeTokenViolations int
	// SharedKeys counts the keys with shared holds: they are left out of
	// the linearizability search, whose model is a mutex's (the overlap
	// checker judges their modes).
	SharedKeys int
	// PermitExcess counts the instants at which more shared holders than
	// a semaphore's permits believed they held its key (included in
	// Overlaps).
	PermitExcess int
	// Linearizable reports whether the acquire/release history is
	// linearizable: every key's search ended Ok (false also when one timed
	// out: see LinearizabilityResult).
	Linearizable bool
	// LinearizabilityResult sums up the keys' verdicts: Ok when all are
	// Ok, Illegal when any is, else Unknown (a search timed out).
	LinearizabilityResult porcupine.CheckResult
	// LinearizabilityKeys is every key's verdict, in key order (Visualize
	// the ones that are not Ok); LinearizabilityUnknownKeys counts the
	// Unknown ones.
	LinearizabilityKeys        []KeyVerdict
	LinearizabilityUnknownKeys int
	// Unavailable is the total length of the gaps longer than Options.Gap
	// between successful acquire completions (see Availability).
	Unavailable time.Duration
	// Recoveries has one entry per fault: from its Heal to the first
	// successful acquire completion at or after Heal. For a fault that did
	// not recover it is the time from Heal to the end of the history (a
	// lower bound) and Recovered is false.
	Recoveries []time.Duration
	// Recovered has one entry per fault: whether an acquire succeeded at or
	// after its Heal.
	Recovered []bool
	// Reads is what the reads (Inspect answers) showed: how many were
	// answered, and the phantoms (a token no known grant carried) with
	// those no unknown acquire explains (see ReadPhantoms; not checked
	// when Options.NoTokens: the history's tokens are not the backend's).
	// The other reads are part of the linearizability search.
	Reads ReadStats
	// MaxRecovery is the largest of Recoveries.
	MaxRecovery time.Duration
	// Availability is the lock-delay and the recovery per fault kind.
	Availability []check.KindAvailability
	// Joint is the joint search's verdict (JointLinearizability: every
	// key of a connected group at once, an AcquireAll one operation),
	// run when the history has an operation that spans keys (HasJoint),
	// else over the keys with shared holds, which the per-key mutex
	// search leaves out (one key a group); nil when there are neither.
	Joint *JointVerdict
}

// NotOkKeys returns the keys whose linearizability verdict is not Ok.
func (r Result) NotOkKeys() []string {
	var keys []string
	for _, v := range r.LinearizabilityKeys {
		if v.Result != porcupine.Ok {
			keys = append(keys, v.Key)
		}
	}
	return keys
}

// Check runs every checker over h.
func Check(h check.History, faults []check.Fault, opts check.Options) Result {
	opts = opts.WithDefaults()
	var r Result
	var pairs int
	pairs, r.PermitExcess, r.OverlapExamples = check.OverlapsModes(h, opts.MaxExamples)
	r.Overlaps = pairs + r.PermitExcess
	r.StaleWritesAccepted, r.StaleWritesRejected, r.UnfencedConflicts = check.StaleWrites(h)
	if !opts.NoTokens {
		r.TokensChecked = true
		r.TokensReused, r.TokenRegressions, r.TokenExamples = check.Tokens(h, opts.MaxExamples)
		var ex []string
		r.ModeTokenViolations, ex = check.ModeTokens(h, opts.MaxExamples)
		r.TokenRegressions += r.ModeTokenViolations
		r.TokenExamples = append(r.TokenExamples, ex...)
	}
	if !opts.NoTokens {
		r.Reads = ReadPhantoms(h, opts.MaxExamples)
	}
	mutex, shared := check.SplitShared(h)
	r.SharedKeys = shared
	r.LinearizabilityKeys = LinearizabilityByKey(mutex, opts)
	r.LinearizabilityResult, r.LinearizabilityUnknownKeys = Verdict(r.LinearizabilityKeys)
	r.Linearizable = r.LinearizabilityResult == porcupine.Ok
	switch {
	case HasJoint(h):
		v := JointLinearizability(h, opts)
		r.Joint = &v
	case shared > 0:
		// The keys with shared holds (read locks, semaphores), which the
		// mutex model cannot judge: the joint model can, one key a group.
		v := JointLinearizability(check.OnlySharedKeys(h), opts)
		r.Joint = &v
	}
	r.Unavailable = check.TotalGaps(h, opts.Gap)
	r.Recoveries, r.Recovered = check.RecoveryTimes(h, faults)
	for _, d := range r.Recoveries {
		r.MaxRecovery = max(r.MaxRecovery, d)
	}
	r.Availability = check.AvailabilityByKind(h, faults)
	return r
}
