package campaign

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/check"
	"github.com/lockgate/lockgate/lock"
)

// The campaign's modes: the same faults over shared and
// exclusive holds, or over a semaphore's permits.
const (
	ChaosExclusive = "exclusive"
	ChaosRW        = "rw"
	ChaosSemaphore = "semaphore"
	ChaosElection  = "election"
	ChaosMulti     = "multi"
)

// ChaosModes lists the modes, as --mode spells them.
var ChaosModes = []string{ChaosExclusive, ChaosRW, ChaosSemaphore, ChaosElection, ChaosMulti}

// chaosFeature is the primitive a campaign's mode needs (0: none).
func chaosFeature(mode string) lock.Features {
	switch mode {
	case ChaosRW:
		return lock.FeatureShared
	case ChaosSemaphore:
		return lock.FeatureSemaphore
	case ChaosElection:
		return lock.FeatureWatch // Observe; Campaign needs only AutoRenew
	case ChaosMulti:
		return lock.FeatureMultiKey | lock.FeatureShared | lock.FeatureSemaphore
	}
	return 0
}

// chaosNeeds returns an error matching lock.ErrUnsupported when l does not
// offer the primitive of cfg's mode (asked again after one plain acquire,
// as an SDK client learns its gateway's features once connected).
func chaosNeeds(ctx context.Context, cfg ChaosConfig, l lock.Locker) error {
	f := chaosFeature(cfg.Mode)
	if f == 0 || lock.FeaturesOf(l).Has(f) {
		return nil
	}
	conn := &provision.Conn{Backend: cfg.Backend, Via: "campaign", Clients: []lock.Locker{l}}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return provision.NeedFeature(pctx, conn, f)
}

// acquireOptions are the options of a client's next acquire in the
// campaign's mode.
func (w *Workload) acquireOptions(rng *rand.Rand, ttl time.Duration) lock.AcquireOptions {
	o := lock.AcquireOptions{TTL: ttl}
	switch w.cfg.Mode {
	case ChaosRW:
		if rng.Float64() < w.cfg.SharedFraction {
			o.Mode = lock.ModeShared
		}
	case ChaosSemaphore:
		o.Mode, o.Permits = lock.ModeShared, w.cfg.Permits
	}
	return o
}

// Read records a shared holder's read: a write that no store applied
// (StoreSeq 0), which the overlap checker takes as the holder's belief
// that it still held the key, and the store checkers ignore.
func (w *Workload) Read(id int, key string, token lock.Token) {
	r := check.Op{Client: id, Key: key, Kind: check.Write, Token: uint64(token), Start: w.Now()}
	r.End, r.OK = w.Now(), true
	w.Record(r)
}

// modeNotes are the report's notes on its mode.
func (rep *ChaosReport) modeNotes() []string {
	switch rep.Holds {
	case ChaosRW:
		return []string{fmt.Sprintf("rw: each acquire shared with probability %.2f, else exclusive; shared holders read (no store write); overlaps count an exclusive holder beside any other, and keys with shared holds are searched by the joint model (holders of both modes, joint_*), not the per-key mutex model", rep.SharedFraction)}
	case ChaosSemaphore:
		return []string{fmt.Sprintf("semaphore: every acquire one of %d permits; holders read (no store write); overlaps count a permit granted while all %d were held (permit_excess), and the keys are searched by the joint model (permits bounded, joint_*), not the per-key mutex model", rep.Permits, rep.Permits)}
	case ChaosMulti:
		return []string{rep.multiNote()}
	case ChaosElection:
		return []string{"election: clients campaign (lock/election, auto-renewed) on election keys, lead writing with their term's token, then resign or crash (Locker closed: the lease runs out); " +
			"a term is an acquire ended at the leader's last deadline, so overlaps count two leaders at once by a leader's own clock; " +
			"observers (election.Observe, each on its own client) must report leader tokens in increasing order, only tokens some grant carried (or an unknown campaign may have), " +
			"and every term requested after their watch was in sync, unless that watch broke before reporting it or a later term (missed during re-watch: Observe reports the leader, not every term)"}
	}
	return nil
}

// holdsText describes a campaign's mode and its own verdicts ("" for a
// mutex campaign).
func (rep *ChaosReport) holdsText() string {
	switch rep.Holds {
	case ChaosRW:
		return fmt.Sprintf("rw, %.0f%% shared; %d keys with shared holds%s; %d grants with a token not above the other mode's before them",
			100*rep.SharedFraction, rep.SharedKeys, rep.jointText(), rep.ModeTokenViolations)
	case ChaosSemaphore:
		return fmt.Sprintf("semaphore of %d permits; %d permits granted beyond them; %d keys%s",
			rep.Permits, rep.PermitExcess, rep.SharedKeys, rep.jointText())
	case ChaosMulti:
		return rep.multiText()
	case ChaosElection:
		if el := rep.Election; el != nil {
			return fmt.Sprintf("election on %d keys, %d observers each: %d terms (%d resigned, %d crashed, %d paused); %d leader reports, %d vacant, over %d watches (%d broke); "+
				"per term and observer %d seen, %d missed during re-watch, %d before sync, %d unseen; %d order violations; %d phantom tokens (%d explained by unknown campaigns, %d ghosts of campaigns in flight)",
				el.Keys, el.ObserversPerKey, el.Terms, el.Resigned, el.Crashed, el.Paused, el.Reports, el.Vacant, el.Watches, el.Rewatches,
				el.Seen, el.MissedDuringRewatch, el.BeforeSync, el.Unseen, el.OrderViolations, el.PhantomTokens, el.PhantomsExplained, el.PhantomsInFlight)
		}
	}
	return ""
}

// jointText is the joint search's verdict for a mode whose shared keys it
// searched ("" when it did not run).
func (rep *ChaosReport) jointText() string {
	if j := rep.Joint; j != nil {
		return fmt.Sprintf(", searched jointly: %s over %d operations in %d groups, %.1fs", j.Result, j.Ops, j.Groups, j.ElapsedS)
	}
	return ""
}
