package redlock

import (
	"testing"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

var caps = locktest.Capabilities{FIFO: false, InspectOwner: true, InspectValue: true, InspectWaiters: false, Wanted: true}

func TestConformanceFiveNodes(t *testing.T) {
	rs := testenv.StartRedisN(t, 5)
	locktest.Run(t, locktest.Factory{
		New:  func(t *testing.T) lock.Locker { return newLocker(t, rs, nil) },
		Caps: caps,
	})
}

func TestConformanceOneNode(t *testing.T) {
	rs := testenv.StartRedisN(t, 1)
	locktest.Run(t, locktest.Factory{
		New:  func(t *testing.T) lock.Locker { return newLocker(t, rs, nil) },
		Caps: caps,
	})
}
