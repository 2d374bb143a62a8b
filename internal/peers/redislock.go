package peers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// DefaultRedislockRetry is the pause between Obtain's attempts while the
// key is held: redislock.LinearBackoff of this, as its README's example
// waits.
const DefaultRedislockRetry = 100 * time.Millisecond

// RedislockConfig configures a Redislock.
type RedislockConfig struct {
	// Addr is the one Redis server (host:port).
	Addr string
	// Retry is the LinearBackoff pause of Obtain while the key is held.
	// Zero means DefaultRedislockRetry.
	Retry time.Duration
	// RequestTimeout bounds Release, Renew and TryAcquire when the
	// caller's context has no deadline. Zero means 5 s.
	RequestTimeout time.Duration
	// ClientID is the default owner of leases. Empty means a random
	// "redislock-…" id.
	ClientID string
}

// Redislock is a lock.Locker on github.com/bsm/redislock over one Redis
// (single-instance locking: SET NX PX, released and refreshed by scripts
// that check the lock's random token). Acquire is Obtain with a
// redislock.LinearBackoff retry strategy, called again while the caller's
// context lasts (Obtain gives up after the lock's TTL when the context has
// no deadline); TryAcquire is Obtain without retries. Release is
// Lock.Release and Renew is Lock.Refresh; the *redislock.Lock of each
// grant is kept by its lease's handle, so a lease works only through the
// Locker that granted it.
//
// Redislock has no fencing token (leases carry Token 0), no FIFO order
// (waiters poll), and no way to name a holder (Inspect returns
// ErrUnsupported). Its keys expire at their TTL; a lease's deadline counts
// from just before the attempt that obtained it (see pacedRetry). An
// Obtain that succeeds as the caller's context ends is released.
type Redislock struct {
	cfg  RedislockConfig
	rdb  *redis.Client
	c    *redislock.Client
	life *life

	mu   sync.Mutex
	held map[string]*redislock.Lock // by lease handle
}

var (
	_ lock.Locker              = (*Redislock)(nil)
	_ interface{ Caps() Caps } = (*Redislock)(nil)
)

// NewRedislock returns a Redislock on the Redis of cfg (connecting
// lazily).
func NewRedislock(cfg RedislockConfig) (*Redislock, error) {
	if cfg.Addr == "" {
		return nil, errors.New("peers: RedislockConfig.Addr: a Redis address is required")
	}
	if cfg.Retry < 0 || cfg.RequestTimeout < 0 {
		return nil, errors.New("peers: RedislockConfig: Retry and RequestTimeout must not be negative")
	}
	if cfg.Retry == 0 {
		cfg.Retry = DefaultRedislockRetry
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "redislock-" + lock.NewHandle()[:12]
	}
	rdb := redis.NewClient(&redis.Options{Addr: cfg.Addr})
	return &Redislock{
		cfg: cfg, rdb: rdb, c: redislock.New(rdb), life: newLife(),
		held: make(map[string]*redislock.Lock),
	}, nil
}

// Caps: expiring keys, nothing else.
func (*Redislock) Caps() Caps { return Caps{TTL: true} }

// ClientID is the default owner of this Locker's leases.
func (r *Redislock) ClientID() string { return r.cfg.ClientID }

// Acquire implements lock.Locker: Obtain with LinearBackoff until ctx
// ends.
func (r *Redislock) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return r.life.Acquire(key, opts, r.cfg.ClientID, func(opts lock.AcquireOptions) (*lock.Lease, error) {
		if err := refuse("redislock", opts); err != nil {
			return nil, err
		}
		return r.acquire(ctx, key, opts, false)
	})
}

// TryAcquire implements lock.Locker: one Obtain without retries.
func (r *Redislock) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return r.life.Acquire(key, opts, r.cfg.ClientID, func(opts lock.AcquireOptions) (*lock.Lease, error) {
		if err := refuse("redislock", opts); err != nil {
			return nil, err
		}
		return r.acquire(ctx, key, opts, true)
	})
}

func (r *Redislock) acquire(ctx context.Context, key string, opts lock.AcquireOptions, try bool) (*lock.Lease, error) {
	wctx, cancel := r.life.join(ctx)
	defer cancel()
	for {
		var (
			l   *redislock.Lock
			err error
		)
		retry := &pacedRetry{RetryStrategy: redislock.LinearBackoff(r.cfg.Retry), last: time.Now()}
		if try {
			rctx, rcancel := bounded(wctx, r.cfg.RequestTimeout)
			l, err = r.c.Obtain(rctx, key, opts.TTL, nil)
			rcancel()
		} else {
			l, err = r.c.Obtain(wctx, key, opts.TTL, &redislock.Options{RetryStrategy: retry})
		}
		sent := retry.last
		if err == nil && wctx.Err() != nil {
			rctx, rcancel := context.WithTimeout(context.Background(), cleanupTimeout)
			l.Release(rctx) // granted as the caller gave up
			rcancel()
			return nil, r.life.fail(ctx, "redislock", "acquire", key, nil)
		}
		if err == nil {
			lease := kit.NewLease(kit.Grant{
				Key: key, Owner: opts.Owner, Handle: lock.NewHandle(), Value: opts.Value,
				TTL: opts.TTL, Sent: sent,
			})
			r.mu.Lock()
			r.held[lease.Handle] = l
			r.mu.Unlock()
			lease.AfterEnd(func() { r.forget(lease) })
			if opts.AutoRenew {
				r.life.autoRenew(r, lease)
			}
			return lease, nil
		}
		switch {
		case wctx.Err() != nil:
			return nil, r.life.fail(ctx, "redislock", "acquire", key, err)
		case try && errors.Is(err, redislock.ErrNotObtained):
			return nil, &lock.HeldError{Key: key}
		case errors.Is(err, redislock.ErrNotObtained), errors.Is(err, context.DeadlineExceeded):
			// Obtain gave up (its own deadline of one TTL): ask again.
		default:
			return nil, r.life.fail(ctx, "redislock", "acquire", key, err)
		}
	}
}

// pacedRetry is a redislock.RetryStrategy that notes when Obtain last
// asked it for a pause: the attempt after that pause, which may be the
// one that obtains the lock, is sent later. That instant is the grant's
// Sent, so that the lease's deadline counts from before the successful
// attempt and not from the start of a wait that may have lasted most of
// the TTL. It is called by Obtain's goroutine only.
type pacedRetry struct {
	redislock.RetryStrategy
	last time.Time
}

func (p *pacedRetry) NextBackoff() time.Duration {
	p.last = time.Now()
	return p.RetryStrategy.NextBackoff()
}

// forget drops the Lock of a lease that ended.
func (r *Redislock) forget(lease *lock.Lease) {
	r.mu.Lock()
	delete(r.held, lease.Handle)
	r.mu.Unlock()
}

// lockOf is the Lock of lease, if this Locker granted it and it has not
// ended.
func (r *Redislock) lockOf(lease *lock.Lease) *redislock.Lock {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.held[lease.Handle]
	if l == nil || l.Key() != lease.Key {
		return nil
	}
	return l
}

// Release implements lock.Locker with Lock.Release
// (redislock.ErrLockNotHeld is lock.ErrNotHeld).
func (r *Redislock) Release(ctx context.Context, lease *lock.Lease) error {
	return r.life.Release(lease, func() error { return r.release(ctx, lease) })
}

func (r *Redislock) release(ctx context.Context, lease *lock.Lease) error {
	l := r.lockOf(lease)
	if l == nil {
		return kit.Released(lease, false)
	}
	rctx, cancel := bounded(ctx, r.cfg.RequestTimeout)
	defer cancel()
	err := l.Release(rctx)
	switch {
	case err == nil:
		return kit.Released(lease, true)
	case errors.Is(err, redislock.ErrLockNotHeld):
		return kit.Released(lease, false)
	default:
		return r.life.fail(ctx, "redislock", "release", lease.Key, err)
	}
}

// Renew implements lock.Locker with Lock.Refresh
// (redislock.ErrNotObtained is lock.ErrNotHeld).
func (r *Redislock) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	return r.life.Renew(lease, ttl, func(ttl time.Duration) error { return r.renew(ctx, lease, ttl) })
}

func (r *Redislock) renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	l := r.lockOf(lease)
	if l == nil {
		return kit.Renewed(lease, time.Now(), ttl, false)
	}
	rctx, cancel := bounded(ctx, r.cfg.RequestTimeout)
	defer cancel()
	sent := time.Now()
	err := l.Refresh(rctx, ttl, nil)
	switch {
	case err == nil:
		return kit.Renewed(lease, sent, ttl, true)
	case errors.Is(err, redislock.ErrNotObtained):
		return kit.Renewed(lease, sent, ttl, false)
	default:
		return r.life.fail(ctx, "redislock", "renew", lease.Key, err)
	}
}

// Inspect returns ErrUnsupported: redislock cannot name a holder.
func (r *Redislock) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	return r.life.Inspect(key, func() (*lock.LockInfo, error) {
		return nil, fmt.Errorf("redislock: inspect %q: %w", key, ErrUnsupported)
	})
}

// Close implements lock.Locker: waiting acquisitions return
// lock.ErrClosed, auto-renewal stops and the connection closes; held keys
// expire at their TTL unless released first.
func (r *Redislock) Close() error {
	if !r.life.Close() {
		return nil
	}
	return r.rdb.Close()
}
