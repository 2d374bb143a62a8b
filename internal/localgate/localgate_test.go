package localgate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

func grant(key, handle string) *lock.Lease {
	return kit.NewLease(kit.Grant{Key: key, Owner: "o", Token: 1, Handle: handle, TTL: time.Minute, Sent: time.Now()})
}

// enterAsync starts Enter on a goroutine and returns its result channel once
// the caller is queued.
func enterAsync(t *testing.T, g *Gate, ctx context.Context, key string, released chan<- *lock.Lease) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	before := g.queued(key)
	go func() {
		lease, err := g.Enter(ctx, nil, key, lock.AcquireOptions{}, func() error { return ctx.Err() },
			func(l *lock.Lease) { released <- l })
		if err == nil && lease != nil {
			err = errors.New("handed a lease")
		}
		done <- err
	}()
	for g.queued(key) == before {
		time.Sleep(time.Millisecond)
	}
	return done
}

func (g *Gate) queued(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s := g.keys[key]; s != nil {
		return len(s.queue)
	}
	return -1
}

// TestTurnsInOrder: the first caller goes straight to the server, the next
// ones wait, and each Exit lets exactly the oldest waiter through.
func TestTurnsInOrder(t *testing.T) {
	g := New(8)
	ctx := context.Background()
	if l, err := g.Enter(ctx, nil, "k", lock.AcquireOptions{}, nil, nil); l != nil || err != nil {
		t.Fatalf("first caller: %v %v, want its turn at once", l, err)
	}
	released := make(chan *lock.Lease, 1)
	second := enterAsync(t, g, ctx, "k", released)
	third := enterAsync(t, g, ctx, "k", released)
	g.Exit("k")
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	select {
	case <-third:
		t.Fatal("the third caller passed before the second exited")
	case <-time.After(20 * time.Millisecond):
	}
	g.Exit("k")
	if err := <-third; err != nil {
		t.Fatal(err)
	}
	g.Exit("k")
	if g.queued("k") != -1 {
		t.Fatal("the key's state outlived its last caller")
	}
}

// TestHandoffLimit: a held lease is handed to the next waiter at most
// maxHandoffs times in a row.
func TestHandoffLimit(t *testing.T) {
	g := New(2)
	ctx := context.Background()
	g.Enter(ctx, nil, "k", lock.AcquireOptions{}, nil, nil)
	cur := grant("k", "h0")
	g.Hold(cur, false)
	released := make(chan *lock.Lease, 1)
	for i := 1; i <= 3; i++ {
		enterAsync(t, g, ctx, "k", released)
		tn := g.TakeHandoff(cur)
		if i == 3 {
			if tn != nil {
				t.Fatal("a third handoff in a row")
			}
			return
		}
		if tn == nil {
			t.Fatalf("handoff %d refused", i)
		}
		next := grant("k", "h"+string(rune('0'+i)))
		g.HandOver(tn, cur, next)
		cur = next
	}
}

// TestGiveUpPassesTurn: a waiter that gives up leaves the queue, and the
// next one gets the turn.
func TestGiveUpPassesTurn(t *testing.T) {
	g := New(8)
	g.Enter(context.Background(), nil, "k", lock.AcquireOptions{}, nil, nil)
	released := make(chan *lock.Lease, 1)
	ctx, cancel := context.WithCancel(context.Background())
	quitter := enterAsync(t, g, ctx, "k", released)
	next := enterAsync(t, g, context.Background(), "k", released)
	cancel()
	if err := <-quitter; !errors.Is(err, context.Canceled) {
		t.Fatalf("quitter: %v", err)
	}
	g.Exit("k")
	if err := <-next; err != nil {
		t.Fatal(err)
	}
}
