package faults

import (
	"testing"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/internal/backends"
)

// TestFaultBreaksSafety: the campaigns that must show overlaps to count.
func TestFaultBreaksSafety(t *testing.T) {
	for _, tc := range []struct {
		backend, fault string
		want           bool
	}{
		{provision.Raft, ClientPause, true},
		{provision.Etcd, ClientPause, true},
		{provision.Redlock, Clock, true},
		{provision.Raft, Clock, false},
		{provision.Raft, Kill, false},
		{provision.Redlock, Partition, false},
		{provision.Redsync, Clock, true},
		{provision.EtcdMutex, ClientPause, true},
		{"etcd:lease", ClientPause, true},
		{provision.ZooKeeper, ClientPause, true},
		{provision.PGAdvisory, ClientPause, false},
		{provision.PGAdvisory, Kill, false},
	} {
		f, err := ByName(tc.fault)
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
	raftOnly := map[string]bool{PartitionLeader: true, PartitionMajority: true, PartitionBridge: true,
		PartitionOneWay: true, Membership: true, ClockSmall: true, ClockBig: true, DiskFull: true}
	for _, name := range Names {
		f, err := ByName(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range provision.Backends {
			k := provision.KindOf(b)
			want := !(name == Clock && (k == backends.KindEtcd || k == backends.KindZooKeeper)) &&
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
