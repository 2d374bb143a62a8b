package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Acquire implements lock.Locker: it waits, across reconnects and leader
// changes, until the key is granted or ctx ends. When ctx ends it cancels
// the wait on the gateway, releases a grant that raced in, and returns an
// error matching ctx.Err().
func (c *Client) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return c.acquire(ctx, key, opts, true)
}

// TryAcquire implements lock.Locker: one attempt (re-sent with the same
// lock token if the connection fails before the answer). A held key gives
// a *lock.HeldError naming the holder.
func (c *Client) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return c.acquire(ctx, key, opts, false)
}

// errLostAtOnce: a grant that arrived too late to use was refused renewal.
var errLostAtOnce = errors.New("grant expired before it could be renewed")

func (c *Client) acquire(ctx context.Context, key string, opts lock.AcquireOptions, wait bool) (*lock.Lease, error) {
	if !c.enter() {
		return nil, lock.ErrClosed
	}
	defer c.leave()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if _, err := kit.Normalize(opts, key, c.opts.ClientID); err != nil {
		return nil, err // before a session is opened for it
	}
	return waitOutRateLimits(c, ctx, wait, func() string { return fmt.Sprintf("acquire %q", key) }, func() (*lock.Lease, error) {
		return withOwnSession(c, ctx, opts, func(opts lock.AcquireOptions) (*lock.Lease, error) {
			return c.acquireIn(ctx, key, opts, wait)
		})
	})
}

// waitOutRateLimits runs try, an acquire, and with wait (Acquire,
// AcquireAll) tries again after each rate_limited answer — to the acquire,
// or to the open of the client's session it needed — once the time the
// gateway named has passed (the backoff when it named none), until ctx
// ends: then the error matches ctx.Err() and the last refusal. Without
// wait the *RateLimitedError is returned. Nothing was done for a refused
// request, so the next try is a new one. what names the acquire in errors
// and logs (built only then).
func waitOutRateLimits[T any](c *Client, ctx context.Context, wait bool, what func() string, try func() (T, error)) (T, error) {
	for n := 1; ; n++ {
		got, err := try()
		var rl *RateLimitedError
		if !wait || !errors.As(err, &rl) {
			return got, err
		}
		d := rl.RetryIn
		if d <= 0 {
			d, _ = c.opts.Backoff.Backoff(n)
		}
		c.log.Debug("lockgate client: rate-limited by the gateway; waiting to try again", "what", what(), "wait", d)
		t := time.NewTimer(d)
		select {
		case <-t.C:
			continue
		case <-ctx.Done():
		case <-c.ctx.Done():
		}
		t.Stop()
		var zero T
		return zero, c.gaveUp(ctx, ctx, what(), err)
	}
}

// acquireIn is acquire with the session, if any, chosen.
func (c *Client) acquireIn(ctx context.Context, key string, opts lock.AcquireOptions, wait bool) (*lock.Lease, error) {
	opts, err := kit.Normalize(opts, key, c.opts.ClientID)
	if err != nil {
		return nil, err
	}
	if c.cache != nil {
		hit, stale := c.cache.take(key, opts)
		if hit != nil {
			return hit, nil
		}
		if stale != nil {
			c.releaseQuietly(stale) // or this acquire would wait behind it
		}
	}
	octx, cancel := c.acquireCtx(ctx, wait)
	defer cancel()
	handle := opts.Handle
	for {
		if handle == "" {
			handle = lock.NewHandle()
		}
		defer c.expect(handle)()
		k := &call{wait: wait, grantable: true, op: "try-acquire",
			req: acquireRequest(wire.Request{CommandType: wire.CmdTryAcquire, Key: key}, opts, handle)}
		if wait {
			k.req.CommandType = wire.CmdAcquire
			k.op = "acquire"
		}
		r, err := c.do(ctx, octx, k)
		if err != nil {
			return nil, err
		}
		if r.Type != wire.TypeGrant {
			return nil, unexpected(r, key, wire.TypeGrant)
		}
		lease, err := c.lease(grantOf(r), key, opts, k.first)
		if errors.Is(err, errLostAtOnce) && wait && opts.Handle == "" {
			c.log.Info("lockgate client: grant expired on arrival; queueing again", "key", key)
			handle = ""
			continue
		}
		if err == nil && c.cache != nil && cacheable(opts) {
			c.cache.hold(lease, opts)
		}
		return lease, err
	}
}

// acquireCtx is the context an acquire's calls run under: ctx itself for
// a wait (ctx alone ends it), bounded by RequestTimeout (opCtx) for a try.
func (c *Client) acquireCtx(ctx context.Context, wait bool) (context.Context, context.CancelFunc) {
	if wait {
		return ctx, func() {}
	}
	return c.opCtx(ctx)
}

// acquireRequest is req (an acquire's command and key or keys) with the
// rest of what an acquire under handle sends: opts's owner, TTL and value,
// and the primitives' options as they are (mode "" for exclusive, permits,
// lockDelayMs: the gateway answers unsupported when its backend lacks one;
// none of them is cached).
func acquireRequest(req wire.Request, opts lock.AcquireOptions, handle string) wire.Request {
	req.ClientID, req.TTL, req.LockToken = opts.Owner, ms(opts.TTL), handle
	if opts.Mode != lock.ModeExclusive {
		req.Mode = opts.Mode.String()
	}
	req.Permits, req.LockDelayMS = opts.Permits, ms(opts.LockDelay)
	if opts.Session != nil {
		req.SessionID = opts.Session.ID
	}
	if opts.Value != nil {
		v := string(opts.Value)
		req.Value = &v
	}
	return req
}

// cacheable reports whether a lease acquired with opts may be kept by the
// lease cache: an exclusive lease without lock-delay. A shared or
// semaphore lease is not (the cache keeps one lease per key, and the
// gateway's "wanted" push tells a reader of waiting writers only; a kept
// permit would also count against the semaphore), nor one with a
// lock-delay (a kept lease that expired unseen would hold the key for
// its delay).
func cacheable(opts lock.AcquireOptions) bool {
	return kit.Needs(opts) == 0
}

// grantOf is a grant reply's lease.
func grantOf(r *reply) wire.Grant {
	return wire.Grant{Key: r.Key, FencingToken: r.FencingToken, LockToken: r.LockToken, TTL: r.TTL,
		Owner: r.Owner, Mode: r.Mode, Permits: r.Permits, Wanted: r.Wanted, SessionID: r.SessionID}
}

// lease turns a grant into a Lease. sent is the send time of the first copy
// of the acquire: the TTL started on the server after it. If less than half
// the TTL is left of sent + ttl (the grant came after a long wait), the
// lease is renewed at once and the renewal's send time used instead.
func (c *Client) lease(r wire.Grant, key string, opts lock.AcquireOptions, sent time.Time) (*lock.Lease, error) {
	if r.LockToken == "" || r.FencingToken == nil {
		return nil, fmt.Errorf("lockgate client: acquire %q: grant without lockToken or fencingToken: %w", key, lock.ErrUnavailable)
	}
	ttl := time.Duration(ms(opts.TTL)) * time.Millisecond
	if got := time.Duration(r.TTL) * time.Millisecond; got > 0 && got < ttl {
		ttl = got
	}
	owner := r.Owner
	if owner == "" {
		owner = opts.Owner
	}
	token := lock.Token(r.FencingToken.Value)
	if s := opts.Session; s != nil {
		return c.sessionLease(r, key, owner, token, opts)
	}
	if time.Until(sent.Add(ttl)) < ttl/2 {
		// The renewal must not depend on the caller's context: the grant
		// is ours now, and giving up here would leave it behind.
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.RequestTimeout)
		rsent, held, err := c.renew(ctx, ctx, key, r.LockToken, token, ttl)
		cancel()
		switch {
		case err != nil:
			c.log.Warn("lockgate client: renewing a late grant failed; its deadline stays short", "key", key, "err", err)
		case !held:
			return nil, fmt.Errorf("lockgate client: acquire %q: %w: %w", key, lock.ErrNotAcquired, errLostAtOnce)
		default:
			sent = rsent
		}
	}
	mode := opts.Mode // normalized: a semaphore's is shared
	if m, err := lock.ParseMode(r.Mode); r.Mode != "" && err == nil {
		mode = m // the gateway's word; an unknown mode keeps the asked one
	}
	permits := opts.Permits
	if r.Permits != 0 {
		permits = r.Permits
	}
	lease := kit.NewLease(kit.Grant{Key: key, Owner: owner, Token: token, Handle: r.LockToken, Value: opts.Value, TTL: ttl, Sent: sent,
		Mode: mode, Permits: permits})
	if r.Wanted {
		kit.MarkWanted(lease)
	}
	c.track(lease)
	if opts.AutoRenew {
		go lock.KeepAlive(c.ctx, c, lease)
	}
	return lease, nil
}

// Renew implements lock.Locker.
func (c *Client) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	if !c.enter() {
		return lock.ErrClosed
	}
	defer c.leave()
	ttl, err := kit.ValidateRenew(lease, ttl)
	if err != nil {
		return err
	}
	if lease.Session() != nil {
		return c.renewInSession(ctx, lease)
	}
	ttl = time.Duration(ms(ttl)) * time.Millisecond
	octx, cancel := c.opCtx(ctx)
	defer cancel()
	sent, held, err := c.renew(ctx, octx, lease.Key, lease.Handle, lease.Token, ttl)
	if err != nil {
		return err
	}
	if err := kit.Renewed(lease, sent, ttl, held); err != nil {
		return err
	}
	c.track(lease)
	return nil
}

// renew asks for (key, handle, token) to be extended to ttl. It returns the
// send time of the answered copy, and whether the lease was held.
func (c *Client) renew(parent, ctx context.Context, key, handle string, token lock.Token, ttl time.Duration) (time.Time, bool, error) {
	k := &call{op: "renew", req: wire.Request{
		CommandType: wire.CmdRenew, Key: key, LockToken: handle,
		FencingToken: &wire.FencingToken{Key: key, Value: uint64(token)}, TTL: ms(ttl),
	}}
	r, err := c.do(parent, ctx, k)
	if err != nil {
		return time.Time{}, false, err
	}
	switch {
	case r.Type == wire.TypeRenewed:
		return k.last, true, nil
	case r.code() == wire.CodeNotHeld:
		return k.last, false, nil
	}
	return time.Time{}, false, unexpected(r, key, wire.TypeRenewed)
}

// Release implements lock.Locker. See the package documentation for how a
// not_held answer to a re-sent release is judged. With Options.CacheLeases
// a lease nobody else wants is kept in the cache instead (see there).
func (c *Client) Release(ctx context.Context, lease *lock.Lease) error {
	if err := kit.ValidateLease(lease); err != nil {
		return err
	}
	if c.cache != nil {
		if handled, err := c.cache.put(lease, c.signalsWanted.Load()); handled {
			return err
		}
	}
	return c.release(ctx, lease)
}

// release releases lease on the gateway.
func (c *Client) release(ctx context.Context, lease *lock.Lease) error {
	if !c.enter() {
		return lock.ErrClosed
	}
	defer c.leave()
	if err := kit.ValidateLease(lease); err != nil {
		return err
	}
	octx, cancel := c.opCtx(ctx)
	defer cancel()
	var alive bool // the lease was alive by our clock when the answered copy went out
	k := &call{op: "release", req: wire.Request{
		CommandType: wire.CmdRelease, Key: lease.Key, LockToken: lease.Handle,
		FencingToken: &wire.FencingToken{Key: lease.Key, Value: uint64(lease.Token)}, Ack: true,
	}}
	k.onSend = func(now time.Time) { alive = lease.Err() == nil && now.Before(lease.Deadline()) }
	r, err := c.do(ctx, octx, k)
	if err != nil {
		return err
	}
	switch {
	case r.Type == wire.TypeReleased:
		return kit.Released(lease, true)
	case r.code() == wire.CodeNotHeld:
		if k.prior && alive {
			// An earlier copy may have reached the gateway before its
			// connection failed, and nothing else can have ended a lease
			// that was alive by our clock: that copy freed it.
			c.log.Debug("lockgate client: re-sent release answered not_held; the earlier copy released it", "key", lease.Key, "token", lease.Token)
			return kit.Released(lease, true)
		}
		if k.prior {
			err := fmt.Errorf("%w: release %q (token %d): outcome unknown: the re-sent copy was answered not_held after the lease's deadline, "+
				"so an earlier copy may have freed it or it may have expired first", lock.ErrUnavailable, lease.Key, lease.Token)
			lease.End(err)
			return err
		}
		return kit.Released(lease, false)
	}
	return unexpected(r, lease.Key, wire.TypeReleased)
}

// Inspect implements lock.Locker.
func (c *Client) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	if !c.enter() {
		return nil, lock.ErrClosed
	}
	defer c.leave()
	if err := kit.ValidateKey(key); err != nil {
		return nil, err
	}
	octx, cancel := c.opCtx(ctx)
	defer cancel()
	k := &call{op: "inspect", req: wire.Request{CommandType: wire.CmdInspect, Key: key}}
	r, err := c.do(ctx, octx, k)
	if err != nil {
		return nil, err
	}
	if r.Type != wire.TypeInfo {
		return nil, unexpected(r, key, wire.TypeInfo)
	}
	info := &lock.LockInfo{Key: key, Owner: r.Owner, Token: r.token(), Waiters: -1, Permits: r.Permits}
	if r.Mode != "" {
		info.Mode, _ = lock.ParseMode(r.Mode)
	}
	if r.Value != nil {
		info.Value = []byte(*r.Value)
	}
	if r.ExpiresIn != nil {
		info.Expires = r.arrived.Add(time.Duration(*r.ExpiresIn) * time.Millisecond)
	}
	if r.Waiters != nil {
		info.Waiters = *r.Waiters
	}
	for _, h := range r.Holders {
		hi := lock.HolderInfo{Owner: h.Owner}
		if h.FencingToken != nil {
			hi.Token = lock.Token(h.FencingToken.Value)
		}
		if h.Value != nil {
			hi.Value = []byte(*h.Value)
		}
		if h.ExpiresIn != nil {
			hi.Expires = r.arrived.Add(time.Duration(*h.ExpiresIn) * time.Millisecond)
		}
		info.Holders = append(info.Holders, hi)
	}
	return info, nil
}

// unexpected is the error of an answer that is an error reply, or of a type
// the request does not expect.
func unexpected(r *reply, key, want string) error {
	if r.Type == wire.TypeError {
		return replyError(r, key)
	}
	return &ServerError{Code: wire.CodeInternal, Message: fmt.Sprintf("answered %q where %q was expected", r.Type, want)}
}
