package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockgate/lockgate/backend/redlock"
	"github.com/lockgate/lockgate/lock"
)

// redisAddr is the address of the examples' Redis: a redis-server the
// test binary started on a free loopback port (in production, your Redis,
// such as "10.0.0.5:6379").
func redisAddr() string { return redlock.ExampleRedisAddr }

// Acquire, write with the fencing token, release. One address is plain
// single-Redis locking; the addresses of N independent masters make it
// Redlock, granted by a quorum of N/2+1.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := redlock.New(redlock.DefaultConfig(redisAddr()))
	if err != nil {
		panic(err)
	}
	defer l.Close()

	lease, err := l.Acquire(ctx, "reports/daily", lock.AcquireOptions{TTL: 10 * time.Second, Owner: "worker-a"})
	if err != nil {
		panic(err)
	}
	fmt.Println("quorum:", l.Quorum(), "of 1 node; fencing token above 0:", lease.Token > 0)

	// Another client (another Locker, as another process would have) is
	// refused while the lock is held, and told by whom.
	other, err := redlock.New(redlock.DefaultConfig(redisAddr()))
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
	// quorum: 1 of 1 node; fencing token above 0: true
	// worker-b refused: true true
	// worker-b's token is larger: true
}
