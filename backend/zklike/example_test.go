package zklike_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockgate/lockgate/backend/zklike"
	"github.com/lockgate/lockgate/lock"
)

// etcdEndpoints are the examples' etcd cluster: an etcd the test binary
// started on free loopback ports (in production, your cluster, such as
// "http://10.0.0.5:2379").
func etcdEndpoints() []string { return zklike.ExampleEtcdEndpoints }

// Acquire, write with the fencing token, release. The token is the
// holder's etcd create revision, so every grant's token is larger than
// every earlier one.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := zklike.New(zklike.DefaultConfig(etcdEndpoints()...))
	if err != nil {
		panic(err)
	}
	defer l.Close()

	lease, err := l.Acquire(ctx, "reports/daily", lock.AcquireOptions{TTL: 10 * time.Second, Owner: "worker-a"})
	if err != nil {
		panic(err)
	}
	fmt.Println("granted; fencing token above 0:", lease.Token > 0)

	// Another client (another Locker, as another process would have) is
	// refused while the lock is held, and told by whom.
	other, err := zklike.New(zklike.DefaultConfig(etcdEndpoints()...))
	if err != nil {
		panic(err)
	}
	defer other.Close()
	_, err = other.TryAcquire(ctx, "reports/daily", lock.AcquireOptions{TTL: 10 * time.Second, Owner: "worker-b"})
	var held *lock.HeldError
	fmt.Println("worker-b refused:", errors.Is(err, lock.ErrNotAcquired), errors.As(err, &held) && held.Owner == "worker-a")

	if err := l.Release(ctx, lease); err != nil {
		panic(err)
	}
	next, err := other.Acquire(ctx, "reports/daily", lock.AcquireOptions{TTL: 10 * time.Second, Owner: "worker-b"})
	if err != nil {
		panic(err)
	}
	defer other.Release(ctx, next)
	fmt.Println("worker-b's token is larger:", next.Token > lease.Token)
	// Output:
	// granted; fencing token above 0: true
	// worker-b refused: true true
	// worker-b's token is larger: true
}
