package linearize

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/lockgate/lockgate/check"
	"github.com/lockgate/lockgate/lock"
)

// The joint model's operations, from a history, and its search (the model
// is in joint.go).

// HasJoint reports whether h has an operation that spans keys (an
// AcquireAll: check.Op.Joint set on an acquire), which the per-key search
// cannot judge.
func HasJoint(h check.History) bool {
	return slices.ContainsFunc(h, func(o check.Op) bool { return o.Kind == check.Acquire && o.Joint != 0 })
}

// JointOperations converts the acquires, releases and reads of h into
// porcupine operations for the joint model: an AcquireAll's ops (same
// Joint) become one, unknown and failed reads and failed acquires are left
// out, and unknown acquires and releases are pruned as the model's
// description says. slack nil means lock.Drift(ttl, 0).
func JointOperations(h check.History, slack func(ttl time.Duration) time.Duration) []porcupine.Operation {
	if slack == nil {
		slack = func(ttl time.Duration) time.Duration { return lock.Drift(ttl, 0) }
	}
	_, end := h.Span()
	infinity := int64(end) + 1
	index := map[string]int{}
	var names []string
	idx := func(k string) int {
		i, ok := index[k]
		if !ok {
			i = len(names)
			index[k] = i
			names = append(names, k)
		}
		return i
	}
	// What the known grants of each key tell: their tokens, and their
	// exclusive grants by token (for unknown releases).
	type grant struct {
		token uint64
		ret   int64
	}
	known := map[string]map[uint64]bool{}
	excl := map[string][]grant{}
	for _, o := range h {
		if o.Kind == check.Acquire && o.OK {
			if known[o.Key] == nil {
				known[o.Key] = map[uint64]bool{}
			}
			known[o.Key][o.Token] = true
			if !o.Shared {
				excl[o.Key] = append(excl[o.Key], grant{o.Token, int64(o.End)})
			}
		}
	}
	for _, gs := range excl {
		sort.Slice(gs, func(i, j int) bool { return gs[i].token < gs[j].token })
	}
	// A read that showed a token no known grant carried: the grant of an
	// acquire of unknown outcome, which the search then keeps to be
	// revealed, if one of the key had started before the read ended; else
	// the grant of an attempt whose answer was lost (a re-sent acquire, an
	// acquire that gave up), which ReadPhantoms judges, and the read is
	// left out of the search (its holder is no operation of the model).
	firstUnknown := map[string]time.Duration{}
	for _, o := range h {
		if o.Kind == check.Acquire && o.Unknown {
			if f, ok := firstUnknown[o.Key]; !ok || o.Start < f {
				firstUnknown[o.Key] = o.Start
			}
		}
	}
	revealed := map[string]bool{} // a kept read showed a token no known grant carried
	phantomRead := func(o check.Op) (phantom, kept bool) {
		for _, t := range o.Holders {
			if !known[o.Key][t] {
				f, ok := firstUnknown[o.Key]
				return true, ok && f < o.End
			}
		}
		return false, true
	}
	for _, o := range h {
		if o.Kind == check.Read && o.OK {
			if phantom, kept := phantomRead(o); phantom && kept {
				revealed[o.Key] = true
			}
		}
	}
	// An AcquireAll's ops, gathered.
	type multi struct {
		first int
		ops   []check.Op
	}
	joint := map[uint64]*multi{}
	var order []uint64
	for i, o := range h {
		if o.Kind == check.Acquire && o.Joint != 0 {
			m := joint[o.Joint]
			if m == nil {
				m = &multi{first: i}
				joint[o.Joint] = m
				order = append(order, o.Joint)
			}
			m.ops = append(m.ops, o)
		}
	}
	var ops []porcupine.Operation
	add := func(in jointInput, out jointOutput, o check.Op) {
		ret := int64(o.End)
		if in.Ret == math.MaxInt64 {
			ret = infinity
		} else if in.Ret > ret {
			ret = in.Ret
		}
		for _, k := range in.Keys {
			in.Names = append(in.Names, names[k])
		}
		ops = append(ops, porcupine.Operation{ClientId: o.Client, Input: in, Call: int64(o.Start), Output: out, Return: ret})
	}
	acquire := func(group []check.Op) {
		o := group[0]
		if !o.OK && !o.Unknown {
			return
		}
		if o.Unknown && !slices.ContainsFunc(group, func(g check.Op) bool { return revealed[g.Key] }) {
			return
		}
		ttl := o.TTL
		if ttl <= 0 {
			ttl = lock.DefaultTTL
		}
		in := jointInput{Kind: check.Acquire, Client: o.Client, Shared: o.Shared, Permits: o.Permits, TTL: ttl,
			Call: int64(o.Start), Ret: int64(o.End), Expiry: int64(o.Start + ttl - slack(ttl))}
		out := jointOutput{OK: o.OK && !o.Unknown, Unknown: o.Unknown}
		if o.Unknown {
			in.Ret = math.MaxInt64
		}
		for _, g := range group {
			in.Keys = append(in.Keys, idx(g.Key))
			if out.OK {
				out.Tokens = append(out.Tokens, g.Token)
				if g.Session && g.Deadline > 0 && int64(g.Deadline) < in.Expiry {
					in.Expiry = int64(g.Deadline)
				}
			}
		}
		add(in, out, o)
	}
	for i, o := range h {
		switch o.Kind {
		case check.Acquire:
			if o.Joint == 0 {
				acquire([]check.Op{o})
			} else if m := joint[o.Joint]; m.first == i {
				acquire(m.ops)
			}
		case check.Release:
			in := jointInput{Kind: check.Release, Client: o.Client, Keys: []int{idx(o.Key)}, Token: o.Token,
				Call: int64(o.Start), Ret: int64(o.End)}
			if o.Unknown {
				in.Ret = math.MaxInt64
				gs := excl[o.Key]
				j := sort.Search(len(gs), func(j int) bool { return gs[j].token > o.Token })
				if j < len(gs) {
					if int64(o.Start) > gs[j].ret {
						continue // after the next exclusive grant: a no-op
					}
					in.Ret = max(int64(o.End), gs[j].ret)
				}
			}
			add(in, jointOutput{OK: o.OK && !o.Unknown, Unknown: o.Unknown}, o)
		case check.Read:
			if !o.OK || o.Unknown {
				continue
			}
			if _, kept := phantomRead(o); !kept {
				continue
			}
			in := jointInput{Kind: check.Read, Client: o.Client, Keys: []int{idx(o.Key)}, Call: int64(o.Start), Ret: int64(o.End)}
			add(in, jointOutput{OK: true, Holders: o.Holders}, o)
		}
	}
	return ops
}

// JointVerdict is the joint search's verdict on a history.
type JointVerdict struct {
	// Result is Ok, Illegal, or Unknown (a group's search ran out of
	// time); empty when the history had nothing to search.
	Result porcupine.CheckResult
	// Ops is how many operations the model saw, Groups in how many
	// connected groups of keys, Keys over how many keys.
	Ops, Groups, Keys int
	// NotOkKeys names the keys of the groups that were not Ok.
	NotOkKeys []string
	Elapsed   time.Duration
}

// JointLinearizability checks h against the joint model, one connected
// group of keys at a time, each bounded by Options.LinearizabilityKeyTimeout
// and all by Options.LinearizabilityTimeout: a group that runs out is
// Unknown.
func JointLinearizability(h check.History, opts check.Options) JointVerdict {
	opts = opts.WithDefaults()
	start := time.Now()
	ops := JointOperations(h, opts.ExpirySlack)
	parts := jointPartition(ops)
	v := JointVerdict{Ops: len(ops), Groups: len(parts)}
	if len(ops) == 0 {
		return v
	}
	var deadline time.Time
	if opts.LinearizabilityTimeout > 0 {
		deadline = start.Add(opts.LinearizabilityTimeout)
	}
	v.Result = porcupine.Ok
	keys := map[string]bool{}
	for _, part := range parts {
		budget := opts.LinearizabilityKeyTimeout
		res := porcupine.Unknown
		left := time.Until(deadline)
		if deadline.IsZero() || left > 0 {
			if !deadline.IsZero() && (budget <= 0 || left < budget) {
				budget = left
			}
			res = porcupine.CheckOperationsTimeout(jointModel, part, max(budget, 0))
		}
		var names []string
		for _, op := range part {
			for _, n := range op.Input.(jointInput).Names {
				if !keys[n] {
					keys[n] = true
					names = append(names, n)
				}
			}
		}
		v.Keys += len(names)
		if res != porcupine.Ok {
			sort.Strings(names)
			v.NotOkKeys = append(v.NotOkKeys, names...)
			if res == porcupine.Illegal || v.Result == porcupine.Ok {
				v.Result = res
			}
		}
	}
	v.Elapsed = time.Since(start)
	return v
}

// JointCheck is JointLinearizability in one search with what Visualize
// needs (VisualizeJoint), bounded by timeout (≤ 0: none).
func JointCheck(h check.History, opts check.Options, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	opts = opts.WithDefaults()
	return porcupine.CheckOperationsVerbose(jointModel, JointOperations(h, opts.ExpirySlack), max(timeout, 0))
}
