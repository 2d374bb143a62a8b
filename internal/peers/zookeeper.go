package peers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// ZooKeeperConfig configures a ZooKeeper Locker.
type ZooKeeperConfig struct {
	// Addrs are the ensemble's client addresses (host:port).
	Addrs []string
	// SessionTimeout is the session timeout the Locker asks for; the
	// server clamps it to 2..20 ticks (4 s to 40 s with the default tick).
	// Zero means 10 s.
	SessionTimeout time.Duration
	// Root is the parent of the lock nodes; zero means "/lockgate".
	Root string
	// ClientID is the owner of grants whose AcquireOptions.Owner is empty;
	// zero means a random id.
	ClientID string
}

// ZooKeeper is a lock.Locker over github.com/go-zookeeper/zk's Lock: the
// lock recipe of the ZooKeeper documentation (an ephemeral sequential node
// per contender under the key's node; the lowest holds the lock, each
// other watches its predecessor), as go-zookeeper's users run it, on one
// zk.Conn — one session — per Locker.
//
// What the wrapper maps, and how:
//
//   - The lock node of key k is a child of Root/<escaped k>; its data is
//     the owner, the value and a hash of the lease's handle (so that the
//     node of a grant is recognisable without the handle being readable).
//   - Fencing token: the lock node's creation zxid (Czxid), which
//     ZooKeeper makes strictly increasing across all writes of the
//     ensemble, so across the grants of a key too (a key's grants go in
//     node creation order).
//   - TTL: a lock lives as long as the session. AcquireOptions.TTL is
//     validated and otherwise ignored: the lease's TTL is the session
//     timeout the server negotiated, and its deadline counts from a request
//     the server answered (the session cannot expire sooner). Renew asks the
//     server whether the node still exists in this session and extends the
//     deadline by the session timeout; AutoRenew runs lock.KeepAlive on
//     it. The library itself keeps the session alive with pings; Renew
//     only moves the holder's view of the deadline.
//   - FIFO: waiters are granted in node creation order.
//   - Acquire's ctx: zk.Lock.Lock cannot be cancelled. The wrapper runs it
//     on a goroutine; when ctx ends first it finds its queued node (by its
//     data) and deletes it, so that nobody waits behind an abandoned node,
//     and unlocks a grant that raced with the cancellation when Lock
//     returns. That goroutine may live until the predecessor goes or Close.
//   - TryAcquire: the recipe's try-lock: create the node, and delete it
//     again unless it is the lowest (the library has no try-lock).
//   - A session that expires (or a Close) frees every lock of the Locker;
//     the Locker ends its held leases when it learns of the expiry.
type ZooKeeper struct {
	conn     *zk.Conn
	root     string
	clientID string
	timeout  atomic.Int64 // negotiated session timeout, ns

	life *life

	mu   sync.Mutex
	held map[string]*zkGrant // by lease handle
}

// zkGrant is a held lock node.
type zkGrant struct {
	lease   *lock.Lease
	path    string   // the lock node
	lk      *zk.Lock // nil for a TryAcquire grant
	session int64
}

// zkNodeData is what a lock node holds.
type zkNodeData struct {
	Owner  string `json:"owner"`
	Value  []byte `json:"value,omitempty"`
	Handle string `json:"h"` // hex of the first 16 bytes of sha256(handle)
}

var zkACL = zk.WorldACL(zk.PermAll)

// zkRequestTimeout bounds the wrapper's own round trips when ctx has no
// deadline. go-zookeeper's calls take no context; they end with the
// session (recvTimeout) at worst.
const zkRequestTimeout = 10 * time.Second

// NewZooKeeper connects to the ensemble and returns once the session is
// established (or ctx ends).
func NewZooKeeper(ctx context.Context, cfg ZooKeeperConfig) (*ZooKeeper, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("peers: ZooKeeper: no Addrs")
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 10 * time.Second
	}
	if cfg.Root == "" {
		cfg.Root = "/lockgate"
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "zk-" + lock.NewHandle()[:12]
	}
	z := &ZooKeeper{
		root:     strings.TrimSuffix(cfg.Root, "/"),
		clientID: cfg.ClientID,
		life:     newLife(),
		held:     map[string]*zkGrant{},
	}
	z.timeout.Store(int64(cfg.SessionTimeout))
	session := make(chan struct{}, 1)
	conn, _, err := zk.Connect(cfg.Addrs, cfg.SessionTimeout,
		zk.WithLogger(zkLogger{z}),
		zk.WithEventCallback(func(ev zk.Event) {
			switch ev.State {
			case zk.StateHasSession:
				select {
				case session <- struct{}{}:
				default:
				}
			case zk.StateExpired:
				z.sessionLost(fmt.Errorf("%w: the ZooKeeper session expired", lock.ErrNotHeld))
			}
		}))
	if err != nil {
		z.life.Close()
		return nil, fmt.Errorf("%w: peers: ZooKeeper: connect %v: %w", lock.ErrUnavailable, cfg.Addrs, err)
	}
	z.conn = conn
	select {
	case <-session:
		return z, nil
	case <-ctx.Done():
		conn.Close()
		z.life.Close()
		return nil, fmt.Errorf("peers: ZooKeeper: connect %v: %w", cfg.Addrs, ctx.Err())
	}
}

// zkLogger silences go-zookeeper (it logs every reconnect through the
// standard logger) and learns the negotiated session timeout from its
// "authenticated" line, the only place the library reports it.
type zkLogger struct{ z *ZooKeeper }

func (l zkLogger) Printf(format string, args ...any) {
	if strings.HasPrefix(format, "authenticated:") && len(args) == 2 {
		if ms, ok := args[1].(int32); ok && ms > 0 {
			l.z.timeout.Store(int64(time.Duration(ms) * time.Millisecond))
		}
	}
}

// SessionTimeout is the session timeout the server granted: the TTL of
// every lease.
func (z *ZooKeeper) SessionTimeout() time.Duration { return time.Duration(z.timeout.Load()) }

// Caps: fencing (creation zxids), TTL (the session timeout), FIFO (node
// order), Inspect (the lowest node's data).
func (z *ZooKeeper) Caps() Caps { return Caps{Fencing: true, TTL: true, FIFO: true, Inspect: true} }

// zkEscape makes a key one node name: bytes other than ASCII letters,
// digits, '-' and '_' become %XX, so '/' cannot nest and "." or ".." cannot
// name a reserved node.
func zkEscape(key string) string {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func (z *ZooKeeper) keyPath(key string) string { return z.root + "/" + zkEscape(key) }

// zkHandleHash is what a node stores of its lease's handle.
func zkHandleHash(handle string) string {
	h := sha256.Sum256([]byte(handle))
	return hex.EncodeToString(h[:16])
}

// zkSeq is the sequence number of a lock node's name, as zk.Lock parses
// it ("...lock-0000000042").
func zkSeq(name string) (int, bool) {
	i := strings.LastIndex(name, "lock-")
	if i < 0 {
		return 0, false
	}
	var n int
	if _, err := fmt.Sscanf(name[i+len("lock-"):], "%d", &n); err != nil {
		return 0, false
	}
	return n, true
}

// lowest returns the name of the lowest lock node among children.
func zkLowest(children []string) (string, int) {
	best, bestSeq := "", -1
	for _, c := range children {
		if s, ok := zkSeq(c); ok && (bestSeq < 0 || s < bestSeq) {
			best, bestSeq = c, s
		}
	}
	return best, bestSeq
}

// fail turns a library error into the caller's (life.fail).
func (z *ZooKeeper) fail(ctx context.Context, op, key string, err error) error {
	return z.life.fail(ctx, "peers: ZooKeeper", op, key, err)
}

// Acquire waits for the key with zk.Lock.LockWithData.
func (z *ZooKeeper) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return z.life.Acquire(key, opts, z.clientID, func(opts lock.AcquireOptions) (*lock.Lease, error) {
		if err := refuse("zookeeper", opts); err != nil {
			return nil, err
		}
		return z.acquire(ctx, key, opts)
	})
}

func (z *ZooKeeper) acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	handle := lock.NewHandle()
	data, _ := json.Marshal(zkNodeData{Owner: opts.Owner, Value: opts.Value, Handle: zkHandleHash(handle)})
	parent := z.keyPath(key)
	lk := zk.NewLock(z.conn, parent, zkACL)
	done := make(chan error, 1)
	z.life.Go(func() { done <- lk.LockWithData(data) })
	select {
	case err := <-done:
		if err != nil {
			return nil, z.fail(ctx, "acquire", key, err)
		}
		lease, err := z.granted(ctx, key, opts, handle, data, lk, "")
		if err == nil && ctx.Err() != nil {
			// The grant raced with the cancellation: the caller holds
			// nothing.
			z.Release(context.Background(), lease)
			return nil, fmt.Errorf("peers: ZooKeeper: acquire %q: %w", key, ctx.Err())
		}
		return lease, err
	case <-ctx.Done():
		z.abandon(parent, data, lk, done)
		return nil, fmt.Errorf("peers: ZooKeeper: acquire %q: %w", key, ctx.Err())
	case <-z.life.Context().Done():
		return nil, lock.ErrClosed
	}
}

// abandon withdraws a waiting Lock whose caller gave up: it deletes the
// queued node (found by its data), and unlocks the grant if Lock returns
// one anyway. The node may not exist yet (Lock is still creating it): it
// then waits for the children of parent to change.
func (z *ZooKeeper) abandon(parent string, data []byte, lk *zk.Lock, done chan error) {
	unlockLater := func() {
		z.life.Go(func() {
			if err := <-done; err == nil {
				_ = lk.Unlock() // ErrNoNode when abandon deleted the node first
			}
		})
	}
	deadline := time.After(zkRequestTimeout)
	for {
		select {
		case err := <-done:
			if err == nil {
				_ = lk.Unlock()
			}
			return
		default:
		}
		children, _, changed, err := z.conn.ChildrenW(parent)
		if errors.Is(err, zk.ErrNoNode) {
			var ok bool
			ok, _, changed, err = z.conn.ExistsW(parent)
			if err == nil && ok {
				continue // created meanwhile: list it
			}
		}
		if err != nil {
			// The session is in trouble; its end removes the node.
			unlockLater()
			return
		}
		for _, c := range children {
			got, _, err := z.conn.Get(parent + "/" + c)
			if err == nil && string(got) == string(data) {
				_ = z.conn.Delete(parent+"/"+c, -1)
				unlockLater()
				return
			}
		}
		select {
		case err := <-done:
			if err == nil {
				_ = lk.Unlock()
			}
			return
		case <-changed:
		case <-z.life.Context().Done():
			unlockLater()
			return
		case <-deadline:
			unlockLater()
			return
		}
	}
}

// granted builds the lease of the lock node that this Locker now holds
// under key: the lowest child (lk != nil, after Lock) or path (after
// TryAcquire). It checks that the node is ours by its data.
func (z *ZooKeeper) granted(ctx context.Context, key string, opts lock.AcquireOptions, handle string, data []byte, lk *zk.Lock, path string) (*lock.Lease, error) {
	parent := z.keyPath(key)
	sent := time.Now() // the session lives at least a timeout past this request
	if path == "" {
		children, _, err := z.conn.Children(parent)
		if err != nil {
			_ = lk.Unlock()
			return nil, z.fail(ctx, "acquire", key, err)
		}
		low, _ := zkLowest(children)
		path = parent + "/" + low
	}
	got, st, err := z.conn.Get(path)
	if err != nil || string(got) != string(data) {
		if lk != nil {
			_ = lk.Unlock()
		} else {
			_ = z.conn.Delete(path, -1)
		}
		if err == nil {
			err = errors.New("the lowest lock node is not ours (session lost?)")
		}
		return nil, z.fail(ctx, "acquire", key, err)
	}
	lease := kit.NewLease(kit.Grant{
		Key:    key,
		Owner:  opts.Owner,
		Token:  lock.Token(st.Czxid),
		Handle: handle,
		Value:  opts.Value,
		TTL:    z.SessionTimeout(),
		Sent:   sent,
	})
	g := &zkGrant{lease: lease, path: path, lk: lk, session: st.EphemeralOwner}
	z.mu.Lock()
	z.held[handle] = g
	z.mu.Unlock()
	if opts.AutoRenew {
		z.life.autoRenew(z, lease)
	}
	return lease, nil
}

// TryAcquire is the recipe's try-lock: create the node; if it is not the
// lowest, delete it and report the holder.
func (z *ZooKeeper) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return z.life.Acquire(key, opts, z.clientID, func(opts lock.AcquireOptions) (*lock.Lease, error) {
		if err := refuse("zookeeper", opts); err != nil {
			return nil, err
		}
		return z.tryAcquire(ctx, key, opts)
	})
}

func (z *ZooKeeper) tryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	handle := lock.NewHandle()
	data, _ := json.Marshal(zkNodeData{Owner: opts.Owner, Value: opts.Value, Handle: zkHandleHash(handle)})
	parent := z.keyPath(key)
	path, err := z.conn.CreateProtectedEphemeralSequential(parent+"/lock-", data, zkACL)
	if errors.Is(err, zk.ErrNoNode) {
		if err = z.createParents(parent); err == nil {
			path, err = z.conn.CreateProtectedEphemeralSequential(parent+"/lock-", data, zkACL)
		}
	}
	if err != nil {
		return nil, z.fail(ctx, "try-acquire", key, err)
	}
	children, _, err := z.conn.Children(parent)
	if err != nil {
		_ = z.conn.Delete(path, -1)
		return nil, z.fail(ctx, "try-acquire", key, err)
	}
	low, _ := zkLowest(children)
	if parent+"/"+low != path {
		_ = z.conn.Delete(path, -1)
		held := &lock.HeldError{Key: key}
		if got, st, err := z.conn.Get(parent + "/" + low); err == nil {
			var d zkNodeData
			if json.Unmarshal(got, &d) == nil {
				held.Owner, held.Token = d.Owner, lock.Token(st.Czxid)
			}
		}
		return nil, held
	}
	return z.granted(ctx, key, opts, handle, data, nil, path)
}

// createParents creates each node of path that does not exist, as
// zk.Lock does.
func (z *ZooKeeper) createParents(path string) error {
	p := ""
	for _, part := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		p += "/" + part
		if _, err := z.conn.Create(p, nil, 0, zkACL); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return nil
}

// grant returns the held grant of lease, or nil.
func (z *ZooKeeper) grant(lease *lock.Lease) *zkGrant {
	z.mu.Lock()
	defer z.mu.Unlock()
	g := z.held[lease.Handle]
	if g == nil || g.lease.Key != lease.Key || g.lease.Token != lease.Token {
		return nil
	}
	return g
}

// Release deletes the lease's lock node (zk.Lock.Unlock for an Acquire
// grant). A node that is gone (released, or its session ended) is
// lock.ErrNotHeld.
func (z *ZooKeeper) Release(ctx context.Context, lease *lock.Lease) error {
	return z.life.Release(lease, func() error { return z.release(ctx, lease) })
}

func (z *ZooKeeper) release(ctx context.Context, lease *lock.Lease) error {
	g := z.grant(lease)
	if g == nil {
		return kit.Released(lease, false)
	}
	var err error
	if g.lk != nil {
		err = g.lk.Unlock()
	} else {
		err = z.conn.Delete(g.path, -1)
	}
	if err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrNotLocked) {
		return z.fail(ctx, "release", lease.Key, err)
	}
	z.mu.Lock()
	delete(z.held, lease.Handle)
	z.mu.Unlock()
	return kit.Released(lease, err == nil)
}

// Renew checks that the lock node still exists in this session and moves
// the deadline to a session timeout past the check; ttl is validated and
// otherwise ignored (a ZooKeeper lock lives as long as its session).
func (z *ZooKeeper) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	return z.life.Renew(lease, ttl, func(time.Duration) error { return z.renew(ctx, lease) })
}

func (z *ZooKeeper) renew(ctx context.Context, lease *lock.Lease) error {
	g := z.grant(lease)
	if g == nil {
		return kit.Renewed(lease, time.Time{}, 0, false)
	}
	sent := time.Now()
	ok, st, err := z.conn.Exists(g.path)
	if err != nil {
		return z.fail(ctx, "renew", lease.Key, err)
	}
	held := ok && st.EphemeralOwner == g.session && st.Czxid == int64(lease.Token)
	if !held {
		z.mu.Lock()
		delete(z.held, lease.Handle)
		z.mu.Unlock()
	}
	return kit.Renewed(lease, sent, z.SessionTimeout(), held)
}

// Inspect names the owner of the key's lowest lock node.
func (z *ZooKeeper) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	return z.life.Inspect(key, func() (*lock.LockInfo, error) { return z.inspect(ctx, key) })
}

func (z *ZooKeeper) inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	parent := z.keyPath(key)
	for {
		children, _, err := z.conn.Children(parent)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, fmt.Errorf("%w: %q", lock.ErrNotFound, key)
		}
		if err != nil {
			return nil, z.fail(ctx, "inspect", key, err)
		}
		low, _ := zkLowest(children)
		if low == "" {
			return nil, fmt.Errorf("%w: %q", lock.ErrNotFound, key)
		}
		got, st, err := z.conn.Get(parent + "/" + low)
		if errors.Is(err, zk.ErrNoNode) {
			continue // released meanwhile: look again
		}
		if err != nil {
			return nil, z.fail(ctx, "inspect", key, err)
		}
		var d zkNodeData
		if err := json.Unmarshal(got, &d); err != nil {
			return nil, fmt.Errorf("peers: ZooKeeper: inspect %q: node %s: %w", key, low, err)
		}
		return &lock.LockInfo{Key: key, Owner: d.Owner, Token: lock.Token(st.Czxid), Value: d.Value, Waiters: len(children) - 1}, nil
	}
}

// sessionLost ends every held lease with cause: the session's nodes are
// gone.
func (z *ZooKeeper) sessionLost(cause error) {
	z.mu.Lock()
	held := z.held
	z.held = map[string]*zkGrant{}
	z.mu.Unlock()
	for _, g := range held {
		g.lease.End(cause)
	}
}

// Close closes the session, which deletes every lock node of this Locker
// (its held locks are free at once, its waiters leave their queues); held
// leases end with an error matching lock.ErrNotHeld. Waiting Acquire calls
// return lock.ErrClosed.
//
// The session closes once the calls in progress have returned and before
// Close waits for the background work: zk.Lock.Lock takes no context and
// returns only when its predecessor goes or the connection closes.
func (z *ZooKeeper) Close() error {
	if !z.life.CloseAfterCalls(z.conn.Close) {
		return nil
	}
	z.sessionLost(fmt.Errorf("%w: the Locker was closed, ending its ZooKeeper session", lock.ErrNotHeld))
	return nil
}
