package zklike

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockgate/lockgate/internal/lifecycle"
	"github.com/lockgate/lockgate/lock"
)

// Locker is a lock.Locker on etcd: ZooKeeper's lock recipe with leases for
// ephemeral nodes and create revisions for sequence numbers (see the
// package documentation). It is one etcd client; it is safe for concurrent
// use.
type Locker struct {
	cfg     Config
	cli     *clientv3.Client
	ownsCli bool

	// life counts the calls in progress and the background work (session
	// keepers and cleanups), which only calls in progress start (so Close
	// waits for all of it); ctx is its context, which ends at Close: it
	// stops waits and keep-alives.
	life *lifecycle.State
	ctx  context.Context

	mu       sync.Mutex
	sessions map[int64]*session

	// wanted registers the held leases and watches for contenders queued
	// behind them (wanted.go).
	wanted *wantedHub

	// marks is the short lease of the release marks (watch.go).
	marks markLease

	// suspended, when set, blocks every lease keep-alive this Locker sends
	// until the channel is closed: a test hook that stands for a holder
	// process paused past its TTL (see suspendKeepAlives).
	suspended atomic.Pointer[chan struct{}]
}

var (
	_ lock.Locker          = (*Locker)(nil)
	_ lock.WantedSignaler  = (*Locker)(nil)
	_ lock.FeatureReporter = (*Locker)(nil)
	_ lock.MultiLocker     = (*Locker)(nil)
	_ lock.Watcher         = (*Locker)(nil)
)

// New connects to the etcd cluster of cfg and returns a Locker. Connecting
// is lazy in the etcd client: an unreachable cluster shows up as
// lock.ErrUnavailable on the first call, not here.
func New(cfg Config) (*Locker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cli, owns := cfg.Client, false
	if cli == nil {
		var err error
		cli, err = clientv3.New(clientv3.Config{
			Endpoints:   cfg.Endpoints,
			DialTimeout: cfg.DialTimeout,
			// Notice a dead member within seconds, not at the OS's TCP
			// timeout, so that requests move to a live one.
			DialKeepAliveTime:    2 * time.Second,
			DialKeepAliveTimeout: 2 * time.Second,
			Logger:               zap.NewNop(), // its retry chatter is not ours to log
		})
		if err != nil {
			return nil, fmt.Errorf("%w: zklike: connect to %v: %w", lock.ErrUnavailable, cfg.Endpoints, err)
		}
		owns = true
	}
	life := lifecycle.New()
	l := &Locker{
		cfg:      cfg,
		cli:      cli,
		ownsCli:  owns,
		life:     life,
		ctx:      life.Context(),
		sessions: make(map[int64]*session),
		marks:    markLease{mu: make(chan struct{}, 1)},
	}
	l.wanted = newWantedHub(l)
	return l, nil
}

// ClientID is the default owner of this Locker's leases.
func (l *Locker) ClientID() string { return l.cfg.ClientID }

// Client is the etcd client the Locker uses.
func (l *Locker) Client() *clientv3.Client { return l.cli }

// Close implements lock.Locker: waiting Acquire calls remove their keys
// and return lock.ErrClosed, auto-renewal stops, and the session leases
// that no held lock uses are revoked. Held leases are not revoked: their
// holders may still act until their deadlines, so their keys run out at
// their TTL unless released first.
func (l *Locker) Close() error {
	if !l.life.Close() {
		return nil
	}
	l.mu.Lock()
	var idle []clientv3.LeaseID
	for _, s := range l.sessions {
		if s.retire() {
			idle = append(idle, s.id)
		}
	}
	l.sessions = nil
	l.mu.Unlock()
	for _, id := range idle {
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.RequestTimeout)
		l.cli.Revoke(ctx, id)
		cancel()
	}
	if l.ownsCli {
		return l.cli.Close()
	}
	return nil
}

// dir is the directory of key's contenders: <prefix>/<escaped key>/.
func (l *Locker) dir(key string) string {
	return l.cfg.Prefix + "/" + escapeKey(key) + "/"
}

// escapeKey makes a lock key safe as one path segment, so that the
// contenders of "a" and of "a/b" never share a directory.
func escapeKey(key string) string {
	if !strings.ContainsAny(key, "%/") {
		return key
	}
	return strings.NewReplacer("%", "%25", "/", "%2F").Replace(key)
}

// record is the value stored at a contender's key.
type record struct {
	Owner string `json:"o"`
	Value []byte `json:"v,omitempty"`
	// Own: the key's lease belongs to this grant alone and is revoked
	// with it; otherwise it is a Locker's shared session lease.
	Own bool `json:"x,omitempty"`
	// Shared: a read lock (Permits 0) or a semaphore permit (Permits N);
	// otherwise the contender wants the key exclusively.
	Shared  bool `json:"s,omitempty"`
	Permits int  `json:"p,omitempty"`
	// Delay is the lock-delay in whole seconds: the key's lease was
	// granted Delay seconds longer than the holder's TTL (primitives.go).
	Delay int64 `json:"d,omitempty"`
	// Multi: one of an AcquireAll's keys, which holds its key only once
	// Granted is set (by the Txn that finds it first on every key).
	Multi   bool `json:"m,omitempty"`
	Granted bool `json:"g,omitempty"`
}

func encode(r record) string {
	b, _ := json.Marshal(r) // cannot fail: strings and bytes only
	return string(b)
}

func decode(b []byte) record {
	var r record
	json.Unmarshal(b, &r) // a foreign value decodes as an unknown owner
	return r
}

// transient reports whether a failed request may succeed when sent again:
// etcd or a member was unreachable, had no leader, or timed out.
func transient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ee rpctypes.EtcdError
	code := status.Code(err)
	if errors.As(err, &ee) {
		code = ee.Code()
	}
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted, codes.Unknown, codes.Internal:
		return true
	}
	return false
}

func leaseNotFound(err error) bool { return errors.Is(err, rpctypes.ErrLeaseNotFound) }

// do runs op, each attempt bounded by RequestTimeout, and retries it while
// it fails transiently and Config.Retry allows.
func (l *Locker) do(ctx context.Context, op func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, l.cfg.RequestTimeout)
		err := op(rctx)
		cancel()
		if err == nil || ctx.Err() != nil || !transient(err) {
			return err
		}
		pause, again := l.cfg.Retry.Backoff(attempt)
		if !again || !sleepCtx(ctx, pause) {
			return err
		}
	}
}

// fail turns the error of a call on key into what the caller sees: ErrClosed
// once the Locker is closed, the caller's context error (joined with the
// last request's error) once ctx ended, and ErrUnavailable otherwise.
func (l *Locker) fail(ctx context.Context, op, key string, err error) error {
	switch {
	case l.ctx.Err() != nil:
		return lock.ErrClosed
	case ctx.Err() != nil:
		if err != nil && !errors.Is(err, ctx.Err()) {
			return fmt.Errorf("zklike: %s %q: %w (last error: %w)", op, key, ctx.Err(), err)
		}
		return fmt.Errorf("zklike: %s %q: %w", op, key, ctx.Err())
	case err == nil:
		return nil
	case errors.Is(err, lock.ErrUnavailable):
		return err
	default:
		return fmt.Errorf("%w: zklike: %s %q: %w", lock.ErrUnavailable, op, key, err)
	}
}

// keepAliveOnce renews lease id once (the test hook may hold it back).
func (l *Locker) keepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	if ch := l.suspended.Load(); ch != nil {
		select {
		case <-*ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return l.cli.KeepAliveOnce(ctx, id)
}

// suspendKeepAlives holds back every keep-alive of this Locker until the
// returned function is called: to etcd the Locker looks like a process
// paused past its TTL, while its other requests still flow.
func (l *Locker) suspendKeepAlives() (resume func()) {
	ch := make(chan struct{})
	l.suspended.Store(&ch)
	return func() {
		l.suspended.Store(nil)
		close(ch)
	}
}

// sleepCtx waits d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
