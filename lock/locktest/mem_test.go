package locktest

import (
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// memFactory runs the suite on a MemStore with the given defects.
func memFactory(b bugs) Factory {
	store := NewMemStore()
	store.bugs = b
	return Factory{
		New: func(t *testing.T) lock.Locker { return store.NewLocker() },
		Caps: Capabilities{
			FIFO: true, InspectOwner: true, InspectValue: true, InspectWaiters: true, Wanted: true,
			TTL: 200 * time.Millisecond, ExpirySlack: 500 * time.Millisecond,
		},
	}
}

// TestMemStore: the reference locker passes the whole suite.
func TestMemStore(t *testing.T) {
	Run(t, memFactory(bugs{}))
}
