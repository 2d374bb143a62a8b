package redlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// TestLocalHandoff: a release while a caller of the same Locker waits hands
// the lock over directly, with a larger token, and the old lease ends.
func TestLocalHandoff(t *testing.T) {
	rs := testenv.StartRedisN(t, 3)
	l := newLocker(t, rs, nil)
	opts := lock.AcquireOptions{TTL: time.Minute, Owner: "first"}
	first, err := l.Acquire(bg(t, time.Minute), "handoff", opts)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lock.Lease, 1)
	go func() {
		lease, err := l.Acquire(bg(t, time.Minute), "handoff", lock.AcquireOptions{TTL: time.Minute, Owner: "second", Value: []byte("v2")})
		if err != nil {
			t.Error(err)
		}
		got <- lease
	}()
	awaitQueued(t, l, "handoff", 1)
	if err := l.Release(bg(t, time.Minute), first); err != nil {
		t.Fatal(err)
	}
	if first.Err() != lock.ErrReleased {
		t.Errorf("old lease: Err %v, want ErrReleased", first.Err())
	}
	second := <-got
	if second == nil {
		t.FailNow()
	}
	if second.Token <= first.Token {
		t.Errorf("handed-over token %d, want > %d", second.Token, first.Token)
	}
	info, err := l.Inspect(bg(t, time.Minute), "handoff")
	if err != nil || info.Owner != "second" || info.Token != second.Token || string(info.Value) != "v2" {
		t.Errorf("Inspect after handoff: %+v, %v", info, err)
	}
	if err := l.Renew(bg(t, time.Minute), first, 0); err == nil {
		t.Errorf("Renew of the handed-over lease succeeded")
	}
	if err := l.Release(bg(t, time.Minute), kit.NewLease(kit.Grant{Key: "handoff", Handle: first.Handle, Token: first.Token, TTL: time.Minute, Sent: time.Now()})); err == nil {
		t.Errorf("Release of a rebuilt copy of the handed-over lease succeeded")
	}
	if err := l.Release(bg(t, time.Minute), second); err != nil {
		t.Errorf("Release: %v", err)
	}
	awaitHolders(t, rs, "handoff", 0)
}

// TestRebuiltReleasePassesTurn: releasing a rebuilt copy of a lease ends the
// original too, and the next caller of the same Locker gets its turn at
// once, not at the original's deadline.
func TestRebuiltReleasePassesTurn(t *testing.T) {
	rs := testenv.StartRedisN(t, 3)
	l := newLocker(t, rs, nil)
	orig, err := l.Acquire(bg(t, time.Minute), "rebuilt", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		lease, err := l.Acquire(bg(t, 5*time.Second), "rebuilt", lock.AcquireOptions{TTL: time.Minute})
		if err == nil {
			err = l.Release(context.Background(), lease)
		}
		got <- err
	}()
	awaitQueued(t, l, "rebuilt", 1)
	dup := kit.NewLease(kit.Grant{Key: orig.Key, Owner: orig.Owner, Token: orig.Token, Handle: orig.Handle, TTL: time.Minute, Sent: time.Now()})
	if err := l.Release(bg(t, time.Minute), dup); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Errorf("next caller: %v", err)
	}
	select {
	case <-orig.Done():
	default:
		t.Errorf("original lease still open after its grant was released")
	}
}

// TestHandoffFairness: a Locker whose callers keep the key busy hands it
// over at most localgate.MaxHandoffs times in a row; a caller of another Locker
// still gets it promptly.
func TestHandoffFairness(t *testing.T) {
	rs := testenv.StartRedisN(t, 3)
	a := newLocker(t, rs, nil)
	b := newLocker(t, rs, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				lease, err := a.Acquire(ctx, "fair", lock.AcquireOptions{TTL: time.Minute})
				if err != nil {
					return
				}
				a.Release(context.Background(), lease)
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	lease, err := b.Acquire(bg(t, 5*time.Second), "fair", lock.AcquireOptions{TTL: time.Minute})
	took := time.Since(start)
	if err != nil {
		t.Errorf("other Locker starved: %v", err)
	} else {
		t.Logf("other Locker granted after %v", took)
		b.Release(context.Background(), lease)
	}
	cancel()
	wg.Wait()
}

// awaitQueued waits until n callers of l queue for key in its local gate.
func awaitQueued(t *testing.T, l *Locker, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.gate.Queued(key) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d callers queued for %q, want %d", l.gate.Queued(key), key, n)
		}
		time.Sleep(time.Millisecond)
	}
}
