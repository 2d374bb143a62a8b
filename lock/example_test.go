package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// Every Locker is used the same way: acquire with a TTL, do the work with
// the fencing token in hand, release. The in-memory reference locker of
// lock/locktest stands in for a backend here.
func Example() {
	store := locktest.NewMemStore()
	a, b := store.NewLocker(), store.NewLocker()
	defer a.Close()
	defer b.Close()
	ctx := context.Background()

	lease, err := a.Acquire(ctx, "invoices", lock.AcquireOptions{TTL: 30 * time.Second, Owner: "worker-a"})
	if err != nil {
		panic(err)
	}
	fmt.Println("a holds invoices with fencing token", lease.Token)

	// While a holds it, b's try fails with the holder's details.
	_, err = b.TryAcquire(ctx, "invoices", lock.AcquireOptions{TTL: 30 * time.Second, Owner: "worker-b"})
	var held *lock.HeldError
	fmt.Println("b's try:", errors.Is(err, lock.ErrNotAcquired), errors.As(err, &held) && held.Owner == "worker-a")

	if err := a.Release(ctx, lease); err != nil {
		panic(err)
	}
	next, err := b.TryAcquire(ctx, "invoices", lock.AcquireOptions{TTL: 30 * time.Second, Owner: "worker-b"})
	if err != nil {
		panic(err)
	}
	fmt.Println("b holds invoices with a larger token:", next.Token > lease.Token)
	// Output:
	// a holds invoices with fencing token 1
	// b's try: true true
	// b holds invoices with a larger token: true
}
