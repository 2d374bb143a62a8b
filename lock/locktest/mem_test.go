package locktest

import (
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// memFactory runs the suite on a MemStore with the given defects.
func memFactory(b bugs) Factory {
	store := NewMemStore()
	if b.pretendsShared {
		store = NewMemStoreWithFeatures(lock.AllFeatures &^ lock.FeatureShared)
	}
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

// TestMemStoreFeatureSubsets: a MemStore without some primitives refuses
// them (the Unsupported case, which a full MemStore has nothing to refuse
// in) and still passes the cases of the features it keeps.
func TestMemStoreFeatureSubsets(t *testing.T) {
	for _, f := range []lock.Features{0, lock.FeatureShared | lock.FeatureWatch, lock.FeatureSemaphore | lock.FeatureMultiKey | lock.FeatureLockDelay} {
		t.Run(f.String(), func(t *testing.T) {
			t.Parallel()
			store := NewMemStoreWithFeatures(f)
			s := &suite{f: Factory{
				New:  func(t *testing.T) lock.Locker { return store.NewLocker() },
				Caps: memFactory(bugs{}).Caps.withDefaults(),
			}}
			s.unsupported(t)
			if l := store.NewLocker(); lock.FeaturesOf(l) != f {
				t.Errorf("FeaturesOf = %v, want %v", lock.FeaturesOf(l), f)
			}
		})
	}
}
