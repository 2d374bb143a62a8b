package fencedstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/lockgate/lockgate/fencedstore"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// The fenced store protects data from a lock holder that was paused past
// its lease: worker a's lease expires while it is stalled, worker b takes
// the lock and writes with its (higher) token, and a's late write with the
// older token is refused. The in-memory reference locker of lock/locktest
// stands in for a backend here.
func Example() {
	dir, err := os.MkdirTemp("", "fencedstore-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	store, err := fencedstore.Open(filepath.Join(dir, "data"), fencedstore.Options{})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	locks := locktest.NewMemStore()
	a, b := locks.NewLocker(), locks.NewLocker()
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	write := func(client string, lease *lock.Lease, data string) error {
		_, err := store.Write(ctx, fencedstore.WriteRequest{
			ClientID: client,
			Token:    fencedstore.FencingToken{Key: lease.Key, Value: uint64(lease.Token)},
			Data:     data,
		})
		return err
	}

	leaseA, err := a.Acquire(ctx, "invoices", lock.AcquireOptions{TTL: 50 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	// a stalls (a GC pause, a slow disk) until its lease has expired.
	<-leaseA.Done()

	leaseB, err := b.Acquire(ctx, "invoices", lock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	defer b.Release(ctx, leaseB)
	fmt.Println("b's write:", write("worker-b", leaseB, "total=42"))

	// a wakes up and writes, unaware that it lost the lock.
	err = write("worker-a", leaseA, "total=41")
	fmt.Println("a's write refused:", errors.Is(err, fencedstore.ErrStaleToken))
	fmt.Println(err)

	rec, _ := store.Read("invoices")
	fmt.Printf("invoices = %s, written by %s\n", rec.Data, rec.ClientID)
	// Output:
	// b's write: <nil>
	// a's write refused: true
	// fencedstore: stale fencing token 1 for key "invoices": token 2 was already accepted
	// invoices = total=42, written by worker-b
}

// The store served over HTTP (what `lockgate store` runs) and its client:
// a write with a token lower than one already accepted for its key is
// answered 409 stale_token, which Client.Write returns as a
// *StaleTokenError.
func ExampleClient() {
	dir, err := os.MkdirTemp("", "fencedstore-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	store, err := fencedstore.Open(filepath.Join(dir, "data"), fencedstore.Options{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	srv := httptest.NewServer(fencedstore.NewHandler(store, fencedstore.HandlerOptions{}))
	defer srv.Close()

	c := fencedstore.NewClient(srv.URL, nil)
	ctx := context.Background()
	err = c.Write(ctx, fencedstore.WriteRequest{
		ClientID: "worker-b",
		Token:    fencedstore.FencingToken{Key: "invoices", Value: 34},
		Data:     "total=42",
	})
	fmt.Println("write with token 34:", err)

	err = c.Write(ctx, fencedstore.WriteRequest{
		ClientID: "worker-a",
		Token:    fencedstore.FencingToken{Key: "invoices", Value: 33},
		Data:     "total=41",
	})
	var stale *fencedstore.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Printf("write with token %d refused: token %d was already accepted\n", stale.Token, stale.Highest)
	}

	rec, found, err := c.Read(ctx, "invoices")
	if err != nil || !found {
		panic(fmt.Sprint("read: ", found, err))
	}
	fmt.Printf("invoices = %s (token %d)\n", rec.Data, rec.Token.Value)
	st, err := c.Stats(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("accepted %d, rejected %d\n", st.Accepted, st.Rejected)
	// Output:
	// write with token 34: <nil>
	// write with token 33 refused: token 34 was already accepted
	// invoices = total=42 (token 34)
	// accepted 1, rejected 1
}
