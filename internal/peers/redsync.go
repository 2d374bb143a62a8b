package peers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// redsyncDriftFactor is redsync's default clock-drift factor, which its
// Mutex.Until subtracts.
const redsyncDriftFactor = 0.01

// RedsyncConfig configures a Redsync.
type RedsyncConfig struct {
	// Addrs are the independent Redis masters (host:port); the quorum is a
	// majority of them.
	Addrs []string
	// Tries and RetryDelay are redsync's WithTries and WithRetryDelay;
	// zero keeps redsync's defaults (32 tries, a random 50–250 ms delay).
	Tries      int
	RetryDelay time.Duration
	// RequestTimeout bounds Release, Renew and TryAcquire when the
	// caller's context has no deadline. Zero means 5 s.
	RequestTimeout time.Duration
	// ClientID is the default owner of leases. Empty means a random
	// "redsync-…" id.
	ClientID string
}

// Redsync is a lock.Locker on github.com/go-redsync/redsync/v4 (Redlock as
// most Go users run it) with a go-redis v9 pool per Redis master. Each
// acquisition is a redsync.Mutex with WithExpiry(the lease's TTL) and
// redsync's default tries and retry delay; Acquire calls LockContext again
// whenever redsync gives up after its tries, until the caller's context
// ends. The Mutex's value (its random lock value) is the lease's handle, so
// that Release (UnlockContext) and Renew (ExtendContext) work from the
// Lease alone, through a Mutex built with WithValue.
//
// Redsync has no fencing token (leases carry Token 0), no FIFO order
// (waiters poll with random delays; whoever polls first after a release
// wins) and no way to name a holder (Inspect returns ErrUnsupported).
// Its expiry is its TTL: a holder that stops loses the lock when the keys
// expire. The lease's deadline is redsync's own Until (the expiry counted
// from the start of the successful try, less its drift factor).
//
// A LockContext whose context ends returns redsync.ErrFailed; the wrapper
// returns the context's error. A try that did not reach the quorum
// deletes its partial keys with the caller's context, so when that context
// has ended they stay until they expire: the library leaves them, and so
// does the wrapper. A try that reaches the quorum as the context ends is
// released.
type Redsync struct {
	cfg     RedsyncConfig
	clients []*redis.Client
	rs      *redsync.Redsync
	life    *life
}

var (
	_ lock.Locker              = (*Redsync)(nil)
	_ interface{ Caps() Caps } = (*Redsync)(nil)
)

// NewRedsync returns a Redsync over the Redis masters of cfg (connecting
// lazily).
func NewRedsync(cfg RedsyncConfig) (*Redsync, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("peers: RedsyncConfig.Addrs: at least one Redis address is required")
	}
	if cfg.Tries < 0 || cfg.RetryDelay < 0 || cfg.RequestTimeout < 0 {
		return nil, errors.New("peers: RedsyncConfig: Tries, RetryDelay and RequestTimeout must not be negative")
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "redsync-" + lock.NewHandle()[:12]
	}
	r := &Redsync{cfg: cfg, life: newLife()}
	pools := make([]redsyncredis.Pool, len(cfg.Addrs))
	for i, a := range cfg.Addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		r.clients = append(r.clients, c)
		pools[i] = goredis.NewPool(c)
	}
	r.rs = redsync.New(pools...)
	return r, nil
}

// Caps: expiring keys, nothing else.
func (*Redsync) Caps() Caps { return Caps{TTL: true} }

// ClientID is the default owner of this Locker's leases.
func (r *Redsync) ClientID() string { return r.cfg.ClientID }

// mutex is a redsync Mutex on key with the given expiry and lock value.
func (r *Redsync) mutex(key string, ttl time.Duration, value string, acquire bool) *redsync.Mutex {
	opts := []redsync.Option{redsync.WithExpiry(ttl)}
	if acquire {
		opts = append(opts, redsync.WithGenValueFunc(func() (string, error) { return value, nil }))
		if r.cfg.Tries > 0 {
			opts = append(opts, redsync.WithTries(r.cfg.Tries))
		}
		if r.cfg.RetryDelay > 0 {
			opts = append(opts, redsync.WithRetryDelay(r.cfg.RetryDelay))
		}
	} else {
		opts = append(opts, redsync.WithValue(value))
	}
	return r.rs.NewMutex(key, opts...)
}

// Acquire implements lock.Locker with LockContext, called again each time
// redsync gives up, until ctx ends.
func (r *Redsync) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return r.life.Acquire(key, opts, r.cfg.ClientID, func(opts lock.AcquireOptions) (*lock.Lease, error) {
		if err := refuse("redsync", opts); err != nil {
			return nil, err
		}
		return r.acquire(ctx, key, opts, false)
	})
}

// TryAcquire implements lock.Locker with TryLockContext (one try).
func (r *Redsync) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return r.life.Acquire(key, opts, r.cfg.ClientID, func(opts lock.AcquireOptions) (*lock.Lease, error) {
		if err := refuse("redsync", opts); err != nil {
			return nil, err
		}
		return r.acquire(ctx, key, opts, true)
	})
}

func (r *Redsync) acquire(ctx context.Context, key string, opts lock.AcquireOptions, try bool) (*lock.Lease, error) {
	wctx, cancel := r.life.join(ctx)
	defer cancel()
	handle := lock.NewHandle()
	for {
		m := r.mutex(key, opts.TTL, handle, true)
		var err error
		if try {
			rctx, rcancel := bounded(wctx, r.cfg.RequestTimeout)
			err = m.TryLockContext(rctx)
			rcancel()
		} else {
			err = m.LockContext(wctx)
		}
		if err == nil && wctx.Err() != nil {
			r.unlock(m) // granted as the caller gave up
			return nil, r.life.fail(ctx, "redsync", "acquire", key, nil)
		}
		if err == nil {
			// Until is the start of the successful try plus the expiry
			// less redsync's drift: recover that start as the grant's Sent.
			valid := opts.TTL - time.Duration(float64(opts.TTL)*redsyncDriftFactor)
			lease := kit.NewLease(kit.Grant{
				Key: key, Owner: opts.Owner, Handle: handle, Value: opts.Value,
				TTL: opts.TTL, Sent: m.Until().Add(-valid),
			})
			if opts.AutoRenew {
				r.life.autoRenew(r, lease)
			}
			return lease, nil
		}
		if wctx.Err() != nil {
			return nil, r.life.fail(ctx, "redsync", "acquire", key, err)
		}
		taken := redsyncTaken(err)
		if try {
			if taken || errors.Is(err, redsync.ErrFailed) {
				return nil, &lock.HeldError{Key: key}
			}
			return nil, r.life.fail(ctx, "redsync", "acquire", key, err)
		}
		if !taken && redsyncUnreachable(err) {
			return nil, r.life.fail(ctx, "redsync", "acquire", key, err)
		}
		// redsync gave up after its tries: ask it again.
	}
}

// redsyncTaken reports whether err says that a quorum, or some node, has
// the key locked by someone else.
func redsyncTaken(err error) bool {
	var t *redsync.ErrTaken
	var n *redsync.ErrNodeTaken
	return errors.As(err, &t) || errors.As(err, &n)
}

// redsyncUnreachable reports whether err carries a node's I/O failure.
func redsyncUnreachable(err error) bool {
	var e *redsync.RedisError
	return errors.As(err, &e)
}

// unlock releases a Mutex on a context of its own.
func (r *Redsync) unlock(m *redsync.Mutex) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	m.UnlockContext(ctx)
}

// Release implements lock.Locker with UnlockContext: the keys whose value
// is the lease's handle are deleted. Fewer than a quorum deleted
// (expired, or re-granted) is lock.ErrNotHeld, or lock.ErrUnavailable when
// nodes could not be reached.
func (r *Redsync) Release(ctx context.Context, lease *lock.Lease) error {
	return r.life.Release(lease, func() error { return r.release(ctx, lease) })
}

func (r *Redsync) release(ctx context.Context, lease *lock.Lease) error {
	rctx, cancel := bounded(ctx, r.cfg.RequestTimeout)
	defer cancel()
	ok, err := r.mutex(lease.Key, lease.TTL(), lease.Handle, false).UnlockContext(rctx)
	if !ok && redsyncUnreachable(err) && !redsyncTaken(err) && !errors.Is(err, redsync.ErrLockAlreadyExpired) {
		return r.life.fail(ctx, "redsync", "release", lease.Key, err)
	}
	return kit.Released(lease, ok)
}

// Renew implements lock.Locker with ExtendContext: the keys whose value is
// the lease's handle get ttl again, on a quorum or not at all.
func (r *Redsync) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	return r.life.Renew(lease, ttl, func(ttl time.Duration) error { return r.renew(ctx, lease, ttl) })
}

func (r *Redsync) renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	rctx, cancel := bounded(ctx, r.cfg.RequestTimeout)
	defer cancel()
	m := r.mutex(lease.Key, ttl, lease.Handle, false)
	sent := time.Now()
	ok, err := m.ExtendContext(rctx)
	if !ok && redsyncUnreachable(err) && !redsyncTaken(err) {
		return r.life.fail(ctx, "redsync", "renew", lease.Key, err)
	}
	return kit.Renewed(lease, sent, ttl, ok)
}

// Inspect returns ErrUnsupported: redsync cannot name a holder.
func (r *Redsync) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	return r.life.Inspect(key, func() (*lock.LockInfo, error) {
		return nil, fmt.Errorf("redsync: inspect %q: %w", key, ErrUnsupported)
	})
}

// Close implements lock.Locker: waiting acquisitions return
// lock.ErrClosed, auto-renewal stops and the connections close; held keys
// expire at their TTL unless released first.
func (r *Redsync) Close() error {
	if !r.life.Close() {
		return nil
	}
	var errs []error
	for _, c := range r.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
