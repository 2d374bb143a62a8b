package linearize

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/lockgate/lockgate/check"
)

// The joint model: every key of a small key space at once, so that an
// operation spanning keys (AcquireAll) is one operation with one
// linearization point. Checking such a history key by key is unsound: a
// partition per key is valid only when no operation spans partitions
// (porcupine#26), and an AcquireAll granted atomically on one key and not
// on another passes every per-key search. The joint search partitions by
// connected group of keys instead: two keys are in one group when an
// AcquireAll named both.
//
// State: for every key its holders, each (client, token, exclusive or
// shared with the semaphore's permits, earliest expiry), and the lowest
// token its next grant may carry; plus Now, a lower bound of the current
// linearization point, as in the per-key model (see the top of
// linearizability.go, whose conventions this model shares).
//
// Operations and rules:
//
//   - Acquire of keys K (one op, or the ops of one AcquireAll: same
//     check.Op.Joint) granted tokens T (OK): legal at one point p within
//     [call, return] at which, on every key of K, the holders that must go
//     could have expired (their expiry ≤ p): for an exclusive grant every
//     holder; for a shared one every exclusive holder and every holder of
//     another semaphore size, and, for a semaphore of N permits, as many
//     of the others as leave N − 1 (every choice of which is tried); and
//     each T[k] at least the key's lowest next token. Every key of K is then
//     held by the new holder, with expiry Start + TTL − slack.
//   - Acquire not granted: left out (the contract leaves nothing behind).
//   - Release of (c, t) on a key: OK only if (c, t) holds it, and frees
//     it; "not held" if (c, t) does not hold it, or its expiry ≤ the
//     release's return (it expired: freed).
//   - Read (Inspect) of a key shown holders H: legal at a point p at which
//     every token of H is a holder of the key, and every holder not in H
//     could have expired (expiry ≤ p). A read changes no holder: a holder
//     left out of a read may still be released or shown later (a server
//     may filter an expired lease before it reaps it). Reads whose outcome
//     is unknown, or that failed, are left out: they change nothing.
//   - Unknown acquires and releases may or may not have taken effect
//     (NondeterministicModel), their return after the history's end. An
//     unknown acquire that took effect holds its keys with tokens nobody
//     knows (each at least the key's lowest next token), which a later read
//     may reveal. An unknown acquire is left out unless a read of one of
//     its keys showed a token that no known grant of the key carried: without
//     such a read it can only add constraints (as the per-key model argues).
//     An unknown release of (c, t) returns, rather than at infinity, at the
//     next known exclusive grant of its key above t (after which (c, t)
//     holds nothing: the release is a no-op), as in the per-key model; a
//     shared grant does not bound it, since shared holders coexist.
//
// Writes are not part of the model (StaleWrites and Overlaps judge them).

type jointHolder struct {
	Client     int
	Token      uint64
	TokenKnown bool
	MinTok     uint64 // unknown token: the lowest it may be
	Shared     bool
	Permits    int
	Expiry     int64
}

type jointKey struct {
	Holders []jointHolder // sorted (holderLess)
	MinNext uint64
}

type jointState struct {
	Keys []jointKey // by key index; missing: free, MinNext 0
	Now  int64
}

type jointInput struct {
	Kind    check.Kind
	Client  int
	Keys    []int    // Acquire: its keys; Release and Read: one
	Names   []string // the keys' names, for descriptions
	Token   uint64   // Release: the lease's token
	Shared  bool
	Permits int
	TTL     time.Duration
	Call    int64
	Ret     int64 // math.MaxInt64 for unknown ops
	Expiry  int64 // Acquire: earliest expiry of its grants
}

type jointOutput struct {
	OK, Unknown bool
	Tokens      []uint64 // Acquire OK: one per key of Keys
	Holders     []uint64 // Read: the tokens shown
}

func holderLess(a, b jointHolder) int {
	switch {
	case a.TokenKnown != b.TokenKnown:
		if a.TokenKnown {
			return 1
		}
		return -1
	case a.Token != b.Token:
		if a.Token < b.Token {
			return -1
		}
		return 1
	case a.Client != b.Client:
		return a.Client - b.Client
	case a.MinTok != b.MinTok:
		if a.MinTok < b.MinTok {
			return -1
		}
		return 1
	}
	if a.Expiry < b.Expiry {
		return -1
	} else if a.Expiry > b.Expiry {
		return 1
	}
	return 0
}

func (s jointState) key(i int) jointKey {
	if i < len(s.Keys) {
		return s.Keys[i]
	}
	return jointKey{}
}

// set returns a copy of s with key i replaced by k (s is never modified).
func (s jointState) set(i int, k jointKey) jointState {
	keys := make([]jointKey, max(len(s.Keys), i+1))
	copy(keys, s.Keys)
	slices.SortFunc(k.Holders, holderLess)
	keys[i] = k
	s.Keys = keys
	return s
}

func without(hs []jointHolder, i int) []jointHolder {
	out := make([]jointHolder, 0, len(hs)-1)
	out = append(out, hs[:i]...)
	return append(out, hs[i+1:]...)
}

// keyOption is one way a grant can take a key: the holders it leaves and
// the earliest point it can happen.
type keyOption struct {
	keep []jointHolder
	at   int64
}

// grantOptions lists the ways in can take key k from holders hs at or
// after now.
func grantOptions(hs []jointHolder, in jointInput, now int64) []keyOption {
	at := now
	var stay []jointHolder
	for _, h := range hs {
		if in.Shared && h.Shared && h.Permits == in.Permits {
			stay = append(stay, h)
		} else {
			at = max(at, h.Expiry)
		}
	}
	need := len(stay) + 1 - in.Permits
	if !in.Shared || in.Permits == 0 || need <= 0 {
		return []keyOption{{stay, at}}
	}
	if len(stay) > 12 { // too many to try every choice: the earliest expiries go
		slices.SortFunc(stay, func(a, b jointHolder) int { return int(min(max(a.Expiry-b.Expiry, -1), 1)) })
		for _, h := range stay[:need] {
			at = max(at, h.Expiry)
		}
		return []keyOption{{slices.Clone(stay[need:]), at}}
	}
	var opts []keyOption
	for mask := 0; mask < 1<<len(stay); mask++ {
		if popcount(mask) != need {
			continue
		}
		o := keyOption{at: at}
		for j, h := range stay {
			if mask&(1<<j) != 0 {
				o.at = max(o.at, h.Expiry)
			} else {
				o.keep = append(o.keep, h)
			}
		}
		opts = append(opts, o)
	}
	return opts
}

func popcount(m int) int {
	n := 0
	for ; m != 0; m &= m - 1 {
		n++
	}
	return n
}

// grants returns the states in can leave when granted (tokens: the known
// tokens, nil for an unknown acquire).
func (s jointState) grants(in jointInput, tokens []uint64, now int64) []interface{} {
	states := []jointState{{Keys: s.Keys, Now: now}}
	for i, ki := range in.Keys {
		var next []jointState
		for _, st := range states {
			k := st.key(ki)
			h := jointHolder{Client: in.Client, Shared: in.Shared, Permits: in.Permits, Expiry: in.Expiry}
			minNext := k.MinNext
			if tokens != nil {
				if tokens[i] < k.MinNext {
					continue
				}
				h.Token, h.TokenKnown, minNext = tokens[i], true, tokens[i]+1
			} else {
				h.MinTok, minNext = k.MinNext, k.MinNext+1
			}
			for _, o := range grantOptions(k.Holders, in, st.Now) {
				if o.at > in.Ret {
					continue
				}
				n := st.set(ki, jointKey{Holders: append(o.keep, h), MinNext: minNext})
				n.Now = o.at
				next = append(next, n)
			}
		}
		states = next
	}
	out := make([]interface{}, len(states))
	for i, st := range states {
		out[i] = st
	}
	return out
}

func jointStep(state, input, output interface{}) []interface{} {
	s := state.(jointState)
	in := input.(jointInput)
	out := output.(jointOutput)
	now := max(s.Now, in.Call)
	if now > in.Ret {
		return nil
	}
	same := s
	same.Now = now
	switch in.Kind {
	case check.Acquire:
		switch {
		case out.Unknown:
			return append([]interface{}{same}, s.grants(in, nil, now)...)
		case out.OK:
			return s.grants(in, out.Tokens, now)
		}
	case check.Release:
		ki := in.Keys[0]
		k := s.key(ki)
		i := slices.IndexFunc(k.Holders, func(h jointHolder) bool {
			return h.TokenKnown && h.Token == in.Token && h.Client == in.Client
		})
		if i < 0 {
			if out.OK {
				return nil
			}
			return []interface{}{same}
		}
		freed := same.set(ki, jointKey{Holders: without(k.Holders, i), MinNext: k.MinNext})
		switch {
		case out.Unknown:
			return []interface{}{same, freed}
		case out.OK:
			return []interface{}{freed}
		}
		// Not held although it was ours: legal once it expired.
		freed.Now = max(now, k.Holders[i].Expiry)
		if freed.Now > in.Ret {
			return nil
		}
		return []interface{}{freed}
	case check.Read:
		return s.read(in, out, now)
	}
	return []interface{}{same}
}

// read returns the states in which a read of in.Keys[0] showing out.Holders
// is legal at or after now.
func (s jointState) read(in jointInput, out jointOutput, now int64) []interface{} {
	ki := in.Keys[0]
	k := s.key(ki)
	// Each shown token is a known holder, or reveals an unknown one;
	// every holder not shown could have expired.
	type choice struct {
		shown []bool
		hs    []jointHolder
	}
	cs := []choice{{shown: make([]bool, len(k.Holders)), hs: slices.Clone(k.Holders)}}
	for _, t := range out.Holders {
		var next []choice
		for _, c := range cs {
			if i := slices.IndexFunc(c.hs, func(h jointHolder) bool { return h.TokenKnown && h.Token == t }); i >= 0 {
				if !c.shown[i] {
					c.shown[i] = true
					next = append(next, c)
				}
				continue
			}
			for i, h := range c.hs {
				if h.TokenKnown || c.shown[i] || t < h.MinTok {
					continue
				}
				n := choice{shown: slices.Clone(c.shown), hs: slices.Clone(c.hs)}
				n.shown[i] = true
				n.hs[i].Token, n.hs[i].TokenKnown = t, true
				next = append(next, n)
			}
		}
		cs = next
	}
	var res []interface{}
	for _, c := range cs {
		at := now
		minNext := k.MinNext
		for i, h := range c.hs {
			if !c.shown[i] {
				at = max(at, h.Expiry)
			} else if h.Token >= minNext {
				minNext = h.Token + 1
			}
		}
		if at > in.Ret {
			continue
		}
		n := s
		if !slices.Equal(c.hs, k.Holders) {
			n = s.set(ki, jointKey{Holders: c.hs, MinNext: minNext})
		}
		n.Now = at
		res = append(res, n)
	}
	return res
}

func jointEqual(a, b interface{}) bool {
	x, y := a.(jointState), b.(jointState)
	if x.Now != y.Now {
		return false
	}
	for i := range max(len(x.Keys), len(y.Keys)) {
		p, q := x.key(i), y.key(i)
		if p.MinNext != q.MinNext || !slices.Equal(p.Holders, q.Holders) {
			return false
		}
	}
	return true
}

func jointHash(state interface{}) uint64 {
	s := state.(jointState)
	h := uint64(14695981039346656037)
	mix := func(v uint64) {
		h ^= v
		h *= 1099511628211
		h ^= h >> 29
	}
	mix(uint64(s.Now))
	for i, k := range s.Keys {
		if k.MinNext == 0 && len(k.Holders) == 0 {
			continue // as if missing: Equal treats both alike
		}
		mix(uint64(i) + 1)
		mix(k.MinNext)
		for _, x := range k.Holders {
			mix(uint64(x.Client))
			mix(x.Token)
			mix(x.MinTok)
			mix(uint64(x.Expiry))
			mix(uint64(x.Permits))
			if x.TokenKnown {
				mix(1)
			}
			if x.Shared {
				mix(2)
			}
		}
	}
	return h
}

func describeJointOp(input, output interface{}) string {
	in := input.(jointInput)
	out := output.(jointOutput)
	keys := strings.Join(in.Names, ",")
	res := "ok"
	switch {
	case out.Unknown:
		res = "unknown"
	case in.Kind == check.Acquire && out.OK:
		res = fmt.Sprintf("tokens %v", out.Tokens)
	case in.Kind == check.Read:
		res = fmt.Sprintf("holders %v", out.Holders)
	case !out.OK:
		res = "not held"
	}
	switch in.Kind {
	case check.Acquire:
		mode := "exclusive"
		if in.Shared {
			mode = fmt.Sprintf("shared/%d", in.Permits)
		}
		return fmt.Sprintf("acquire(c%d, %s, %s, ttl %v) → %s", in.Client, keys, mode, in.TTL, res)
	case check.Release:
		return fmt.Sprintf("release(c%d, %s, token %d) → %s", in.Client, keys, in.Token, res)
	}
	return fmt.Sprintf("read(c%d, %s) → %s", in.Client, keys, res)
}

func describeJointState(state interface{}) string {
	s := state.(jointState)
	var parts []string
	for i, k := range s.Keys {
		var hs []string
		for _, h := range k.Holders {
			tok := "?"
			if h.TokenKnown {
				tok = fmt.Sprint(h.Token)
			}
			hs = append(hs, fmt.Sprintf("c%d:%s until ≥ %s", h.Client, tok, describeTime(h.Expiry)))
		}
		parts = append(parts, fmt.Sprintf("#%d [%s] next ≥ %d", i, strings.Join(hs, " "), k.MinNext))
	}
	return fmt.Sprintf("%s; t ≥ %s", strings.Join(parts, "; "), describeTime(s.Now))
}

// jointPartition splits the operations by connected group of keys.
func jointPartition(history []porcupine.Operation) [][]porcupine.Operation {
	parent := map[int]int{}
	var find func(int) int
	find = func(x int) int {
		p, ok := parent[x]
		if !ok || p == x {
			parent[x] = x
			return x
		}
		r := find(p)
		parent[x] = r
		return r
	}
	for _, op := range history {
		ks := op.Input.(jointInput).Keys
		for _, k := range ks[1:] {
			parent[find(k)] = find(ks[0])
		}
		find(ks[0])
	}
	groups := map[int][]porcupine.Operation{}
	for _, op := range history {
		r := find(op.Input.(jointInput).Keys[0])
		groups[r] = append(groups[r], op)
	}
	roots := make([]int, 0, len(groups))
	for r := range groups {
		roots = append(roots, r)
	}
	sort.Ints(roots)
	out := make([][]porcupine.Operation, 0, len(roots))
	for _, r := range roots {
		out = append(out, groups[r])
	}
	return out
}

// jointModel is the model JointLinearizability checks against (see the
// comment at the top of this file).
var jointModel = (&porcupine.NondeterministicModel{
	Partition:         jointPartition,
	Init:              func() []interface{} { return []interface{}{jointState{}} },
	Step:              jointStep,
	Equal:             jointEqual,
	Hash:              jointHash,
	DescribeOperation: describeJointOp,
	DescribeState:     describeJointState,
}).ToModel()
