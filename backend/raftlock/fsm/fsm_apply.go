package fsm

// Apply and the ops it applies: grants, renewals, releases, expiries.

import (
	"fmt"
	"math"
	"slices"

	"github.com/hashicorp/raft"
)

// Apply applies a committed raft log entry. For a raft.LogCommand entry whose
// Data Decode accepts, it applies the ops in order, atomically, and returns
// *ApplyResult with one Result per op. For undecodable Data it returns an
// error (wrapping ErrMalformed) and changes nothing, not even AppliedIndex.
// Other log types return nil and change nothing. Apply never reads the local
// clock.
func (f *FSM) Apply(l *raft.Log) interface{} {
	if l == nil || l.Type != raft.LogCommand {
		return nil
	}
	if err := f.readableEntry(l); err != nil {
		return err
	}
	e, err := Decode(l.Data)
	if err != nil {
		return fmt.Errorf("fsm: log index %d: %w", l.Index, err)
	}
	res := &ApplyResult{Index: l.Index, Results: make([]Result, len(e.Ops))}

	f.mu.Lock()
	if f.halted != nil { // halted between the check and here: by a gate
		f.mu.Unlock()
		return f.halted
	}
	obs := f.observer
	var changes []change
	var evp *[]change
	if obs != nil {
		evp = &changes
	}
	f.now = max(f.now, e.Now)
	for i := 0; i < len(e.Ops); i++ {
		if e.Ops[i].Type == OpAcquireAll {
			k := int(e.Ops[i].Token)
			if k < 1 || k > MaxGroup || k > len(e.Ops)-i-1 {
				res.Results[i] = Result{Status: StatusInvalid} // Decode rejects this; hand-built entries only
				continue
			}
			f.applyGroup(e.Ops[i+1:i+1+k], res.Results[i:i+1+k], evp)
			i += k
			continue
		}
		if e.Ops[i].Type.isSession() {
			res.Results[i] = f.applySession(&e.Ops[i], evp)
			continue
		}
		res.Results[i] = f.applyOp(&e.Ops[i], evp)
	}
	f.index = l.Index
	if len(f.delays) > 0 && l.Index%1024 == 0 {
		for k, until := range f.delays {
			if until <= f.now {
				delete(f.delays, k) // stale: memory only, snapshots skip them anyway
			}
		}
	}
	f.mu.Unlock()

	for _, c := range changes {
		if c.rec == nil {
			obs(l.Index, Event{Kind: c.kind, Session: c.sess})
			continue
		}
		ev := Event{Kind: c.kind, Key: c.key, Lock: c.rec.lock(c.key), DelayUntil: c.until}
		ev.Lock.Mode, ev.Lock.Permits = c.mode, c.permits
		obs(l.Index, ev)
	}
	return res
}

// applyGroup applies an OpAcquireAll group: ops are its acquires, res[0]
// the marker's result and res[1:] theirs. Every acquire is checked first;
// only if all can be granted is any applied.
func (f *FSM) applyGroup(ops []Op, res []Result, ev *[]change) {
	seen := make(map[string]struct{}, len(ops))
	for i := range ops {
		if _, dup := seen[ops[i].Key]; dup || ops[i].Type != OpAcquire {
			for j := range res {
				res[j] = Result{Status: StatusInvalid}
			}
			return
		}
		seen[ops[i].Key] = struct{}{}
	}
	grants := uint64(0)
	var failed *Result
	fresh := make([]bool, len(ops))
	for i := range ops {
		r, grant := f.checkAcquire(&ops[i])
		res[i+1] = r
		fresh[i] = grant
		if grant {
			grants++
		} else if r.Status != StatusOK && failed == nil {
			failed = &res[i+1]
		}
	}
	if failed == nil && f.counter > math.MaxUint64-grants {
		res[0] = Result{Status: StatusInvalid}
		for i := range ops {
			res[i+1] = Result{Status: StatusAborted}
		}
		return
	}
	if failed != nil {
		res[0] = *failed
		for i := range ops {
			if res[i+1].Status == StatusOK {
				res[i+1] = Result{Status: StatusAborted}
			}
		}
		return
	}
	res[0] = Result{Status: StatusOK}
	for i := range ops {
		if fresh[i] {
			res[i+1] = f.grant(&ops[i], ev)
			continue
		}
		// A re-sent group (same handle) answered with a grant it already
		// holds: renewed to TTL from this entry, as the leader renews a
		// re-sent single acquire. Its caller counts the lease from the
		// re-sent request, later than the original: without the renewal
		// it would believe it holds the key after the key expired here.
		renew := Op{Type: OpRenew, Key: ops[i].Key, Handle: ops[i].Handle, Token: res[i+1].Token, TTL: ops[i].TTL}
		res[i+1] = f.applyOp(&renew, ev)
	}
}

// checkAcquire decides an acquire at f.now without changing anything. It
// returns the result and whether a new grant is due (then the result is
// only StatusOK, without a token); StatusOK with grant false is an
// idempotent re-send, answered with the existing grant.
func (f *FSM) checkAcquire(o *Op) (Result, bool) {
	if o.Key == "" || o.Handle == "" || o.TTL <= 0 || o.Mode > ModeShared ||
		(o.Permits > 0 && o.Mode != ModeShared) || o.Permits > MaxPermits || o.LockDelay < 0 || o.LockDelay > MaxLockDelay {
		return Result{Status: StatusInvalid}, false
	}
	now := f.now
	if o.Session != "" {
		if s := f.sessions[o.Session]; s == nil || s.expires.Load() <= now {
			return Result{Status: StatusNoSession}, false
		}
	}
	var until int64 // the latest end of a lock-delay still ahead
	if r := f.kv[lockPrefix+o.Key]; r != nil {
		if r.exp() > now {
			if r.handleIs(o.Handle) {
				return r.result(StatusOK), false // a resend: same grant, no new token
			}
			return r.result(StatusHeld), false
		}
		until = max(until, r.delayEnd())
	}
	if g := f.groups[o.Key]; g != nil {
		live := 0
		var oldest *record
		for _, h := range g.holders {
			if h.exp() <= now {
				until = max(until, h.delayEnd())
				continue
			}
			if h.handleIs(o.Handle) {
				return h.result(StatusOK), false
			}
			live++
			if oldest == nil {
				oldest = h
			}
		}
		if live > 0 {
			switch {
			case o.Mode != ModeShared:
				return oldest.result(StatusHeld), false
			case g.permits != o.Permits:
				return oldest.result(StatusPermitsMismatch), false
			case (o.Permits > 0 && live >= int(o.Permits)) || live >= MaxHolders:
				return oldest.result(StatusHeld), false
			}
		}
	}
	until = max(until, f.delays[o.Key])
	if until > now {
		return Result{Status: StatusDelayed, Expires: until}, false
	}
	if f.counter == math.MaxUint64 {
		return Result{Status: StatusInvalid}, false // fencing counter exhausted
	}
	return Result{Status: StatusOK}, true
}

// delayEnd is when the lock-delay of r ends if r ends by expiry: its
// expiry plus its delay (0 without a delay).
func (r *record) delayEnd() int64 {
	d := r.delay()
	if d <= 0 {
		return 0
	}
	return addTTL(r.exp(), d)
}

// grant applies an acquire that checkAcquire allowed: expired holders are
// dropped, and o's grant stored with the next token.
func (f *FSM) grant(o *Op, ev *[]change) Result {
	now := f.now
	lk := lockPrefix + o.Key
	if r := f.kv[lk]; r != nil { // expired (checkAcquire): taken over
		delete(f.kv, lk)
		f.nlocks--
		f.countLease(r, -1)
		r.unlink(o.Key)
		addChange(ev, change{kind: EventExpired, key: o.Key, rec: r})
	}
	var keep []*record
	if g := f.groups[o.Key]; g != nil {
		keep = make([]*record, 0, len(g.holders)+1)
		for _, h := range g.holders {
			if h.exp() > now {
				keep = append(keep, h)
				continue
			}
			f.nshared--
			f.countLease(h, -1)
			h.unlink(o.Key)
			addChange(ev, change{kind: EventExpired, key: o.Key, rec: h, mode: ModeShared, permits: g.permits})
		}
		delete(f.groups, o.Key)
	}
	delete(f.delays, o.Key) // passed (checkAcquire)
	f.counter++
	r := &record{
		owner:   o.Owner,
		token:   f.counter,
		ttl:     int64(o.TTL),
		expires: addTTL(now, int64(o.TTL)),
	}
	r.setValue(string(o.Value))
	r.setDelay(int64(o.LockDelay))
	var hstr string
	r.h, hstr = packHandle(o.Handle)
	r.setHstr(hstr)
	if o.Session != "" {
		// A session lease: the session's TTL and expiry (checkAcquire
		// found it live).
		r.sess = f.sessions[o.Session]
		r.ttl, r.expires = r.sess.ttl, 0
		if r.owner == r.sess.owner {
			r.owner = r.sess.owner // one copy of the owner for all its leases
		}
		r.link(lk[len(lockPrefix):]) // shares the table key's bytes: the op's copy can go
	}
	f.countLease(r, 1)
	if o.Mode == ModeExclusive {
		f.kv[lk] = r
		f.nlocks++
		addChange(ev, change{kind: EventGranted, key: o.Key, rec: r})
		res := r.result(StatusOK)
		res.Key = lk[len(lockPrefix):]
		return res
	}
	f.groups[o.Key] = &group{permits: o.Permits, holders: append(keep, r)}
	f.nshared++
	addChange(ev, change{kind: EventGranted, key: o.Key, rec: r, mode: ModeShared, permits: o.Permits})
	return r.result(StatusOK)
}

// expired records r's end by expiry: its lock-delay, if still ahead,
// becomes the key's tombstone. It returns the delay's end (0: none).
func (f *FSM) expired(key string, r *record) int64 {
	until := r.delayEnd()
	if until <= f.now {
		return 0
	}
	if until > f.delays[key] {
		f.delays[key] = until
	}
	return f.delays[key]
}

// applyOp applies one op at f.now; f.mu is held for writing. When ev is not
// nil it gets the op's observer events.
func (f *FSM) applyOp(o *Op, ev *[]change) Result {
	now := f.now
	switch o.Type {
	case OpAcquire:
		r, grant := f.checkAcquire(o)
		if !grant {
			return r
		}
		return f.grant(o, ev)

	case OpRelease, OpRenew:
		if o.Key == "" || o.Handle == "" || (o.Type == OpRenew && o.TTL <= 0) {
			return Result{Status: StatusInvalid}
		}
		k := lockPrefix + o.Key
		if r := f.kv[k]; r != nil {
			if r.exp() <= now || r.token != o.Token || !r.handleIs(o.Handle) {
				return r.result(StatusNotHeld)
			}
			if o.Type == OpRelease {
				delete(f.kv, k)
				f.nlocks--
				f.countLease(r, -1)
				r.unlink(o.Key)
				addChange(ev, change{kind: EventReleased, key: o.Key, rec: r})
				return Result{Status: StatusOK}
			}
			if r.sess != nil {
				// A session lease lives as long as its session: renewing it
				// is renewing the session.
				f.renewSession(r.sess, ev)
				return r.result(StatusOK)
			}
			nr := *r
			nr.ttl = int64(o.TTL)
			nr.expires = addTTL(now, int64(o.TTL))
			f.kv[k] = &nr
			addChange(ev, change{kind: EventRenewed, key: o.Key, rec: &nr})
			return nr.result(StatusOK)
		}
		g := f.groups[o.Key]
		if g == nil {
			return Result{Status: StatusNotHeld}
		}
		i := g.find(o.Token)
		if i < 0 {
			return g.holders[0].result(StatusNotHeld)
		}
		h := g.holders[i]
		if h.exp() <= now || !h.handleIs(o.Handle) {
			return h.result(StatusNotHeld)
		}
		if o.Type == OpRelease {
			f.removeShared(o.Key, g, i)
			addChange(ev, change{kind: EventReleased, key: o.Key, rec: h, mode: ModeShared, permits: g.permits})
			return Result{Status: StatusOK}
		}
		if h.sess != nil {
			f.renewSession(h.sess, ev)
			return h.result(StatusOK)
		}
		nh := *h
		nh.ttl = int64(o.TTL)
		nh.expires = addTTL(now, int64(o.TTL))
		hs := slices.Clone(g.holders)
		hs[i] = &nh
		f.groups[o.Key] = &group{permits: g.permits, holders: hs}
		addChange(ev, change{kind: EventRenewed, key: o.Key, rec: &nh, mode: ModeShared, permits: g.permits})
		return nh.result(StatusOK)

	case OpExpire:
		if o.Key == "" {
			return Result{Status: StatusInvalid}
		}
		k := lockPrefix + o.Key
		if r := f.kv[k]; r != nil {
			if r.token != o.Token || r.exp() > now {
				return r.result(StatusNotHeld)
			}
			delete(f.kv, k)
			f.nlocks--
			f.countLease(r, -1)
			r.unlink(o.Key)
			addChange(ev, change{kind: EventExpired, key: o.Key, rec: r, until: f.expired(o.Key, r)})
			return Result{Status: StatusOK}
		}
		g := f.groups[o.Key]
		if g == nil {
			return Result{Status: StatusNotHeld}
		}
		i := g.find(o.Token)
		if i < 0 {
			return g.holders[0].result(StatusNotHeld)
		}
		h := g.holders[i]
		if h.exp() > now {
			return h.result(StatusNotHeld)
		}
		f.removeShared(o.Key, g, i)
		addChange(ev, change{kind: EventExpired, key: o.Key, rec: h, mode: ModeShared, permits: g.permits, until: f.expired(o.Key, h)})
		return Result{Status: StatusOK}

	case OpExtendAll:
		// Sessions first: their leases follow them, without a copy each.
		for _, ss := range f.sessionsSorted() {
			if ss.expires.Load() > now {
				f.renewSession(ss, ev)
			}
		}
		for k, r := range f.kv {
			if len(k) < len(lockPrefix) || k[:len(lockPrefix)] != lockPrefix || r.sess != nil || r.expires <= now {
				continue // data, a session's lease, or an expired lock: extending must not revive it
			}
			exp := addTTL(now, r.ttl)
			if exp <= r.expires {
				continue
			}
			nr := *r
			nr.expires = exp
			f.kv[k] = &nr
			addChange(ev, change{kind: EventRenewed, key: k[len(lockPrefix):], rec: &nr})
		}
		for k, g := range f.groups {
			var hs []*record
			for i, h := range g.holders {
				exp := addTTL(now, h.ttl)
				if h.sess != nil || h.expires <= now || exp <= h.expires {
					continue
				}
				if hs == nil {
					hs = slices.Clone(g.holders)
				}
				nh := *h
				nh.expires = exp
				hs[i] = &nh
				addChange(ev, change{kind: EventRenewed, key: k, rec: &nh, mode: ModeShared, permits: g.permits})
			}
			if hs != nil {
				f.groups[k] = &group{permits: g.permits, holders: hs}
			}
		}
		return Result{Status: StatusOK}

	case OpAppendData:
		if o.Key == "" {
			return Result{Status: StatusInvalid}
		}
		r := &record{}
		r.setValue(string(o.Value))
		f.kv[dataPrefix+o.Key] = r
		if o.Key == GateKey {
			f.gate = gateOf(r)
			f.checkGate()
		}
		return Result{Status: StatusOK}

	case OpSetMember:
		if o.Key == "" || len(o.Value) == 0 {
			return Result{Status: StatusInvalid}
		}
		f.members[o.Key] = string(o.Value)
		return Result{Status: StatusOK}

	case OpRemoveMember:
		if _, ok := f.members[o.Key]; !ok {
			return Result{Status: StatusInvalid}
		}
		delete(f.members, o.Key)
		return Result{Status: StatusOK}
	}
	// Decode rejects unknown types, and a marker outside Apply's group
	// handling; this is for hand-built ops in tests.
	return Result{Status: StatusInvalid}
}

// removeShared stores key's group without its holder i (copy-on-write),
// or deletes the group when i was its last holder.
func (f *FSM) removeShared(key string, g *group, i int) {
	f.nshared--
	f.countLease(g.holders[i], -1)
	g.holders[i].unlink(key)
	if len(g.holders) == 1 {
		delete(f.groups, key)
		return
	}
	hs := make([]*record, 0, len(g.holders)-1)
	hs = append(append(hs, g.holders[:i]...), g.holders[i+1:]...)
	f.groups[key] = &group{permits: g.permits, holders: hs}
}

// addTTL returns now+ttl, saturating at math.MaxInt64 (ttl > 0).
func addTTL(now, ttl int64) int64 {
	if now > math.MaxInt64-ttl {
		return math.MaxInt64
	}
	return now + ttl
}
