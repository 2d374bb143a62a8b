package peers

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// DefaultPGAdvisoryPoolSize is the default number of pooled connections
// of a PGAdvisory: each held or awaited lock pins one, so it bounds the
// keys one Locker holds or waits for at once (sqllock's default pool).
const DefaultPGAdvisoryPoolSize = 16

// PGAdvisoryConfig configures a PGAdvisory.
type PGAdvisoryConfig struct {
	// URL is the pgx connection URL of the database.
	URL string
	// PoolSize is the pool's maximum number of connections. Zero means
	// DefaultPGAdvisoryPoolSize.
	PoolSize int
	// RequestTimeout bounds Release, Renew, TryAcquire and Inspect when the
	// caller's context has no deadline. Zero means 5 s.
	RequestTimeout time.Duration
	// ClientID is the default owner of leases and the connections'
	// application_name, which Inspect reports as the holder. Empty means a
	// random "pg-advisory-…" id.
	ClientID string
}

// PGAdvisory is a lock.Locker on PostgreSQL's session-level advisory
// locks, pg_advisory_lock(bigint), over a pgx/v5 pool. An advisory lock
// belongs to the session that took it, so each acquisition takes a
// connection from the pool and keeps it, holding the lock, until Release
// unlocks it with pg_advisory_unlock and returns it to the pool. Acquire
// waits in SELECT pg_advisory_lock($1); TryAcquire is
// pg_try_advisory_lock.
//
// A lock key becomes the advisory lock's bigint by FNV-1a (64 bits). Two
// keys with the same hash share one lock: a collision costs contention,
// never exclusion. So does any other user of one-argument advisory locks
// in the same database that picks the same number (sqllock uses the
// two-argument form, a separate key space).
//
// Cancellation is pgx's default: a cancelled context closes the
// connection, and pgx (v5.12) sends PostgreSQL a cancel request as it
// does, so the server stops waiting at once (the tests check that the
// waiter leaves the queue while the key is still held). Whatever the
// outcome, a connection whose lock statement failed is closed, never
// returned to the pool: the server ends its session, and with it any lock
// a grant that raced the cancellation took.
//
// Guarantees, as the library gives them: no fencing token (leases carry
// Token 0). No TTL: the lock is held until released or until its session
// ends, so a paused holder keeps it for as long as its TCP connection
// stays up. A lease's TTL and deadline are what the acquisition asked for
// (lock.DefaultTTL and auto-renewal for zero options) and only tell the
// holder when to stop; they do not free the key. Renew extends nothing at
// the server: it checks, on the lease's session, that the lock is still
// held, and moves the lease's deadline. FIFO: PostgreSQL grants a lock to
// its waiters in queue order, and a new request that conflicts with a
// queued waiter queues behind it (the lock manager checks the wait queue
// before granting); the tests check that order across Lockers. Inspect
// reads pg_locks: the holder is the application_name of the session
// holding the lock (the holding Locker's ClientID, not the lease's
// Owner), and the waiters are the sessions queued for it; there is no
// token and no expiry.
type PGAdvisory struct {
	cfg  PGAdvisoryConfig
	pool *pgxpool.Pool
	life *life

	mu   sync.Mutex
	held map[string]*pgHeld // by lease handle
}

var (
	_ lock.Locker              = (*PGAdvisory)(nil)
	_ interface{ Caps() Caps } = (*PGAdvisory)(nil)
)

// pgHeld is one grant: the connection whose session holds the lock.
type pgHeld struct {
	lease *lock.Lease
	conn  *pgxpool.Conn
	id    int64
}

// NewPGAdvisory opens the pool (connecting lazily) and returns a
// PGAdvisory.
func NewPGAdvisory(ctx context.Context, cfg PGAdvisoryConfig) (*PGAdvisory, error) {
	if cfg.PoolSize < 0 || cfg.RequestTimeout < 0 {
		return nil, errors.New("peers: PGAdvisoryConfig: PoolSize and RequestTimeout must not be negative")
	}
	if cfg.PoolSize == 0 {
		cfg.PoolSize = DefaultPGAdvisoryPoolSize
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "pg-advisory-" + lock.NewHandle()[:12]
	}
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("peers: PGAdvisoryConfig.URL: %w", err)
	}
	pcfg.MaxConns = int32(cfg.PoolSize)
	pcfg.ConnConfig.RuntimeParams["application_name"] = cfg.ClientID
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("%w: pg-advisory: %w", lock.ErrUnavailable, err)
	}
	return &PGAdvisory{cfg: cfg, pool: pool, life: newLife(), held: make(map[string]*pgHeld)}, nil
}

// Caps: waiters are granted in queue order and the holding session can be
// named; no token, and no TTL (a lock lives as long as its session).
func (*PGAdvisory) Caps() Caps { return Caps{FIFO: true, Inspect: true} }

// ClientID is the default owner of this Locker's leases.
func (p *PGAdvisory) ClientID() string { return p.cfg.ClientID }

// advisoryID is the advisory lock number of key: FNV-1a, 64 bits.
func advisoryID(key string) int64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return int64(h.Sum64())
}

// destroy closes a pinned connection instead of returning it to the pool:
// its session, and any lock it holds, ends.
func destroy(c *pgxpool.Conn) {
	pc := c.Hijack()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	pc.Close(ctx)
	cancel()
}

// Acquire implements lock.Locker: SELECT pg_advisory_lock($1) on a
// connection of its own, waiting until granted or ctx ends.
func (p *PGAdvisory) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return p.life.Acquire(key, opts, p.cfg.ClientID, func(opts lock.AcquireOptions) (*lock.Lease, error) {
		if err := refuse("pg-advisory", opts); err != nil {
			return nil, err
		}
		return p.acquire(ctx, key, opts, false)
	})
}

// TryAcquire implements lock.Locker with pg_try_advisory_lock.
func (p *PGAdvisory) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return p.life.Acquire(key, opts, p.cfg.ClientID, func(opts lock.AcquireOptions) (*lock.Lease, error) {
		if err := refuse("pg-advisory", opts); err != nil {
			return nil, err
		}
		return p.acquire(ctx, key, opts, true)
	})
}

func (p *PGAdvisory) acquire(ctx context.Context, key string, opts lock.AcquireOptions, try bool) (*lock.Lease, error) {
	wctx, cancel := p.life.join(ctx)
	defer cancel()
	if try {
		var rcancel context.CancelFunc
		wctx, rcancel = bounded(wctx, p.cfg.RequestTimeout)
		defer rcancel()
	}
	conn, err := p.pool.Acquire(wctx)
	if err != nil {
		return nil, p.life.fail(ctx, "pg-advisory", "acquire", key, err)
	}
	id := advisoryID(key)
	sent := time.Now()
	got := true
	if try {
		err = conn.QueryRow(wctx, "SELECT pg_try_advisory_lock($1)", id).Scan(&got)
	} else {
		_, err = conn.Exec(wctx, "SELECT pg_advisory_lock($1)", id)
	}
	if err == nil && wctx.Err() != nil {
		err = wctx.Err() // granted as the caller gave up: the session goes below
	}
	if err != nil {
		destroy(conn)
		return nil, p.life.fail(ctx, "pg-advisory", "acquire", key, err)
	}
	if !got {
		conn.Release()
		return nil, &lock.HeldError{Key: key}
	}
	lease := kit.NewLease(kit.Grant{
		Key: key, Owner: opts.Owner, Handle: lock.NewHandle(), Value: opts.Value,
		TTL: opts.TTL, Sent: sent,
	})
	p.mu.Lock()
	p.held[lease.Handle] = &pgHeld{lease: lease, conn: conn, id: id}
	p.mu.Unlock()
	if opts.AutoRenew {
		p.life.autoRenew(p, lease)
	}
	return lease, nil
}

// take removes and returns the grant of lease, if this Locker holds it.
func (p *PGAdvisory) take(lease *lock.Lease) *pgHeld {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.held[lease.Handle]
	if h == nil || h.lease.Key != lease.Key {
		return nil
	}
	delete(p.held, lease.Handle)
	return h
}

// Release implements lock.Locker: pg_advisory_unlock on the lease's
// session, which then returns to the pool. A lease whose deadline passed
// is still unlocked (the server never freed it) but reported as
// lock.ErrNotHeld, as the contract wants of an expired lease. A session
// that fails the unlock is closed, which frees the lock too.
func (p *PGAdvisory) Release(ctx context.Context, lease *lock.Lease) error {
	return p.life.Release(lease, func() error { return p.release(ctx, lease) })
}

func (p *PGAdvisory) release(ctx context.Context, lease *lock.Lease) error {
	h := p.take(lease)
	if h == nil {
		return kit.Released(lease, false)
	}
	rctx, cancel := bounded(ctx, p.cfg.RequestTimeout)
	defer cancel()
	var unlocked bool
	err := h.conn.QueryRow(rctx, "SELECT pg_advisory_unlock($1)", h.id).Scan(&unlocked)
	if err != nil {
		destroy(h.conn)
		lease.End(fmt.Errorf("%w: %w", lock.ErrNotHeld, err))
		return p.life.fail(ctx, "pg-advisory", "release", lease.Key, err)
	}
	h.conn.Release()
	return kit.Released(lease, unlocked && lease.Err() == nil)
}

// Renew implements lock.Locker. There is nothing to extend: it checks on
// the lease's session that the lock is still held and moves the lease's
// deadline to ttl from now.
func (p *PGAdvisory) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	return p.life.Renew(lease, ttl, func(ttl time.Duration) error { return p.renew(ctx, lease, ttl) })
}

func (p *PGAdvisory) renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	p.mu.Lock()
	h := p.held[lease.Handle]
	p.mu.Unlock()
	if h == nil || h.lease.Key != lease.Key {
		return kit.Renewed(lease, time.Now(), ttl, false)
	}
	rctx, cancel := bounded(ctx, p.cfg.RequestTimeout)
	defer cancel()
	sent := time.Now()
	var held bool
	// The pinned connection is the lease's alone; Release takes it out
	// of the map first, so the two never use it at once unless the caller
	// renews and releases one lease concurrently.
	err := h.conn.QueryRow(rctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
		WHERE pid = pg_backend_pid() AND locktype = 'advisory' AND granted
		  AND objsubid = 1 AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid)`, h.id).Scan(&held)
	if err != nil {
		return p.life.fail(ctx, "pg-advisory", "renew", lease.Key, err)
	}
	return kit.Renewed(lease, sent, ttl, held)
}

// Inspect implements lock.Locker from pg_locks: the holding session's
// application_name is the owner; the sessions waiting for the lock are
// the waiters. There is no token and no expiry.
func (p *PGAdvisory) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	return p.life.Inspect(key, func() (*lock.LockInfo, error) { return p.inspect(ctx, key) })
}

func (p *PGAdvisory) inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	rctx, cancel := bounded(ctx, p.cfg.RequestTimeout)
	defer cancel()
	var holders, waiting int
	var owner *string
	err := p.pool.QueryRow(rctx, `SELECT count(*) FILTER (WHERE l.granted), count(*) FILTER (WHERE NOT l.granted),
			max(a.application_name) FILTER (WHERE l.granted)
		FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND l.objsubid = 1 AND l.classid = (($1::bigint >> 32) & 4294967295)::oid AND l.objid = ($1::bigint & 4294967295)::oid`,
		advisoryID(key)).Scan(&holders, &waiting, &owner)
	if err != nil {
		return nil, p.life.fail(ctx, "pg-advisory", "inspect", key, err)
	}
	if holders == 0 {
		return nil, fmt.Errorf("%w: %q", lock.ErrNotFound, key)
	}
	info := &lock.LockInfo{Key: key, Waiters: waiting}
	if owner != nil {
		info.Owner = *owner
	}
	return info, nil
}

// Close implements lock.Locker: waiting acquisitions return
// lock.ErrClosed and auto-renewal stops. As a lock cannot outlive its
// session, closing the pool frees every lock still held: their leases end
// with lock.ErrNotHeld.
func (p *PGAdvisory) Close() error {
	if !p.life.Close() {
		return nil
	}
	p.mu.Lock()
	held := p.held
	p.held = map[string]*pgHeld{}
	p.mu.Unlock()
	for _, h := range held {
		destroy(h.conn)
		h.lease.End(fmt.Errorf("%w: pg-advisory: the Locker closed, ending the lock's session", lock.ErrNotHeld))
	}
	p.pool.Close()
	return nil
}
