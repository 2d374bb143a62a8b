package zklike

import (
	"testing"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// mutexCaps halves the suite's mutual-exclusion case (32 goroutines × 50
// cycles instead of × 100) for this backend: each of its acquisitions with
// an explicit TTL costs a LeaseGrant, a Txn, a watch, a read and a Txn
// release with a lease revoke, Raft writes on every member, and the full
// 3,200 took over a minute per cluster under -race on a loaded two-core
// machine. 1,600 overlapping-hold checks per cluster still catch an
// exclusion bug (see lock/locktest's broken lockers).
var mutexCaps = func() locktest.Capabilities {
	c := caps
	c.MutexCycles = 50
	return c
}()

func TestConformanceOneNode(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 1)
	locktest.Run(t, locktest.Factory{
		New:  func(t *testing.T) lock.Locker { return newLocker(t, e, nil) },
		Caps: mutexCaps,
	})
}

func TestConformanceThreeNodes(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 3)
	locktest.Run(t, locktest.Factory{
		New:  func(t *testing.T) lock.Locker { return newLocker(t, e, nil) },
		Caps: mutexCaps,
	})
}
