package campaign

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/check"
	"github.com/lockgate/lockgate/lock"
)

// ChaosMulti's workload: on a small key space (ChaosConfig.Keys, default
// MultiKeys), each client in turn
//
//   - acquires 2 or 3 random keys at once (AcquireAll, exclusive),
//   - or one key exclusively, or one key shared (a read lock),
//   - or one permit of MultiPermits on a semaphore key of its own
//     (MultiSemaphoreKey: a semaphore's N is fixed by its holders, so it
//     shares no key with the read locks),
//   - or asks who holds a key (Inspect: a check.Read with the tokens shown).
//
// A holder writes to the fenced store with each key's token (a shared
// holder reads: Workload.Read), holds, and releases each key of its
// grant on its own, at once, recording one release per key with its own
// outcome. An AcquireAll is recorded as one acquire per key tied by
// check.Op.Joint, so that the per-key checkers see each key and the joint
// linearizability search (check/linearize, JointLinearizability) sees one
// operation with one linearization point. Outcomes that are not known
// (timeouts, lost connections) are recorded as Unknown, not dropped.

// The multi mode's defaults and mix.
const (
	MultiKeys    = 5
	MultiClients = 10
	// MultiSemaphoreKey is the semaphore's key, MultiPermits its N.
	MultiSemaphoreKey = "chaos/sem"
	MultiPermits      = 2
)

// multiMix is the share of each kind of step, in this order: Inspect,
// AcquireAll, exclusive, shared, permit.
var multiMix = [...]float64{0.25, 0.30, 0.20, 0.15, 0.10}

const (
	stepRead = iota
	stepAll
	stepExclusive
	stepShared
	stepPermit
)

func multiStep(rng *rand.Rand) int {
	r := rng.Float64()
	for i, p := range multiMix {
		if r < p {
			return i
		}
		r -= p
	}
	return stepRead
}

// multiKeys draws n distinct keys of the key space, in random order (the
// contract promises no deadlock whatever the order).
func (w *Workload) multiKeys(rng *rand.Rand, n int) []string {
	n = min(n, w.cfg.Keys)
	var keys []string
	for _, i := range rng.Perm(w.cfg.Keys)[:n] {
		keys = append(keys, fmt.Sprintf("chaos/%d", i))
	}
	return keys
}

// multiDefaults fills in ChaosMulti's clients and keys.
func (c *ChaosConfig) multiDefaults() {
	c.Clients, c.Keys = cmp.Or(c.Clients, MultiClients), cmp.Or(c.Keys, MultiKeys)
}

// clientOf is the client of a campaign's mode.
func (w *Workload) clientOf(mode string) func(context.Context, int, lock.Locker, provision.ClientLinks, *rand.Rand) {
	if mode == ChaosMulti {
		return w.multiClient
	}
	return w.client
}

// multiClient is ChaosMulti's client: a step of the mix after another
// until ctx ends. It never renews.
func (w *Workload) multiClient(ctx context.Context, id int, l lock.Locker, links provision.ClientLinks, rng *rand.Rand) {
	ttl := w.cfg.TTL
	var seq uint64
	for ctx.Err() == nil {
		step := multiStep(rng)
		if step == stepRead {
			keys := w.multiKeys(rng, 1)
			if rng.IntN(4) == 0 {
				keys = []string{MultiSemaphoreKey}
			}
			w.inspectAny(ctx, rng, id, l, keys[0])
			continue
		}
		opts := lock.AcquireOptions{TTL: ttl}
		keys := w.multiKeys(rng, 1)
		switch step {
		case stepAll:
			keys = w.multiKeys(rng, 2+rng.IntN(2))
		case stepShared:
			opts.Mode = lock.ModeShared
		case stepPermit:
			opts.Mode, opts.Permits = lock.ModeShared, MultiPermits
			keys = []string{MultiSemaphoreKey}
		}
		var joint uint64
		if len(keys) > 1 {
			seq++
			joint = uint64(id+1)<<32 | seq
		}
		leases, tokens := w.acquireKeys(ctx, rng, id, l, keys, opts, joint)
		if leases == nil {
			continue
		}
		w.useAndRelease(ctx, rng, id, l, links, leases, tokens, opts.Mode == lock.ModeShared)
		if w.cfg.Think > 0 {
			provision.SleepCtx(ctx, provision.Between(rng, 0, w.cfg.Think))
		}
	}
}

// acquireKeys acquires keys (AcquireAll when more than one) and records
// one acquire per key; it returns the leases and their tokens as
// recorded, nil when nothing was granted.
func (w *Workload) acquireKeys(ctx context.Context, rng *rand.Rand, id int, l lock.Locker, keys []string, opts lock.AcquireOptions, joint uint64) ([]*lock.Lease, []lock.Token) {
	ttl := opts.TTL
	ops := make([]check.Op, len(keys))
	start := w.Now()
	for i, k := range keys {
		ops[i] = check.Op{Client: id, Key: k, Kind: check.Acquire, TTL: ttl, Start: start,
			Shared: opts.Mode == lock.ModeShared, Permits: opts.Permits, Joint: joint}
	}
	actx, cancel := context.WithTimeout(ctx, 2*ttl)
	var leases []*lock.Lease
	var err error
	what := "acquire"
	if len(keys) > 1 {
		what = "acquire-all"
		leases, err = lock.AcquireAll(actx, l, keys, opts)
	} else {
		var lease *lock.Lease
		if lease, err = l.Acquire(actx, keys[0], opts); err == nil {
			leases = []*lock.Lease{lease}
		}
	}
	cancel()
	end := w.Now()
	if err == nil {
		leases, err = inKeyOrder(leases, keys)
	}
	if err != nil {
		for i := range ops {
			ops[i].End, ops[i].Unknown = end, !errors.Is(err, lock.ErrNotAcquired)
			w.Record(ops[i])
		}
		if ctx.Err() == nil {
			w.fail(what, err)
			provision.SleepCtx(ctx, provision.Between(rng, 20*time.Millisecond, 100*time.Millisecond))
		}
		return nil, nil
	}
	w.Cycles.Add(1)
	tokens := make([]lock.Token, len(leases))
	for i, lease := range leases {
		tokens[i] = lease.Token
		if !w.Fencing {
			tokens[i] = lock.Token(w.synthetic.Add(1)) // as Workload.client numbers its grants
		}
		ops[i].End, ops[i].OK, ops[i].Token = end, true, uint64(tokens[i])
		ops[i].Deadline, ops[i].Session = lease.Deadline().Sub(w.Base), w.session
		w.Record(ops[i])
	}
	return leases, tokens
}

// useAndRelease writes with each lease (a shared holder reads), holds,
// and releases each lease at once, recording each release.
func (w *Workload) useAndRelease(ctx context.Context, rng *rand.Rand, id int, l lock.Locker, links provision.ClientLinks, leases []*lock.Lease, tokens []lock.Token, shared bool) {
	ttl := w.cfg.TTL
	paused := w.takePause()
	if paused {
		links.Cut()
		time.Sleep(max(ttl+ttl/2, time.Until(leases[0].Deadline())+ttl/2))
		if err := links.Heal(); err != nil {
			w.fail("heal", err)
		}
	}
	for i, lease := range leases {
		switch {
		case !paused && !time.Now().Before(lease.Deadline()):
		case shared:
			w.Read(id, lease.Key, tokens[i])
		default:
			w.write(ctx, id, lease.Key, tokens[i])
		}
	}
	hold := w.cfg.Hold
	if rng.IntN(LongHoldEvery) == 0 {
		hold = max(hold, min(LongHold*hold, ttl/2))
	}
	provision.SleepCtx(ctx, provision.Between(rng, 0, hold))
	var wg sync.WaitGroup
	for i, lease := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rel := check.Op{Client: id, Key: lease.Key, Kind: check.Release, Token: uint64(tokens[i]), Start: w.Now()}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*ttl)
			err := l.Release(rctx, lease)
			cancel()
			rel.End = w.Now()
			if SettleRelease(&rel, err) {
				w.fail("release", err)
			}
			w.Record(rel)
		}()
	}
	wg.Wait()
}

// inspectAny asks who holds key and records what it was shown as a
// check.Read: OK with the holders' tokens (none: free), or Unknown. A
// campaign without the backend's tokens (they are numbered by the
// campaign) has nothing to compare them with and records nothing.
func (w *Workload) inspectAny(ctx context.Context, rng *rand.Rand, id int, l lock.Locker, key string) {
	if !w.Fencing {
		return
	}
	rd, err := w.readHolders(ctx, id, l, key, w.cfg.TTL)
	if err != nil && ctx.Err() == nil {
		w.fail("inspect", err)
		provision.SleepCtx(ctx, provision.Between(rng, 20*time.Millisecond, 100*time.Millisecond))
	}
	w.Record(rd)
}

// JointReport is the joint linearizability search's verdict in a
// campaign's report.
type JointReport struct {
	// Linearizable: every group of keys searched ended Ok. Result is Ok,
	// Illegal, or Unknown (a search ran out of its time, within the
	// campaign's linearizability budget).
	Linearizable bool   `json:"joint_linearizable"`
	Result       string `json:"joint_result"`
	// Ops is how many operations the model saw (an AcquireAll is one),
	// Groups the connected groups of keys searched apart, Keys their
	// keys; NotOkKeys the keys of the groups not Ok.
	Ops       int      `json:"joint_ops"`
	Groups    int      `json:"joint_groups"`
	Keys      int      `json:"joint_keys"`
	NotOkKeys []string `json:"joint_not_ok_keys,omitempty"`
	ElapsedS  float64  `json:"joint_elapsed_s"`
	// Reads counts the Inspect answers in the history (OK), ReadsUnknown
	// those whose outcome is unknown (left out of the search);
	// MultiAcquires the AcquireAll calls, granted or not.
	Reads         int `json:"reads"`
	ReadsUnknown  int `json:"reads_unknown,omitempty"`
	MultiAcquires int `json:"multi_acquires"`
}

// jointCheck copies the joint verdict of the checkers' result into the
// report (nil when the history had nothing that spans keys).
func (rep *ChaosReport) jointCheck() {
	v := rep.result.Joint
	if v == nil {
		rep.Joint = nil
		return
	}
	j := &JointReport{Linearizable: v.Result == "Ok", Result: string(v.Result), Ops: v.Ops, Groups: v.Groups, Keys: v.Keys,
		NotOkKeys: v.NotOkKeys, ElapsedS: v.Elapsed.Seconds()}
	seen := map[uint64]bool{}
	for _, o := range rep.history {
		switch {
		case o.Kind == check.Read && o.OK:
			j.Reads++
		case o.Kind == check.Read && o.Unknown:
			j.ReadsUnknown++
		case o.Kind == check.Acquire && o.Joint != 0 && !seen[o.Joint]:
			seen[o.Joint] = true
			j.MultiAcquires++
		}
	}
	rep.Joint = j
}

// jointFailures is the joint search's verdict when it is not Ok and no
// server fault was expected to break the lock.
func (rep *ChaosReport) jointFailures() []string {
	j := rep.Joint
	if j == nil || j.Linearizable || rep.breaks(true) {
		return nil
	}
	return []string{fmt.Sprintf("joint_linearizable: false (%s; keys not Ok: %v; %d operations over %d keys in %d groups)",
		j.Result, j.NotOkKeys, j.Ops, j.Keys, j.Groups)}
}

func (rep *ChaosReport) multiNote() string {
	return fmt.Sprintf("multi: %d keys; each step an Inspect (%.0f%%), an AcquireAll of 2–3 keys (%.0f%%), one key exclusive (%.0f%%) or shared (%.0f%%), or a permit of %d on %s (%.0f%%); "+
		"the history is also searched jointly (joint_*): every key of a group tied by AcquireAlls at once, an AcquireAll one operation with one linearization point, "+
		"shared holders coexisting, permits bounded, tokens increasing per key, each Inspect legal against the holders at its point, unknown outcomes either way",
		rep.Keys, 100*multiMix[stepRead], 100*multiMix[stepAll], 100*multiMix[stepExclusive], 100*multiMix[stepShared], MultiPermits, MultiSemaphoreKey, 100*multiMix[stepPermit])
}

func (rep *ChaosReport) multiText() string {
	j := rep.Joint
	if j == nil {
		return fmt.Sprintf("multi on %d keys; no AcquireAll recorded: no joint search", rep.Keys)
	}
	return fmt.Sprintf("multi on %d keys: %d AcquireAlls, %d reads (%d unknown); joint search %s over %d operations, %d groups, %.1fs; %d keys with shared holds left out of the per-key search",
		rep.Keys, j.MultiAcquires, j.Reads, j.ReadsUnknown, j.Result, j.Ops, j.Groups, j.ElapsedS, rep.SharedKeys)
}

// inKeyOrder returns leases in the order of keys (the contract's order;
// the history's tokens must not depend on it), or an error when they are
// not one per key.
func inKeyOrder(leases []*lock.Lease, keys []string) ([]*lock.Lease, error) {
	out := make([]*lock.Lease, len(keys))
	for _, lease := range leases {
		i := slices.Index(keys, lease.Key)
		if i < 0 || out[i] != nil || len(leases) != len(keys) {
			return nil, fmt.Errorf("AcquireAll of %q returned %d leases, not one per key", keys, len(leases))
		}
		out[i] = lease
	}
	return out, nil
}
