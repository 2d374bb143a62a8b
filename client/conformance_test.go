package client_test

import (
	"testing"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// TestConformanceMem runs the lock contract's suite through the SDK and a
// real gateway over the in-memory reference locker. Every client talks to
// one of two gateways over the same store, picked at random per client.
func TestConformanceMem(t *testing.T) {
	store := locktest.NewMemStore()
	addrs := []string{startMemGateway(t, store), startMemGateway(t, store)}
	locktest.Run(t, locktest.Factory{
		New: func(t *testing.T) lock.Locker { return newClient(t, addrs, client.Options{}) },
		Caps: locktest.Capabilities{
			FIFO: true, InspectOwner: true, InspectValue: true, InspectWaiters: true, Wanted: true,
		},
	})
}

// TestConformanceRaft runs the suite through the SDK and the gateways of a
// three-node raftlock cluster; each client starts at a random node and
// follows redirects to the leader.
func TestConformanceRaft(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a raftlock cluster")
	}
	c := startRaft(t)
	raftLeader(t, c)
	addrs := apiAddrs(c)
	locktest.Run(t, locktest.Factory{
		New: func(t *testing.T) lock.Locker { return newClient(t, addrs, client.Options{}) },
		Caps: locktest.Capabilities{
			FIFO: true, InspectOwner: true, InspectValue: true, InspectWaiters: true, Wanted: true,
		},
	})
}
