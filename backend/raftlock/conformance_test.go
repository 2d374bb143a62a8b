package raftlock

import (
	"testing"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// TestConformance runs the lock contract's suite against a three-node
// cluster over real TCP with durable stores.
func TestConformance(t *testing.T) {
	c := startCluster(t, 3)
	l := leader(t, c)
	locktest.Run(t, locktest.Factory{
		New: func(t *testing.T) lock.Locker { return l.NewSession() },
		Caps: locktest.Capabilities{
			FIFO: true, InspectOwner: true, InspectValue: true, InspectWaiters: true, Wanted: true,
		},
	})
}

// TestConformanceClusterLocker runs the suite over LocalCluster.Locker, the
// leader-following Locker that `lockgate serve` puts its front gateway on.
func TestConformanceClusterLocker(t *testing.T) {
	c := startCluster(t, 3)
	leader(t, c)
	locktest.Run(t, locktest.Factory{
		New: func(t *testing.T) lock.Locker { return c.Locker() },
		Caps: locktest.Capabilities{
			FIFO: true, InspectOwner: true, InspectValue: true, InspectWaiters: true, Wanted: true,
			MutexGoroutines: 16, MutexCycles: 50,
		},
	})
}
