package sqllock

import (
	"testing"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

var caps = locktest.Capabilities{FIFO: false, InspectOwner: true, InspectValue: true, InspectWaiters: false, Wanted: true}

func TestConformance(t *testing.T) {
	t.Parallel()
	p := shared(t)
	locktest.Run(t, locktest.Factory{
		New:  func(t *testing.T) lock.Locker { return newLocker(t, p, nil) },
		Caps: caps,
	})
}

// TestConformanceSchemaTable runs the suite against a schema-qualified
// table whose names need quoting.
func TestConformanceSchemaTable(t *testing.T) {
	t.Parallel()
	p := shared(t)
	locktest.Run(t, locktest.Factory{
		New: func(t *testing.T) lock.Locker {
			return newLocker(t, p, func(c *Config) { c.Table = `Lock Space.Locks "v2"` })
		},
		Caps: caps,
	})
}
