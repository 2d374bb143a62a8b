package fsm

import (
	"time"
)

// Fencing tokens across restores and recoveries.
//
// A cluster restored from a backup, or recovered from a lost majority,
// has a fencing counter that may lag tokens the original cluster issued
// after the backup (or that only the lost members knew). TokenFloor is
// where such a cluster's counter starts instead: above the backup's
// counter, above the backup's clock, and above the wall clock of the
// restore, in nanoseconds since the Unix epoch. A cluster issues far fewer
// than one token per nanosecond (each one is a Raft commit), so a counter
// that started at or below a clock reading T stays below the wall clock of
// any later instant: tokens issued by the original cluster, by an earlier
// restore from the same backup, or by the recovered members, are all
// below a floor taken later. The argument needs the restoring host's
// clock not to be behind the clocks of the hosts that issued those tokens
// by more than the time between the two events; docs/operations.md says
// so, and `--token-floor` raises the floor by hand. Tokens stay uint64
// (the floor reaches 2^63 in the year 2262) and strictly increase per key.

// TokenFloor returns the fencing counter a restored or recovered cluster
// starts from: the greatest of counter, fsmNow (the backup's clock, unix
// ns) and now (unix ns), plus one.
func TokenFloor(now time.Time, counter uint64, fsmNow int64) uint64 {
	floor := counter
	if fsmNow > 0 && uint64(fsmNow) > floor {
		floor = uint64(fsmNow)
	}
	if ns := now.UnixNano(); ns > 0 && uint64(ns) > floor {
		floor = uint64(ns)
	}
	return floor + 1
}

// RaiseCounter sets the fencing counter to floor when it is below: the
// next grant's token is then above floor. It never lowers the counter.
func (f *FSM) RaiseCounter(floor uint64) {
	f.mu.Lock()
	f.counter = max(f.counter, floor)
	f.mu.Unlock()
}

// DropLeases ends, without events, every lease, shared holder, session and
// lock-delay: the state of a cluster restored from a backup, whose leases
// belong to the original cluster's time. Data keys, the member directory,
// the gate and the counter stay.
func (f *FSM) DropLeases() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.kv {
		if len(k) >= len(lockPrefix) && k[:len(lockPrefix)] == lockPrefix {
			delete(f.kv, k)
		}
	}
	f.groups = make(map[string]*group)
	f.delays = make(map[string]int64)
	f.sessions = make(map[string]*session)
	f.nlocks, f.nshared = 0, 0
	f.idLeases, f.idSessions = nil, nil
}

// SetData sets a data key outside the log: for building a restored
// cluster's first snapshot (its identity) and nothing else.
func (f *FSM) SetData(key string, value []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := &record{}
	r.setValue(string(value))
	f.kv[dataPrefix+key] = r
	if key == GateKey {
		f.gate = gateOf(r)
	}
}

// SetMembers replaces the member directory outside the log: a restored
// cluster's first snapshot names its new members' API addresses.
func (f *FSM) SetMembers(m map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.members = make(map[string]string, len(m))
	for k, v := range m {
		f.members[k] = v
	}
}

// SetApplied sets the applied index outside the log: a restored cluster's
// first snapshot is at the index its data directory's log starts after.
func (f *FSM) SetApplied(index uint64) {
	f.mu.Lock()
	f.index = index
	f.mu.Unlock()
}
