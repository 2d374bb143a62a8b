package soak

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
)

// Counts are what the workload did, in all: every kind of churn the soak
// puts on the cluster, and the errors it met (faults make some; each is
// counted by its kind).
type Counts struct {
	ConnsOpened       int64            `json:"connsOpened"`
	ConnsClosed       int64            `json:"connsClosed"`
	Acquired          int64            `json:"acquired"`
	Released          int64            `json:"released"`
	LeftToExpire      int64            `json:"leftToExpire"`
	SessionsOpened    int64            `json:"sessionsOpened"`
	SessionsClosed    int64            `json:"sessionsClosed"`
	SessionsAbandoned int64            `json:"sessionsAbandoned"`
	WatchesOpened     int64            `json:"watchesOpened"`
	WatchEvents       int64            `json:"watchEvents"`
	Errors            map[string]int64 `json:"errors"`
}

// workload is the soak's clients: lockers that take, hold and release
// keys of a small set (so that waits queue), some leases left to expire;
// session clients that open a session, take keys in it, and close it or
// drop their connection without closing it (the session then expires on
// the cluster); watchers that watch a key for a while and go. Every
// client works over a connection of its own, which it closes and opens
// again every few dozen operations.
type workload struct {
	addrs []string
	ttl   time.Duration
	keys  []string
	quiet *slog.Logger

	connsOpened, connsClosed, acquired, released, leftToExpire atomic.Int64
	sessOpened, sessClosed, sessAbandoned, watches, events     atomic.Int64

	emu  sync.Mutex
	errs map[string]int64
}

func newWorkload(addrs []string, ttl time.Duration, keys int) *workload {
	w := &workload{addrs: addrs, ttl: ttl, errs: map[string]int64{},
		quiet: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for i := range keys {
		w.keys = append(w.keys, fmt.Sprintf("soak/k%d", i))
	}
	return w
}

// run starts clients clients (half lockers, a quarter each session
// clients and watchers, at least one of each) and returns once ctx has
// ended and every client has closed its connection.
func (w *workload) run(ctx context.Context, clients int, seed uint64) {
	var wg sync.WaitGroup
	sessions, watchers := max(clients/4, 1), max(clients/4, 1)
	lockers := max(clients-sessions-watchers, 1)
	for i := range lockers + sessions + watchers {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		f := w.locker
		switch {
		case i >= lockers+sessions:
			f = w.watcher
		case i >= lockers:
			f = w.sessioner
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				f(ctx, rng, fmt.Sprintf("soak-%d", i))
			}
		}()
	}
	wg.Wait()
}

func (w *workload) counts() Counts {
	w.emu.Lock()
	errs := make(map[string]int64, len(w.errs))
	for k, v := range w.errs {
		errs[k] = v
	}
	w.emu.Unlock()
	return Counts{ConnsOpened: w.connsOpened.Load(), ConnsClosed: w.connsClosed.Load(),
		Acquired: w.acquired.Load(), Released: w.released.Load(), LeftToExpire: w.leftToExpire.Load(),
		SessionsOpened: w.sessOpened.Load(), SessionsClosed: w.sessClosed.Load(),
		SessionsAbandoned: w.sessAbandoned.Load(), WatchesOpened: w.watches.Load(),
		WatchEvents: w.events.Load(), Errors: errs}
}

// fail counts err under op and its kind, unless the run is ending (an
// operation the end of the run cut short is no error of the cluster's).
func (w *workload) fail(ctx context.Context, op string, err error) {
	if ctx.Err() != nil {
		return
	}
	w.emu.Lock()
	w.errs[op+":"+provision.ErrorKind(err)]++
	w.emu.Unlock()
}

// connect opens a client on a connection of its own; nil when it could
// not (counted).
func (w *workload) connect(ctx context.Context, id string) *client.Client {
	c, err := client.New(w.addrs, client.Options{ClientID: id, RequestTimeout: 5 * time.Second,
		Logger: w.quiet, SessionTTL: w.ttl})
	if err != nil {
		w.fail(ctx, "connect", err)
		provision.SleepCtx(ctx, time.Second)
		return nil
	}
	w.connsOpened.Add(1)
	return c
}

func (w *workload) disconnect(c *client.Client) {
	c.Close()
	w.connsClosed.Add(1)
}

// locker is one connection's life of a locking client: 20 to 60
// acquisitions of keys of the shared set, each held 20 to 200 ms and
// released, but one in ten left to expire.
func (w *workload) locker(ctx context.Context, rng *rand.Rand, id string) {
	c := w.connect(ctx, id)
	if c == nil {
		return
	}
	defer w.disconnect(c)
	for n := 20 + rng.IntN(41); n > 0 && ctx.Err() == nil; n-- {
		actx, cancel := context.WithTimeout(ctx, 2*w.ttl)
		l, err := c.Acquire(actx, provision.Pick(rng, w.keys), lock.AcquireOptions{TTL: w.ttl})
		cancel()
		if err != nil {
			w.fail(ctx, "acquire", err)
			provision.SleepCtx(ctx, provision.Between(rng, 100*time.Millisecond, 300*time.Millisecond))
			continue
		}
		w.acquired.Add(1)
		provision.SleepCtx(ctx, provision.Between(rng, 20*time.Millisecond, 200*time.Millisecond))
		if rng.IntN(10) == 0 {
			w.leftToExpire.Add(1)
		} else {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.ttl)
			if err := c.Release(rctx, l); err != nil {
				w.fail(ctx, "release", err)
			} else {
				w.released.Add(1)
			}
			cancel()
		}
		provision.SleepCtx(ctx, provision.Between(rng, 10*time.Millisecond, 100*time.Millisecond))
	}
}

// sessioner is one session's life: opened on a new connection, one or two
// keys taken in it and held 0.5 to 3 s, then the session closed, or, one
// time in three, the connection dropped with the session open, which then
// expires on the cluster a TTL later with its leases.
func (w *workload) sessioner(ctx context.Context, rng *rand.Rand, id string) {
	c := w.connect(ctx, id)
	if c == nil {
		return
	}
	defer w.disconnect(c)
	octx, cancel := context.WithTimeout(ctx, 2*w.ttl)
	s, err := c.OpenSession(octx, lock.SessionOptions{TTL: w.ttl})
	cancel()
	if err != nil {
		w.fail(ctx, "open-session", err)
		provision.SleepCtx(ctx, provision.Between(rng, 100*time.Millisecond, 300*time.Millisecond))
		return
	}
	w.sessOpened.Add(1)
	kctx, stopKeepAlive := context.WithCancel(ctx)
	kdone := make(chan struct{})
	go func() {
		defer close(kdone)
		lock.KeepSessionAlive(kctx, c, s)
	}()
	defer func() { stopKeepAlive(); <-kdone }()
	for range 1 + rng.IntN(2) {
		actx, cancel := context.WithTimeout(ctx, 2*w.ttl)
		_, err := c.Acquire(actx, provision.Pick(rng, w.keys), lock.AcquireOptions{Session: s})
		cancel()
		if err != nil {
			w.fail(ctx, "acquire-in-session", err)
			continue
		}
		w.acquired.Add(1)
	}
	provision.SleepCtx(ctx, provision.Between(rng, 500*time.Millisecond, 3*time.Second))
	if rng.IntN(3) == 0 {
		w.sessAbandoned.Add(1) // Close (deferred) drops the connection, not the session
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.ttl)
	defer cancel()
	if err := c.CloseSession(cctx, s); err != nil {
		w.fail(ctx, "close-session", err)
		return
	}
	w.sessClosed.Add(1)
}

// watcher is one watch's life: a key of the shared set watched for 2 to
// 10 s on a new connection, its events counted, then the watch and the
// connection closed.
func (w *workload) watcher(ctx context.Context, rng *rand.Rand, id string) {
	c := w.connect(ctx, id)
	if c == nil {
		return
	}
	defer w.disconnect(c)
	wctx, cancel := context.WithTimeout(ctx, provision.Between(rng, 2*time.Second, 10*time.Second))
	defer cancel()
	ch, err := c.Watch(wctx, provision.Pick(rng, w.keys))
	if err != nil {
		w.fail(ctx, "watch", err)
		provision.SleepCtx(ctx, provision.Between(rng, 100*time.Millisecond, 300*time.Millisecond))
		return
	}
	w.watches.Add(1)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return
			}
			if ev.Type == lock.EventError {
				w.fail(ctx, "watch", ev.Err)
				return
			}
			w.events.Add(1)
		case <-wctx.Done():
			return
		}
	}
}
