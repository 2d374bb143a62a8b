package peers

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestUnsupportedRefusedBeforeTheLibrary: every wrapper reports no
// features and refuses shared, semaphore and lock-delay acquires with
// lock.ErrUnsupported and its library's reason, without calling the
// library: the servers are unreachable (ZooKeeper's wrapper has no
// connection at all), so a wrapper that called its library would fail
// otherwise (the plain acquire shows it). lock.AcquireAll and lock.Watch
// refuse too.
func TestUnsupportedRefusedBeforeTheLibrary(t *testing.T) {
	dead := deadAddr(t)
	ctx := context.Background()
	lockers := map[string]lock.Locker{}
	if l, err := NewRedislock(RedislockConfig{Addr: dead}); err != nil {
		t.Fatal(err)
	} else {
		lockers["redislock"] = l
	}
	if l, err := NewRedsync(RedsyncConfig{Addrs: []string{dead, dead, dead}}); err != nil {
		t.Fatal(err)
	} else {
		lockers["redsync"] = l
	}
	if l, err := NewPGAdvisory(ctx, PGAdvisoryConfig{URL: "postgres://nobody@" + dead + "/none?connect_timeout=1"}); err != nil {
		t.Fatal(err)
	} else {
		lockers["pg-advisory"] = l
	}
	if l, err := NewEtcdMutex(EtcdMutexConfig{Endpoints: []string{"http://" + dead}, DialTimeout: time.Second}); err != nil {
		t.Fatal(err)
	} else {
		lockers["etcd-mutex"] = l
	}
	// No connection: any call into the library would panic.
	lockers["zookeeper"] = &ZooKeeper{root: "/lockgate", clientID: "zk-test", life: newLife(), held: map[string]*zkGrant{}}
	for name, l := range lockers {
		t.Run(name, func(t *testing.T) {
			if z, ok := l.(*ZooKeeper); ok {
				defer z.life.Close() // Close would close the connection it has not
			} else {
				defer l.Close()
			}
			if f := lock.FeaturesOf(l); f != 0 {
				t.Errorf("Features = %v, want none", f)
			}
			r := Unsupported[name]
			for _, c := range []struct {
				f    lock.Features
				opts lock.AcquireOptions
			}{
				{lock.FeatureShared, lock.AcquireOptions{TTL: time.Second, Mode: lock.ModeShared}},
				{lock.FeatureSemaphore, lock.AcquireOptions{TTL: time.Second, Permits: 2}},
				{lock.FeatureLockDelay, lock.AcquireOptions{TTL: time.Second, LockDelay: time.Second}},
			} {
				for _, try := range []bool{false, true} {
					var err error
					if try {
						_, err = l.TryAcquire(ctx, "k", c.opts)
					} else {
						_, err = l.Acquire(ctx, "k", c.opts)
					}
					var ue *lock.UnsupportedError
					if !errors.As(err, &ue) || !errors.Is(err, lock.ErrUnsupported) || ue.Feature != c.f || ue.Reason == "" || ue.Reason != r[c.f] {
						t.Errorf("%v (try %v): err = %v, want ErrUnsupported for %v with the library's reason", c.f, try, err, c.f)
					}
				}
			}
			for _, f := range []lock.Features{lock.FeatureShared, lock.FeatureSemaphore, lock.FeatureMultiKey, lock.FeatureWatch, lock.FeatureLockDelay} {
				if r[f] == "" {
					t.Errorf("no reason for %v", f)
				}
			}
			if _, err := lock.AcquireAll(ctx, l, []string{"a", "b"}, lock.AcquireOptions{}); !errors.Is(err, lock.ErrUnsupported) {
				t.Errorf("AcquireAll: %v", err)
			}
			if _, err := lock.Watch(ctx, l, "a"); !errors.Is(err, lock.ErrUnsupported) {
				t.Errorf("Watch: %v", err)
			}
			if name == "zookeeper" {
				return
			}
			c, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if _, err := l.TryAcquire(c, "k", lock.AcquireOptions{TTL: time.Second}); err == nil || errors.Is(err, lock.ErrUnsupported) {
				t.Errorf("plain TryAcquire against a dead server: err = %v, want a failure of the library's call", err)
			}
		})
	}
}
