package zklike

import (
	"testing"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

func TestConformanceOneNode(t *testing.T) {
	e := testenv.StartEtcd(t, 1)
	locktest.Run(t, locktest.Factory{
		New:  func(t *testing.T) lock.Locker { return newLocker(t, e, nil) },
		Caps: caps,
	})
}

func TestConformanceThreeNodes(t *testing.T) {
	e := testenv.StartEtcd(t, 3)
	locktest.Run(t, locktest.Factory{
		New:  func(t *testing.T) lock.Locker { return newLocker(t, e, nil) },
		Caps: caps,
	})
}
