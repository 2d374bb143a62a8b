package bench

import (
	"testing"

	"github.com/lockgate/lockgate/internal/backends"
)

// TestFaultBreaksSafety: the campaigns that must show overlaps to count.
func TestFaultBreaksSafety(t *testing.T) {
	for _, tc := range []struct {
		backend, fault string
		want           bool
	}{
		{Raft, FaultClientPause, true},
		{Etcd, FaultClientPause, true},
		{Redlock, FaultClock, true},
		{Raft, FaultClock, false},
		{Raft, FaultKill, false},
		{Redlock, FaultPartition, false},
		{Redsync, FaultClock, true},
		{EtcdMutex, FaultClientPause, true},
		{"etcd:lease", FaultClientPause, true},
		{ZooKeeper, FaultClientPause, true},
		{PGAdvisory, FaultClientPause, false},
		{PGAdvisory, FaultKill, false},
	} {
		f, err := FaultByName(tc.fault)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.BreaksSafety(tc.backend); got != tc.want {
			t.Errorf("%s.BreaksSafety(%s) = %v, want %v", tc.fault, tc.backend, got, tc.want)
		}
	}
}

// TestFaultTable: every fault kind named in Faults can be injected on
// every backend bar the clock of etcd's and ZooKeeper's (Go and JVM
// servers), whose refusal says why, and the faults that act on raftlock's
// own peer links, membership, clock or data filesystem, which apply to
// raftlock only; and a fault that breaks safety somewhere is available
// there.
func TestFaultTable(t *testing.T) {
	raftOnly := map[string]bool{FaultPartitionLeader: true, FaultPartitionMajority: true, FaultPartitionBridge: true,
		FaultPartitionOneWay: true, FaultMembership: true, FaultClockSmall: true, FaultClockBig: true, FaultDiskFull: true}
	for _, name := range Faults {
		f, err := FaultByName(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range Backends {
			k := kindOf(b)
			want := !(name == FaultClock && (k == backends.KindEtcd || k == backends.KindZooKeeper)) &&
				!(raftOnly[name] && k != backends.KindRaft)
			if got := f.Available(b); got != want {
				t.Errorf("%s.Available(%s) = %v, want %v", name, b, got, want)
			}
			if f.BreaksSafety(b) && !f.Available(b) {
				t.Errorf("%s breaks safety on %s, where it is not available", name, b)
			}
		}
	}
}
