package peers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

func newZkLocker(t *testing.T, addrs []string, id string) *ZooKeeper {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	z, err := NewZooKeeper(ctx, ZooKeeperConfig{Addrs: addrs, ClientID: id})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { z.Close() })
	return z
}

// zkWaitChildren waits, with watches, until the lock node of key has n
// children.
func zkWaitChildren(t *testing.T, z *ZooKeeper, key string, n int) {
	t.Helper()
	parent := z.keyPath(key)
	timeout := time.After(30 * time.Second)
	for {
		children, _, ch, err := z.conn.ChildrenW(parent)
		if errors.Is(err, zk.ErrNoNode) {
			_, _, ch, err = z.conn.ExistsW(parent)
		}
		if err != nil {
			t.Fatalf("watching %s: %v", parent, err)
		}
		if len(children) == n {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("%s has %d children %v, want %d", parent, len(children), children, n)
		}
	}
}

func zkAcquire(t *testing.T, z *ZooKeeper, key string) *lock.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := z.Acquire(ctx, key, lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire %q: %v", key, err)
	}
	return l
}

// Several Lockers (sessions) on one key of a three-member ensemble: a
// holder never sees another, and each grant's token is above the last.
func TestZooKeeperMutualExclusion(t *testing.T) {
	t.Parallel()
	ens := testenv.StartZooKeeper(t, 3)
	const lockers, workers, rounds = 3, 2, 8
	var holders atomic.Int32
	var mu sync.Mutex
	var last lock.Token
	var grants int
	var wg sync.WaitGroup
	for i := 0; i < lockers; i++ {
		// Each Locker talks to its own member, so grants cross members.
		z := newZkLocker(t, ens.Addrs[i:i+1], fmt.Sprint("locker", i))
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < rounds; r++ {
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					l, err := z.Acquire(ctx, "shared", lock.AcquireOptions{TTL: time.Minute})
					cancel()
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					if n := holders.Add(1); n != 1 {
						t.Errorf("%d holders at once", n)
					}
					mu.Lock()
					if l.Token <= last {
						t.Errorf("token %d after %d", l.Token, last)
					}
					last = l.Token
					grants++
					mu.Unlock()
					holders.Add(-1)
					if err := z.Release(context.Background(), l); err != nil {
						t.Errorf("Release: %v", err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if grants != lockers*workers*rounds {
		t.Errorf("%d grants, want %d", grants, lockers*workers*rounds)
	}
}

// An Acquire whose ctx ends while it waits returns the ctx's error and
// leaves no node behind: once the holder releases, another Locker gets
// the key at once, not after the abandoned waiter.
func TestZooKeeperAcquireCancel(t *testing.T) {
	t.Parallel()
	ens := testenv.StartZooKeeper(t, 1)
	a := newZkLocker(t, ens.Addrs, "a")
	b := newZkLocker(t, ens.Addrs, "b")
	c := newZkLocker(t, ens.Addrs, "c")
	held := zkAcquire(t, a, "k")

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		l, err := b.Acquire(ctx, "k", lock.AcquireOptions{TTL: time.Minute})
		if err == nil {
			err = fmt.Errorf("granted %v while held", l.Token)
		}
		errc <- err
	}()
	zkWaitChildren(t, a, "k", 2) // b is queued
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire = %v, want context.Canceled", err)
	}
	zkWaitChildren(t, a, "k", 1) // b's node is gone

	if err := a.Release(context.Background(), held); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "k", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire after the cancelled waiter: %v", err)
	}
	if l.Token <= held.Token {
		t.Errorf("token %d after %d", l.Token, held.Token)
	}
	// A ctx that is already done never leaves a node either.
	done, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, err := b.Acquire(done, "k", lock.AcquireOptions{TTL: time.Minute}); !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire with a done ctx = %v", err)
	}
	zkWaitChildren(t, a, "k", 1)
}

// TryAcquire on a held key fails with ErrNotAcquired naming the holder and
// leaves no node; on a free key it grants. Release, Renew and Inspect.
func TestZooKeeperTryAcquireInspectRelease(t *testing.T) {
	t.Parallel()
	ens := testenv.StartZooKeeper(t, 1)
	a := newZkLocker(t, ens.Addrs, "a")
	b := newZkLocker(t, ens.Addrs, "b")
	key := "a/b ../ü" // escaped into one node name
	l, err := a.TryAcquire(context.Background(), key, lock.AcquireOptions{TTL: time.Minute, Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.TryAcquire(context.Background(), key, lock.AcquireOptions{TTL: time.Minute})
	var he *lock.HeldError
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.As(err, &he) || he.Owner != "a" || he.Token != l.Token {
		t.Fatalf("TryAcquire on a held key = %v, want a HeldError naming a, token %d", err, l.Token)
	}
	zkWaitChildren(t, a, key, 1)

	info, err := b.Inspect(context.Background(), key)
	if err != nil || info.Owner != "a" || info.Token != l.Token || string(info.Value) != "v" || info.Waiters != 0 {
		t.Fatalf("Inspect = %+v, %v", info, err)
	}
	if l.TTL() != a.SessionTimeout() || a.SessionTimeout() <= 0 {
		t.Errorf("lease TTL %v, session timeout %v", l.TTL(), a.SessionTimeout())
	}
	before := l.Deadline()
	if err := a.Renew(context.Background(), l, 0); err != nil {
		t.Fatal(err)
	}
	if !l.Deadline().After(before) {
		t.Errorf("Renew did not move the deadline")
	}
	if err := a.Release(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(context.Background(), l); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("second Release = %v, want ErrNotHeld", err)
	}
	if err := a.Renew(context.Background(), l, 0); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Renew after Release = %v, want ErrNotHeld", err)
	}
	if _, err := b.Inspect(context.Background(), key); !errors.Is(err, lock.ErrNotFound) {
		t.Errorf("Inspect of a free key = %v, want ErrNotFound", err)
	}
	l2, err := b.TryAcquire(context.Background(), key, lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token <= l.Token {
		t.Errorf("token %d after %d", l2.Token, l.Token)
	}
}

// zkAcquired is the outcome of an Acquire.
type zkAcquired struct {
	lease *lock.Lease
	err   error
}

// zkQueued starts a one-member ensemble, has Locker a hold key and
// Locker b wait for it, queued at the server; b's Acquire reports on
// waiter.
func zkQueued(t *testing.T, key string) (a, b *ZooKeeper, held *lock.Lease, waiter <-chan zkAcquired) {
	t.Helper()
	ens := testenv.StartZooKeeper(t, 1)
	a = newZkLocker(t, ens.Addrs, "a")
	b = newZkLocker(t, ens.Addrs, "b")
	held = zkAcquire(t, a, key)
	got := make(chan zkAcquired, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := b.Acquire(ctx, key, lock.AcquireOptions{})
		got <- zkAcquired{l, err}
	}()
	zkWaitChildren(t, a, key, 2)
	return a, b, held, got
}

// A Locker whose session closes frees its locks: a waiter on another
// Locker is granted, and the closed Locker's leases end.
func TestZooKeeperSessionCloseFrees(t *testing.T) {
	t.Parallel()
	a, b, held, waiter := zkQueued(t, "k")
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Done():
		if !errors.Is(held.Err(), lock.ErrNotHeld) {
			t.Errorf("closed Locker's lease ended with %v, want ErrNotHeld", held.Err())
		}
	default:
		t.Errorf("the closed Locker's lease did not end")
	}
	got := <-waiter
	if got.err != nil {
		t.Fatalf("waiter: %v", got.err)
	}
	if got.lease.Token <= held.Token {
		t.Errorf("token %d after %d", got.lease.Token, held.Token)
	}
	if err := b.Release(context.Background(), got.lease); err != nil {
		t.Error(err)
	}
	if _, err := a.Acquire(context.Background(), "k", lock.AcquireOptions{}); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Acquire after Close = %v, want ErrClosed", err)
	}
}

// Close of a Locker whose Acquire waits in zk.Lock.Lock (which takes no
// context) returns, the waiter gets ErrClosed, and its node leaves the
// queue with the session.
func TestZooKeeperCloseWhileWaiting(t *testing.T) {
	t.Parallel()
	a, b, _, waiter := zkQueued(t, "k")
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return while an Acquire waited in Lock")
	}
	if got := <-waiter; got.lease != nil || !errors.Is(got.err, lock.ErrClosed) {
		t.Fatalf("waiting Acquire after Close: %v, %v; want ErrClosed", got.lease, got.err)
	}
	zkWaitChildren(t, a, "k", 1)
}
