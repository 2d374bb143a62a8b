// Package linearize checks that a lock history is linearizable with
// respect to a lease-lock model (porcupine), key by key, and runs every
// checker of package check with it (Check). It is apart from check so that
// a program that only records and checks holds (check.Recorder,
// check.CheckHistory) does not link porcupine.
package linearize

import (
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/lockgate/lockgate/check"
	"github.com/lockgate/lockgate/lock"
)

// The linearizability model: one key's lease lock (lockModel).
//
// State: free, or held by (client, token, earliest possible server-side
// expiry), plus the lowest token the next grant may carry (fencing tokens
// strictly increase per key).
//
// Operations and rules:
//
//   - Acquire granted token t (OK): legal if the lock is free, or the
//     holder's lease could have expired by the acquire's return time, i.e.
//     holder's expiry ≤ this acquire's End; and t ≥ the lowest next token
//     (t greater than every token granted before). The new state is held by
//     (client, t, expiry), and, the grants of a key being ordered by their
//     tokens, only right after the key's previous known grant (the highest
//     known token below t; see "Grants in token order" below), where expiry = Start + TTL − slack(TTL): the
//     server's TTL starts after the request was sent, so the lease cannot
//     end before Start + TTL on a server whose clock runs at our rate; slack
//     (Options.ExpirySlack, default the lock contract's drift allowance
//     lock.Drift(ttl, 0)) admits a server clock that runs a little faster.
//     Comparing with the acquire's return time instead of its (unknown)
//     linearization point errs on the side of accepting.
//   - Acquire not granted (OK false, Unknown false: TryAcquire found the lock
//     held, a wait ran out, an error): dropped from the history. The lock
//     contract leaves nothing behind for them (no ghost grants), and a failed
//     request tells nothing certain about the state (it may never have
//     reached the server).
//   - Release by (c, t) confirmed (OK): legal only if the lock is held by
//     (c, t); frees it.
//   - Release by (c, t) answered "not held": legal if the lock is not held by
//     (c, t) (state unchanged), or is held by (c, t) with an expiry ≤ the
//     release's End (the lease expired: the state becomes free).
//   - Unknown ops (timeout, connection lost) may or may not have taken
//     effect, modelled as etcd's robustness tests do: their return time is
//     after the end of the history, so they can be linearized anywhere after
//     their call, and the model allows both outcomes (NondeterministicModel).
//     An unknown acquire either changed nothing or granted the lock to its
//     client with a token nobody knows (greater than every earlier one, so
//     the next grant's token must be at least one higher still); an unknown
//     release either changed nothing or freed the lease it named.
//   - Read (Inspect) answered with the token t of one holder: legal only
//     if the lock is held by the grant with token t (a grant whose acquire
//     is concurrent with the read may be linearized before it); the state
//     is unchanged. Answered free: legal if the lock is free, or its
//     holder's lease could have expired by the read's End (expiry ≤ End,
//     as for a release answered "not held"); the state becomes free. A
//     read of a mutex key that shows several holders is illegal. Reads
//     that failed or whose outcome is unknown carry no information and are
//     dropped.
//   - A read that shows a token no known grant of its key carried (a
//     phantom) can only have seen the grant of an unknown acquire, which
//     the search leaves out (below): such reads are left out of the search
//     too and judged apart (ReadPhantoms: some unknown acquire of the key
//     must have started before the read ended, with no known grant above
//     the token returned before that acquire started, and each unknown
//     acquire explains one token at most). Leaving them out only drops
//     constraints: it can hide a violation, never raise a false one.
//
// Two prunings keep the search small; neither changes the verdict (the
// tests check this against the unpruned history), and both are what etcd's
// robustness tests do when they drop or shorten unknown operations whose
// effect nobody observed:
//
//   - Unknown acquires are left out. Their effect (a holder nobody knows of,
//     who can only leave by expiry, and one more token spent) can never make
//     a later operation legal that was not legal without it: it only adds
//     constraints. So a history is linearizable with them iff without them.
//     A read that saw such a holder's token would be made legal by it:
//     that is why phantom reads are judged apart, not by the search.
//   - An unknown release of (c, t) returns, instead of at infinity, at the
//     later of its own End and the return of the next known grant of its key
//     (the smallest token above t): once that grant is linearized the
//     release can only be a no-op, since (c, t) never holds the key again,
//     and a no-op can be placed anywhere real time allows. An unknown
//     release that started after that grant returned is a no-op for certain
//     and is left out. Without a later grant it returns after the history.
//
// Grants in token order: every grant's token is at least the lowest next
// token, which each grant raises above its own, so in every legal
// linearization a key's known grants come in increasing token order, and
// right before the grant of token t the last known grant linearized is the
// one of the highest known token below t (Prev, from the history; with two
// grants of one token, the second is illegal either way). The state keeps
// the last known token granted (Last) and a grant is legal only when it is
// its Prev: a rule every legal linearization obeys already, so it changes no
// verdict, but porcupine now rejects a grant out of order at once instead of
// when the skipped grant's return is reached. Without it, n grants waiting
// together through an outage (granted one by one when it heals, none
// returned yet) let porcupine try each of the 2^n increasing-token subsets of
// them before the first return: the campaign's key chaos/2 had 28 acquires
// waiting at once through a kill-all and ran out of 30 s and then of 24 GB.
//
// The state also carries Now, a lower bound of the current linearization
// point: points never go back and each lies within its op's [call, return],
// so an op is linearized no earlier than the latest call linearized before
// it, and a grant over an unexpired holder moves Now to that holder's expiry
// (every later op must be able to return after it). This keeps an unknown
// acquire, whose return is infinite, from "expiring" a live holder for the
// ops that follow it.
//
// Writes are not part of the model (StaleWrites and Overlaps judge them).
// Renewals are not recorded, so a lease's expiry is fixed at its grant. A
// lease that is renewed all the same (the SDK's lease cache keeps its
// unused leases alive) lives longer than the model assumes: the model then
// accepts more than it should (an expiry that did not happen), never less.

type lockInput struct {
	Kind   check.Kind
	Key    string
	Client int
	Token  uint64        // Release: the lease's token
	TTL    time.Duration // Acquire
	Call   int64
	Ret    int64 // math.MaxInt64 for unknown ops
	Expiry int64 // Acquire: earliest server-side expiry of its grant
	// Prev is, for a known grant when Ordered, the highest known token
	// granted for its key below its own (0: none): the grant linearized
	// right before it.
	Prev    uint64
	Ordered bool
	// Read: the token of the holder it was shown (0: free), or SeenMany
	// when it was shown more than one holder.
	Seen     uint64
	SeenMany bool
}

type lockOutput struct {
	OK      bool
	Unknown bool
	Token   uint64 // Acquire OK: the token granted
}

type lockState struct {
	Held       bool
	Client     int
	Token      uint64
	TokenKnown bool // false for a grant by an unknown acquire
	Expiry     int64
	MinNext    uint64 // the lowest token the next grant may carry
	Last       uint64 // the token of the last known grant (0: none)
	// Now is a lower bound of the linearization point of the last op
	// linearized: points never go back, and each lies within its op's
	// [call, return].
	Now int64
}

func (s lockState) holds(c int, t uint64) bool {
	return s.Held && s.Client == c && s.TokenKnown && s.Token == t
}

// at moves the state to the earliest instant at or after Now and the op's
// call, and, when expire is set, after the holder's expiry; ok is false when
// that instant is later than the op's return.
func (s lockState) at(in lockInput, expire bool) (lockState, bool) {
	s.Now = max(s.Now, in.Call)
	if expire && s.Held {
		s.Now = max(s.Now, s.Expiry)
	}
	return s, s.Now <= in.Ret
}

func lockStep(state, input, output interface{}) []interface{} {
	s := state.(lockState)
	in := input.(lockInput)
	out := output.(lockOutput)
	same, ok := s.at(in, false)
	if !ok {
		return nil
	}
	switch in.Kind {
	case check.Acquire:
		// A grant happens once the lock is free or its holder's lease
		// has expired.
		g, ok := s.at(in, true)
		granted := lockState{Held: true, Client: in.Client, Expiry: in.Expiry, Now: g.Now, Last: s.Last}
		switch {
		case out.Unknown:
			// Either nothing happened, or a grant with a token nobody
			// knows (its return is infinite, so ok is always true).
			granted.MinNext = s.MinNext + 1
			return []interface{}{same, granted}
		case out.OK:
			if !ok || out.Token < s.MinNext || in.Ordered && s.Last != in.Prev {
				return nil
			}
			granted.Token, granted.TokenKnown, granted.MinNext = out.Token, true, out.Token+1
			granted.Last = out.Token
			return []interface{}{granted}
		default:
			return []interface{}{same}
		}
	case check.Release:
		free := lockState{MinNext: s.MinNext, Last: s.Last, Now: same.Now}
		switch {
		case out.Unknown:
			if s.holds(in.Client, in.Token) {
				return []interface{}{same, free}
			}
			return []interface{}{same}
		case out.OK:
			if s.holds(in.Client, in.Token) {
				return []interface{}{free}
			}
			return nil
		default:
			if !s.holds(in.Client, in.Token) {
				return []interface{}{same}
			}
			// Not held although it was ours: legal once it expired.
			e, ok := s.at(in, true)
			if !ok {
				return nil
			}
			return []interface{}{lockState{MinNext: s.MinNext, Last: s.Last, Now: e.Now}}
		}
	case check.Read:
		switch {
		case in.SeenMany:
			return nil // a mutex has one holder at most
		case in.Seen != 0:
			if s.Held && s.TokenKnown && s.Token == in.Seen {
				return []interface{}{same}
			}
			return nil
		case !s.Held:
			return []interface{}{same}
		}
		// Free although held: legal once the holder's lease expired.
		e, ok := s.at(in, true)
		if !ok {
			return nil
		}
		return []interface{}{lockState{MinNext: s.MinNext, Last: s.Last, Now: e.Now}}
	}
	return []interface{}{same}
}

func describeTime(ns int64) string {
	if ns == math.MaxInt64 {
		return "∞"
	}
	return time.Duration(ns).String()
}

func describeOp(input, output interface{}) string {
	in := input.(lockInput)
	out := output.(lockOutput)
	var res string
	switch {
	case out.Unknown:
		res = "unknown"
	case in.Kind == check.Acquire && out.OK:
		res = fmt.Sprintf("token %d", out.Token)
	case in.Kind == check.Acquire:
		res = "not granted"
	case out.OK:
		res = "ok"
	default:
		res = "not held"
	}
	switch in.Kind {
	case check.Acquire:
		return fmt.Sprintf("acquire(c%d, ttl %v) → %s", in.Client, in.TTL, res)
	case check.Release:
		return fmt.Sprintf("release(c%d, token %d) → %s", in.Client, in.Token, res)
	case check.Read:
		switch {
		case in.SeenMany:
			return fmt.Sprintf("read(c%d) → several holders", in.Client)
		case in.Seen == 0:
			return fmt.Sprintf("read(c%d) → free", in.Client)
		}
		return fmt.Sprintf("read(c%d) → token %d", in.Client, in.Seen)
	}
	return fmt.Sprintf("%v → %s", in.Kind, res)
}

func describeState(state interface{}) string {
	s := state.(lockState)
	if !s.Held {
		return fmt.Sprintf("free (next token ≥ %d, t ≥ %s)", s.MinNext, describeTime(s.Now))
	}
	tok := "?"
	if s.TokenKnown {
		tok = fmt.Sprint(s.Token)
	}
	return fmt.Sprintf("held by c%d token %s until ≥ %s (next token ≥ %d, t ≥ %s)", s.Client, tok, describeTime(s.Expiry), s.MinNext, describeTime(s.Now))
}

func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := make(map[string][]porcupine.Operation)
	for _, op := range history {
		k := op.Input.(lockInput).Key
		byKey[k] = append(byKey[k], op)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

func hashState(state interface{}) uint64 {
	s := state.(lockState)
	h := uint64(14695981039346656037)
	mix := func(v uint64) {
		h ^= v
		h *= 1099511628211
		h ^= h >> 29
	}
	if s.Held {
		mix(1)
	}
	if s.TokenKnown {
		mix(2)
	}
	mix(uint64(s.Client))
	mix(s.Token)
	mix(uint64(s.Expiry))
	mix(s.MinNext)
	mix(s.Last)
	mix(uint64(s.Now))
	return h
}

// lockModel is the model Linearizable checks against (see the comment at the
// top of this file).
var lockModel = (&porcupine.NondeterministicModel{
	Partition:         partitionByKey,
	Init:              func() []interface{} { return []interface{}{lockState{}} },
	Step:              lockStep,
	Hash:              hashState,
	DescribeOperation: describeOp,
	DescribeState:     describeState,
}).ToModel()

// Operations converts the acquires, releases and reads of h into porcupine
// operations for lockModel: writes, not-granted acquires, unknown
// acquires, failed or unknown reads and phantom reads are left out, unknown releases return at the next grant of their
// key (see the model's description). slack nil means lock.Drift(ttl, 0).
func Operations(h check.History, slack func(ttl time.Duration) time.Duration) []porcupine.Operation {
	return operations(h, slack, false)
}

// operations is Operations; keepUnknown keeps every unknown op, returning
// after the end of the history, and leaves grants unordered (no pruning).
func operations(h check.History, slack func(ttl time.Duration) time.Duration, keepUnknown bool) []porcupine.Operation {
	if slack == nil {
		slack = func(ttl time.Duration) time.Duration { return lock.Drift(ttl, 0) }
	}
	_, end := h.Span()
	infinity := int64(end) + 1
	// The known grants of each key, by token: each grant's Prev, and where
	// unknown releases return.
	type grant struct {
		token uint64
		ret   int64
	}
	grants := make(map[string][]grant)
	for _, o := range h {
		if o.Kind == check.Acquire && o.OK && !o.Unknown {
			grants[o.Key] = append(grants[o.Key], grant{o.Token, int64(o.End)})
		}
	}
	for _, gs := range grants {
		sort.Slice(gs, func(i, j int) bool { return gs[i].token < gs[j].token })
	}
	known := knownTokens(h)
	var ops []porcupine.Operation
	for _, o := range h {
		if o.Kind == check.Read {
			if op, ok := readOperation(o, known); ok {
				ops = append(ops, op)
			}
			continue
		}
		if o.Kind != check.Acquire && o.Kind != check.Release {
			continue
		}
		if o.Kind == check.Acquire && !o.OK && (!o.Unknown || !keepUnknown) {
			continue
		}
		in := lockInput{Kind: o.Kind, Key: o.Key, Client: o.Client, Call: int64(o.Start), Ret: int64(o.End)}
		ret := int64(o.End)
		if o.Unknown {
			in.Ret, ret = math.MaxInt64, infinity
			if o.Kind == check.Release && !keepUnknown {
				gs := grants[o.Key]
				i := sort.Search(len(gs), func(i int) bool { return gs[i].token > o.Token })
				if i < len(gs) {
					if int64(o.Start) > gs[i].ret {
						continue // after the next grant: a no-op
					}
					in.Ret = max(int64(o.End), gs[i].ret)
					ret = in.Ret
				}
			}
		}
		out := lockOutput{OK: o.OK && !o.Unknown, Unknown: o.Unknown}
		switch o.Kind {
		case check.Acquire:
			ttl := o.TTL
			if ttl <= 0 {
				ttl = lock.DefaultTTL
			}
			in.TTL = ttl
			in.Expiry = int64(o.Start + ttl - slack(ttl))
			if out.OK {
				out.Token = o.Token
				gs := grants[o.Key]
				in.Ordered = !keepUnknown
				if i := sort.Search(len(gs), func(i int) bool { return gs[i].token >= o.Token }); i > 0 {
					in.Prev = gs[i-1].token
				}
				// A lock on a session (zklike's session mode,
				// concurrency.Mutex, ZooKeeper) counts its TTL from the
				// session's last keep-alive, which can precede the
				// acquire: its grant's own deadline, when earlier, bounds
				// its expiry instead (the contract promises no expiry
				// before the deadline).
				if o.Session && o.Deadline > 0 && int64(o.Deadline) < in.Expiry {
					in.Expiry = int64(o.Deadline)
				}
			}
		case check.Release:
			in.Token = o.Token
		}
		ops = append(ops, porcupine.Operation{
			ClientId: o.Client,
			Input:    in,
			Call:     int64(o.Start),
			Output:   out,
			Return:   ret,
		})
	}
	return ops
}

// Linearizable checks the acquire/release history of h against the
// lease-lock model with porcupine, partitioned by key, with the default
// expiry slack. timeout ≤ 0 means no bound; a search that times out returns
// false (use LinearizabilityCheck to tell a timeout from a violation). The
// LinearizationInfo is filled whenever h has lock operations, also when the
// history is linearizable, for Visualize.
func Linearizable(h check.History, timeout time.Duration) (bool, porcupine.LinearizationInfo) {
	if timeout <= 0 {
		timeout = -1
	}
	res, info := LinearizabilityCheck(h, check.Options{LinearizabilityTimeout: timeout})
	return res == porcupine.Ok, info
}

// LinearizabilityCheck is Linearizable with options (LinearizabilityTimeout,
// ExpirySlack) and porcupine's three-way verdict: Ok, Illegal, or Unknown
// (timed out). It searches every key at once under one time bound and
// keeps what Visualize needs: for a campaign's history use
// LinearizabilityByKey, which bounds each key's search on its own.
func LinearizabilityCheck(h check.History, opts check.Options) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	opts = opts.WithDefaults()
	return porcupine.CheckOperationsVerbose(lockModel, Operations(h, opts.ExpirySlack), opts.LinearizabilityTimeout)
}

// Visualize writes porcupine's HTML visualisation of the lock history: for
// each key, the operations and the longest linearizations found. info is
// what Linearizable or LinearizabilityCheck returned for h; when it is the
// zero value the check is run again (without a time bound) to get it.
func Visualize(h check.History, info porcupine.LinearizationInfo, w io.Writer) error {
	if info.PartialLinearizations() == nil {
		_, info = porcupine.CheckOperationsVerbose(lockModel, Operations(h, nil), 0)
	}
	return porcupine.Visualize(lockModel, info, w)
}

// VisualizeKeys is Visualize for the given keys of h only (nil: every key),
// with the search bounded by timeout (≤ 0: no bound): what is worth
// looking at in a long history is the keys that were not Ok.
func VisualizeKeys(h check.History, keys []string, timeout time.Duration, w io.Writer) error {
	if keys != nil {
		want := make(map[string]bool, len(keys))
		for _, k := range keys {
			want[k] = true
		}
		var sub check.History
		for _, o := range h {
			if want[o.Key] {
				sub = append(sub, o)
			}
		}
		h = sub
	}
	_, info := porcupine.CheckOperationsVerbose(lockModel, Operations(h, nil), max(timeout, 0))
	return porcupine.Visualize(lockModel, info, w)
}
