package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/localgate"
)

var (
	//go:embed acquire.lua
	acquireLua string
	//go:embed sync.lua
	syncLua string
	//go:embed renew.lua
	renewLua string
	//go:embed release.lua
	releaseLua string
	//go:embed abort.lua
	abortLua string
	//go:embed inspect.lua
	inspectLua string
	//go:embed handoff.lua
	handoffLua string

	acquireScript = redis.NewScript(acquireLua)
	syncScript    = redis.NewScript(syncLua)
	renewScript   = redis.NewScript(renewLua)
	releaseScript = redis.NewScript(releaseLua)
	abortScript   = redis.NewScript(abortLua)
	inspectScript = redis.NewScript(inspectLua)
	handoffScript = redis.NewScript(handoffLua)
)

// Locker is a lock.Locker over N independent Redis masters (Redlock; N = 1
// is single-Redis locking). It is safe for concurrent use.
type Locker struct {
	cfg    Config
	quorum int
	nodes  []*node

	ctx    context.Context // ends at Close: stops waits and keep-alives
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	ops    sync.WaitGroup // operations and background work using the clients
	chans  map[string]*channelState
	work   chan func() // idle workers take jobs from here (see spawn)
	gate   *localgate.Gate

	// releasing: per key, this Locker's release still in flight on some
	// nodes (Release returns once a quorum answered).
	releasing map[string]*inflight
}

var _ lock.Locker = (*Locker)(nil)

// New connects to the nodes of cfg (lazily: no request is made until the
// first call) and returns a Locker.
func New(cfg Config) (*Locker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	l := &Locker{
		cfg:    cfg,
		quorum: len(cfg.Addrs)/2 + 1,
		ctx:    ctx,
		cancel: cancel,
		chans:  make(map[string]*channelState),
		work:   make(chan func()),
		gate:   localgate.New(MaxLocalHandoffs),

		releasing: make(map[string]*inflight),
	}
	for i, addr := range cfg.Addrs {
		l.nodes = append(l.nodes, newNode(l, i, addr))
	}
	for _, n := range l.nodes {
		n.start()
	}
	return l, nil
}

// Quorum is the number of nodes that must agree: N/2 + 1.
func (l *Locker) Quorum() int { return l.quorum }

// ClientID is the default owner of this Locker's leases.
func (l *Locker) ClientID() string { return l.cfg.ClientID }

// workerIdle is how long an idle worker goroutine waits for a job.
const workerIdle = 10 * time.Second

// spawn runs f on an idle worker goroutine, or on a new one. Workers live
// on between jobs so that their stacks, grown by the Redis client, are
// reused instead of being grown again for every request.
func (l *Locker) spawn(f func()) {
	select {
	case l.work <- f:
	default:
		go l.worker(f)
	}
}

func (l *Locker) worker(f func()) {
	f()
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		select {
		case f := <-l.work:
			f()
			t.Reset(workerIdle)
		case <-t.C:
			return
		case <-l.ctx.Done():
			return
		}
	}
}

// keys of one lock.
type keys struct {
	lock, fence, meta, channel string
}

func (l *Locker) keysFor(key string) keys {
	p := l.cfg.Prefix
	return keys{
		lock:    p + ":lock:{" + key + "}",
		fence:   p + ":fence:{" + key + "}",
		meta:    p + ":meta:{" + key + "}",
		channel: p + ":released:{" + key + "}",
	}
}

func (l *Locker) abortKey(key, attempt string) string {
	return l.cfg.Prefix + ":abort:{" + key + "}:" + attempt
}

// begin registers an operation; false when the Locker is closed.
func (l *Locker) begin() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.ops.Add(1)
	return true
}

// nodeCtx bounds one request to a node. It is detached from the caller's
// cancellation: a request that was sent is always seen through, so that its
// outcome is known and can be undone.
func (l *Locker) nodeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), l.cfg.NodeTimeout)
}

// reply is one node's answer.
type reply struct {
	node int
	val  []any
	n    int64
	err  error
}

// Acquire implements lock.Locker. Callers of one Locker queue for a key in
// process, in arrival order, and a release hands the lock to the next of
// them directly (see MaxLocalHandoffs). The caller at the head tries; while
// the key is held it subscribes to the key's release channel, tries once
// more, then waits for a release message or for the holder's TTL to run
// out, and tries again. Across Lockers there is no order (not FIFO).
func (l *Locker) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return l.acquire(ctx, key, opts, false)
}

// TryAcquire implements lock.Locker: one attempt. A key held by another
// owner gives a *lock.HeldError naming the holder's owner and token.
func (l *Locker) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return l.acquire(ctx, key, opts, true)
}

func (l *Locker) acquire(ctx context.Context, key string, opts lock.AcquireOptions, try bool) (*lock.Lease, error) {
	if !l.begin() {
		return nil, lock.ErrClosed
	}
	defer l.ops.Done()
	opts, err := opts.Normalize(key, l.cfg.ClientID)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// A re-sent acquire with the caller's own handle must not queue behind
	// the grant it may be re-sending: it bypasses the local gate.
	if !try && opts.Handle == "" {
		handed, err := l.gate.Enter(ctx, l.ctx.Done(), key, opts, func() error {
			if ctx.Err() != nil {
				return fmt.Errorf("redlock: acquire %q: %w", key, ctx.Err())
			}
			return lock.ErrClosed
		}, l.releaseQuietly)
		if err != nil {
			return nil, err
		}
		if handed != nil {
			if ctx.Err() != nil || l.ctx.Err() != nil {
				l.releaseQuietly(handed)
				if ctx.Err() != nil {
					return nil, fmt.Errorf("redlock: acquire %q: %w", key, ctx.Err())
				}
				return nil, lock.ErrClosed
			}
			if opts.AutoRenew {
				go lock.KeepAlive(l.ctx, l, handed)
			}
			return handed, nil
		}
		lease, err := l.wait(ctx, key, opts, false)
		if err != nil {
			l.gate.Exit(key)
			return nil, err
		}
		l.gate.Hold(lease, false)
		return lease, nil
	}
	return l.wait(ctx, key, opts, try)
}

// wait makes attempts until one succeeds (only one when try).
func (l *Locker) wait(ctx context.Context, key string, opts lock.AcquireOptions, try bool) (*lock.Lease, error) {
	k := l.keysFor(key)
	var w *waiter
	var minToken lock.Token
	retries := 0
	for {
		if w != nil {
			w.drain()
		}
		o := l.attempt(key, k, opts, minToken)
		if o.lease == nil && w == nil && !try {
			// The key is taken: subscribe to its release channel, then
			// try again at once, since a release published before the
			// subscription took effect would not wake us.
			w = l.join(k.channel)
			defer l.leave(w)
			l.awaitSubscribed(ctx, w)
			if ctx.Err() == nil && l.ctx.Err() == nil {
				continue
			}
		}
		if o.lease != nil {
			if ctx.Err() != nil || l.ctx.Err() != nil {
				// The grant raced the cancellation: never leave it behind.
				l.releaseQuietly(o.lease)
				if ctx.Err() != nil {
					return nil, fmt.Errorf("redlock: acquire %q: %w", key, ctx.Err())
				}
				return nil, lock.ErrClosed
			}
			if opts.AutoRenew {
				go lock.KeepAlive(l.ctx, l, o.lease)
			}
			return o.lease, nil
		}
		if o.held != nil && o.held.Token > minToken {
			minToken = o.held.Token
		}
		if try {
			if o.err != nil {
				return nil, o.err
			}
			return nil, o.held
		}
		if l.ctx.Err() != nil {
			return nil, lock.ErrClosed
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("redlock: acquire %q: %w", key, ctx.Err())
		}
		var pause time.Duration
		if o.err == nil && o.quorumHeld {
			// Wait for the release message, or for the holder's TTL.
			retries = 0
			pause = o.pttl + time.Duration(rand.N(int64(time.Millisecond)*3))
		} else {
			retries++
			p, again := l.cfg.Retry.Backoff(retries)
			if !again {
				if o.err != nil {
					return nil, o.err
				}
				return nil, o.held
			}
			pause = p
		}
		t := time.NewTimer(pause)
		select {
		case <-w.wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("redlock: acquire %q: %w", key, ctx.Err())
		case <-l.ctx.Done():
			t.Stop()
			return nil, lock.ErrClosed
		}
		t.Stop()
	}
}

// outcome of one acquire attempt.
type outcome struct {
	lease      *lock.Lease
	held       *lock.HeldError // the holder seen by most refusing nodes
	quorumHeld bool            // that holder holds a quorum: wait for its release
	pttl       time.Duration   // its remaining TTL
	err        error           // no quorum of answers, or validity exceeded
}

// attempt makes one Redlock round.
func (l *Locker) attempt(key string, k keys, opts lock.AcquireOptions, minToken lock.Token) outcome {
	handle := opts.Handle
	if handle == "" {
		handle = lock.NewHandle()
	}
	attemptID := lock.NewHandle()[:16]
	abortKey := l.abortKey(key, attemptID)
	ttlMS := opts.TTL.Milliseconds()
	n := len(l.nodes)
	replies := make(chan reply, n)
	sent := time.Now()
	l.mu.Lock()
	prev := l.releasing[key]
	l.mu.Unlock()
	for i, nd := range l.nodes {
		l.spawn(func() {
			prev.wait(i, l.cfg.NodeTimeout)
			c, cancel := l.nodeCtx(l.ctx)
			defer cancel()
			v, err := acquireScript.Run(c, nd.client,
				[]string{k.lock, k.fence, k.meta, abortKey},
				handle, ttlMS, opts.Owner, opts.Value, uint64(minToken)).Slice()
			replies <- reply{node: i, val: v, err: err}
		})
	}
	granted := make([]bool, n)
	answered := make([]bool, n)
	tokens := make([]lock.Token, n)
	var nGranted, nRefused, nErr int
	type holder struct {
		count int
		owner string
		token lock.Token
		pttl  time.Duration
	}
	holders := map[string]*holder{}
	var firstErr error
	got := 0
	for ; got < n; got++ {
		r := <-replies
		switch {
		case r.err != nil || len(r.val) < 4:
			nErr++
			if firstErr == nil {
				firstErr = r.err
				if firstErr == nil {
					firstErr = fmt.Errorf("unexpected reply %v", r.val)
				}
			}
		case toInt(r.val[0]) == 1:
			answered[r.node] = true
			granted[r.node] = true
			tokens[r.node] = lock.Token(toInt(r.val[1]))
			nGranted++
		default:
			answered[r.node] = true
			nRefused++
			if len(r.val) >= 5 {
				h := toString(r.val[4])
				if h == "" {
					break // refused by a tombstone: cannot happen to a live attempt
				}
				hd := holders[h]
				if hd == nil {
					hd = &holder{}
					holders[h] = hd
				}
				hd.count++
				hd.owner = toString(r.val[3])
				hd.token = max(hd.token, lock.Token(toInt(r.val[1])))
				hd.pttl = max(hd.pttl, time.Duration(toInt(r.val[2]))*time.Millisecond)
			}
		}
		if nGranted >= l.quorum {
			got++
			break // the rest is collected in the background
		}
	}
	elapsed := time.Since(sent)
	validity := opts.TTL - elapsed - lock.Drift(opts.TTL, l.cfg.DriftFactor)
	if nGranted >= l.quorum && validity > 0 {
		var token lock.Token
		for _, t := range tokens {
			token = max(token, t)
		}
		l.propagate(k, handle, token, tokens, answered, replies, n-got)
		lease := lock.NewLease(lock.Grant{
			Key: key, Owner: opts.Owner, Token: token, Handle: handle, Value: opts.Value,
			TTL: opts.TTL, Sent: sent, DriftFactor: l.cfg.DriftFactor,
		})
		return outcome{lease: lease}
	}
	// Failed (too late): hear from the remaining nodes too, so that the
	// undo below is synchronous wherever it can be.
	for ; got < n; got++ {
		r := <-replies
		if r.err == nil && len(r.val) >= 4 {
			answered[r.node] = true
			granted[r.node] = toInt(r.val[0]) == 1
		}
	}
	// Undo wherever it may have succeeded, including nodes that did not
	// answer (their copy of the request may still be queued).
	l.abort(k, handle, abortKey, ttlMS, granted, answered)
	var o outcome
	var best *holder
	for _, hd := range holders {
		if best == nil || hd.count > best.count {
			best = hd
		}
	}
	if best != nil {
		o.held = &lock.HeldError{Key: key, Owner: best.owner, Token: best.token, Expires: time.Now().Add(best.pttl)}
		o.quorumHeld = best.count >= l.quorum
		o.pttl = best.pttl
	}
	switch {
	case nGranted >= l.quorum:
		o.err = fmt.Errorf("%w: redlock: acquire %q: the attempt took %v, leaving no validity of its %v TTL (drift %v); released",
			lock.ErrUnavailable, key, elapsed.Round(time.Microsecond), opts.TTL, lock.Drift(opts.TTL, l.cfg.DriftFactor))
	case o.held == nil || nRefused+nGranted < l.quorum && nErr > 0 && !o.quorumHeld:
		o.err = fmt.Errorf("%w: redlock: acquire %q: only %d of %d nodes answered (quorum %d): %v",
			lock.ErrUnavailable, key, nRefused+nGranted, n, l.quorum, firstErr)
	}
	return o
}

// propagate raises, in the background, the fence counter of every node whose
// counter may lag behind the grant's token (it answered with a smaller
// token, or did not answer), so that any later quorum intersects this one in
// a node that mints a larger token. pending replies are still to come.
func (l *Locker) propagate(k keys, handle string, token lock.Token, tokens []lock.Token, answered []bool, replies <-chan reply, pending int) {
	if !l.begin() {
		return
	}
	run := func() {
		defer l.ops.Done()
		for range pending {
			r := <-replies
			if r.err == nil && len(r.val) >= 2 {
				answered[r.node] = true
				tokens[r.node] = lock.Token(toInt(r.val[1]))
				if toInt(r.val[0]) != 1 {
					tokens[r.node] = 0 // refused: its counter may lag
				}
			}
		}
		for i, nd := range l.nodes {
			if answered[i] && tokens[i] == token {
				continue
			}
			c, cancel := context.WithTimeout(context.Background(), 4*l.cfg.NodeTimeout)
			syncScript.Run(c, nd.client, []string{k.lock, k.fence, k.meta}, handle, uint64(token))
			cancel()
		}
	}
	if pending == 0 {
		for i := range l.nodes {
			if !answered[i] || tokens[i] != token {
				l.spawn(run)
				return
			}
		}
		l.ops.Done()
		return
	}
	l.spawn(run)
}

// abort undoes a failed attempt: synchronously on the nodes that granted
// (so that the caller's next attempt does not trip over its own leftovers),
// in the background, with a tombstone, on the nodes that did not answer.
func (l *Locker) abort(k keys, handle, abortKey string, ttlMS int64, granted, answered []bool) {
	var wg sync.WaitGroup
	for i, nd := range l.nodes {
		switch {
		case granted[i]:
			wg.Add(1)
			l.spawn(func() {
				defer wg.Done()
				c, cancel := l.nodeCtx(context.Background())
				defer cancel()
				abortScript.Run(c, nd.client, []string{k.lock, k.meta, abortKey}, handle, ttlMS, "0")
			})
		case !answered[i]:
			if !l.begin() {
				continue
			}
			go func() {
				defer l.ops.Done()
				// Retry until the node answers or the attempt's TTL is
				// over (then a late grant has expired by itself).
				deadline := time.Now().Add(time.Duration(ttlMS) * time.Millisecond)
				for time.Now().Before(deadline) {
					c, cancel := context.WithDeadline(context.Background(), deadline)
					err := abortScript.Run(c, nd.client, []string{k.lock, k.meta, abortKey}, handle, ttlMS, "1").Err()
					cancel()
					if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, redis.ErrClosed) {
						return
					}
					time.Sleep(l.cfg.NodeTimeout)
				}
			}()
		}
	}
	wg.Wait()
}

// Renew implements lock.Locker: compare-and-pexpire on every node; the lease
// is extended only when a quorum still holds its handle and the round ended
// within the new validity window.
func (l *Locker) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	if !l.begin() {
		return lock.ErrClosed
	}
	defer l.ops.Done()
	ttl, err := lock.ValidateRenew(lease, ttl)
	if err != nil {
		return err
	}
	k := l.keysFor(lease.Key)
	sent := time.Now()
	ok, refused, answered, firstErr := l.everyNode(ctx, true, func(c context.Context, nd *node) (int64, error) {
		return renewScript.Run(c, nd.client, []string{k.lock, k.fence, k.meta},
			lease.Handle, ttl.Milliseconds(), uint64(lease.Token)).Int64()
	})
	n := len(l.nodes)
	switch {
	case ok >= l.quorum:
		if err := lease.Renewed(sent, ttl, true); err != nil {
			return err
		}
		if err := lease.Err(); err != nil {
			return fmt.Errorf("%w: redlock: renew %q took too long: %w", lock.ErrNotHeld, lease.Key, err)
		}
		return nil
	case refused > n-l.quorum:
		return lease.Renewed(sent, ttl, false)
	default:
		return fmt.Errorf("%w: redlock: renew %q: %d of %d nodes answered, %d still hold it (quorum %d): %v",
			lock.ErrUnavailable, lease.Key, answered, n, ok, l.quorum, firstErr)
	}
}

// Release implements lock.Locker: compare-and-delete on every node. It
// succeeds when a quorum still had the lease's handle; otherwise it returns
// ErrNotHeld (or ErrUnavailable when too few nodes answered to tell).
func (l *Locker) Release(ctx context.Context, lease *lock.Lease) error {
	if !l.begin() {
		return lock.ErrClosed
	}
	defer l.ops.Done()
	if err := lock.ValidateLease(lease); err != nil {
		return err
	}
	if t := l.gate.TakeHandoff(lease); t != nil {
		return l.handoff(ctx, lease, t)
	}
	return l.release(ctx, lease)
}

func (l *Locker) release(ctx context.Context, lease *lock.Lease) error {
	return l.releaseCounted(ctx, lease, 0)
}

// releaseCounted releases lease; moved is the number of nodes on which a
// failed handoff already removed it (they count as having held it).
func (l *Locker) releaseCounted(ctx context.Context, lease *lock.Lease, moved int) error {
	k := l.keysFor(lease.Key)
	f, prev := l.startRelease(lease.Key)
	ok, refused, answered, firstErr := l.everyNode(ctx, true, func(c context.Context, nd *node) (int64, error) {
		defer l.finishRelease(lease.Key, f, nd.idx)
		prev.wait(nd.idx, l.cfg.NodeTimeout)
		return releaseScript.Run(c, nd.client, []string{k.lock, k.fence, k.meta},
			lease.Handle, uint64(lease.Token), k.channel).Int64()
	})
	ok, refused = ok+moved, refused-moved
	n := len(l.nodes)
	switch {
	case ok >= l.quorum:
		l.deliver(k.channel, uint64(lease.Token)) // wake a local waiter at once
		l.gate.EndHolder(lease, lock.ErrReleased)
		return lease.Released(true)
	case refused > n-l.quorum || ok+refused == n:
		err := lease.Released(false)
		l.gate.EndHolder(lease, err)
		return err
	default:
		return fmt.Errorf("%w: redlock: release %q: only %d of %d nodes answered (quorum %d), outcome unknown: %v",
			lock.ErrUnavailable, lease.Key, answered, n, l.quorum, firstErr)
	}
}

// inflight is one release of a key, per node: done[i] is closed once node i
// answered (or failed). A later attempt or release of the same key by this
// Locker waits for it on that node before sending its own request, so that
// the two cannot reach the node out of order on different connections.
type inflight struct {
	done []chan struct{}
	left int
}

func (f *inflight) wait(i int, timeout time.Duration) {
	if f == nil {
		return
	}
	select {
	case <-f.done[i]:
	default:
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-f.done[i]:
		case <-t.C:
		}
	}
}

// startRelease registers a release of key; prev is the one still in
// flight, if any.
func (l *Locker) startRelease(key string) (f, prev *inflight) {
	f = &inflight{done: make([]chan struct{}, len(l.nodes)), left: len(l.nodes)}
	for i := range f.done {
		f.done[i] = make(chan struct{})
	}
	l.mu.Lock()
	prev = l.releasing[key]
	l.releasing[key] = f
	l.mu.Unlock()
	return f, prev
}

func (l *Locker) finishRelease(key string, f *inflight, i int) {
	close(f.done[i])
	l.mu.Lock()
	if f.left--; f.left == 0 && l.releasing[key] == f {
		delete(l.releasing, key)
	}
	l.mu.Unlock()
}

// releaseQuietly frees a grant nobody will use (a waiter's grant that raced
// its cancellation).
func (l *Locker) releaseQuietly(lease *lock.Lease) {
	l.release(context.Background(), lease)
	lease.End(lock.ErrReleased)
}

// everyNode runs f on every node in parallel and counts answers 1 (ok) and
// 0 (refused). With early, it returns as soon as a quorum answered ok: the
// remaining requests are already sent and complete in the background.
func (l *Locker) everyNode(ctx context.Context, early bool, f func(context.Context, *node) (int64, error)) (ok, refused, answered int, firstErr error) {
	replies := make(chan reply, len(l.nodes))
	for i, nd := range l.nodes {
		l.spawn(func() {
			c, cancel := l.nodeCtx(ctx)
			defer cancel()
			v, err := f(c, nd)
			replies <- reply{node: i, n: v, err: err}
		})
	}
	for range l.nodes {
		r := <-replies
		switch {
		case r.err != nil:
			if firstErr == nil {
				firstErr = r.err
			}
		case r.n == 1:
			ok++
			answered++
		default:
			refused++
			answered++
		}
		if early && ok >= l.quorum {
			return
		}
	}
	return
}

// Inspect implements lock.Locker: it reads every node and reports the
// holder that a quorum agrees on: its token as recorded by the token
// propagation (sync.lua) where it landed, else the quorum-th smallest
// node-local token among them (exact unless a node that granted late,
// after the quorum formed, holds a token below the grant's and the
// propagation has not reached it yet), and the quorum's remaining TTL. Waiters is -1: they are not tracked in Redis.
func (l *Locker) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	if !l.begin() {
		return nil, lock.ErrClosed
	}
	defer l.ops.Done()
	if err := lock.ValidateKey(key); err != nil {
		return nil, err
	}
	k := l.keysFor(key)
	replies := make(chan reply, len(l.nodes))
	now := time.Now()
	for i, nd := range l.nodes {
		go func() {
			c, cancel := l.nodeCtx(ctx)
			defer cancel()
			v, err := inspectScript.Run(c, nd.client, []string{k.lock, k.meta}).Slice()
			if errors.Is(err, redis.Nil) {
				err = nil
			}
			replies <- reply{node: i, val: v, err: err}
		}()
	}
	type view struct {
		owner, value string
		tokens       []lock.Token // the node-local tokens
		final        lock.Token   // the grant's token, where sync recorded it
		pttls        []time.Duration
	}
	views := map[string]*view{}
	answered := 0
	var firstErr error
	for range l.nodes {
		r := <-replies
		if r.err != nil {
			if firstErr == nil {
				firstErr = r.err
			}
			continue
		}
		answered++
		if len(r.val) < 5 {
			continue
		}
		h := toString(r.val[0])
		v := views[h]
		if v == nil {
			v = &view{owner: toString(r.val[1]), value: toString(r.val[3])}
			views[h] = v
		}
		v.tokens = append(v.tokens, lock.Token(toInt(r.val[2])))
		if len(r.val) >= 6 && toString(r.val[5]) == "1" {
			v.final = lock.Token(toInt(r.val[2]))
		}
		v.pttls = append(v.pttls, time.Duration(toInt(r.val[4]))*time.Millisecond)
	}
	for _, v := range views {
		if len(v.pttls) < l.quorum {
			continue
		}
		sort.Slice(v.pttls, func(i, j int) bool { return v.pttls[i] > v.pttls[j] })
		// The grant's token is the largest of its quorum's. Where the
		// propagation has not recorded it yet, take the quorum-th smallest
		// node-local token: a node that granted late, after a failed
		// earlier attempt had raised its counter, holds a larger one than
		// the grant's (the largest token, used before, reported 2 for a
		// lease with token 1 in a stress run).
		slices.Sort(v.tokens)
		token := v.tokens[l.quorum-1]
		if v.final != 0 {
			token = v.final
		}
		info := &lock.LockInfo{
			Key: key, Owner: v.owner, Token: token,
			Expires: now.Add(v.pttls[l.quorum-1]), Waiters: -1,
		}
		if v.value != "" {
			info.Value = []byte(v.value)
		}
		return info, nil
	}
	if answered < l.quorum {
		return nil, fmt.Errorf("%w: redlock: inspect %q: only %d of %d nodes answered (quorum %d): %v",
			lock.ErrUnavailable, key, answered, len(l.nodes), l.quorum, firstErr)
	}
	return nil, fmt.Errorf("%w: %q", lock.ErrNotFound, key)
}

// Close implements lock.Locker: waiters return ErrClosed, auto-renewals
// stop, and once in-flight calls have finished the pub/sub connections and
// clients are closed. Held leases run out at their TTL unless released
// first (through another Locker rebuilt with lock.NewLease).
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	l.ops.Wait()
	var errs []error
	for _, n := range l.nodes {
		errs = append(errs, n.close())
	}
	return errors.Join(errs...)
}

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	case float64:
		return int64(x)
	}
	return 0
}

func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}
