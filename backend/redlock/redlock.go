package redlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lockgate/lockgate/internal/lifecycle"
	"github.com/lockgate/lockgate/internal/localgate"
	"github.com/lockgate/lockgate/internal/workerpool"
	"github.com/lockgate/lockgate/lock"
)

// Locker is a lock.Locker over N independent Redis masters (Redlock; N = 1
// is single-Redis locking). It is safe for concurrent use.
type Locker struct {
	cfg    Config
	quorum int
	nodes  []*node

	// life counts the calls and the background work that use the clients;
	// ctx is its context, which ends at Close: it stops waits and
	// keep-alives.
	life *lifecycle.State
	ctx  context.Context

	mu    sync.Mutex
	chans map[string]*channelState
	// work runs the requests to the nodes and their background follow-ups
	// on reused goroutines, whose stacks the Redis client has grown.
	work *workerpool.Pool
	gate *localgate.Sequence

	// releasing: per key, this Locker's release still in flight on some
	// nodes (Release returns once a quorum answered).
	releasing map[string]*inflight

	// Contended attempts (firstmaster.go), guarded by mu: until
	// firstDownUntil they skip node 0's stage; contended holds the keys
	// this Locker released while a waiter of another Locker wanted them.
	firstDownUntil time.Time
	firstFailures  int
	contended      map[string]time.Time

	// The wanted signal (wanted.go). want: per key, the live leases this
	// Locker tracks and its Acquire calls in progress, guarded by mu.
	// wantChannel is this Locker's own pub/sub channel, subscribed once
	// (wantOnce); wantReady closes when enough nodes confirmed it
	// (wantNodes of them, guarded by mu).
	want        map[string]*wantState
	wantChannel string
	wantOnce    sync.Once
	wantReady   chan struct{}
	wantNodes   int
}

var (
	_ lock.Locker         = (*Locker)(nil)
	_ lock.WantedSignaler = (*Locker)(nil)
)

// New connects to the nodes of cfg (lazily: no request is made until the
// first call) and returns a Locker.
func New(cfg Config) (*Locker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	life := lifecycle.New()
	ctx := life.Context()
	l := &Locker{
		cfg:    cfg,
		quorum: len(cfg.Addrs)/2 + 1,
		life:   life,
		ctx:    ctx,
		chans:  make(map[string]*channelState),
		work:   workerpool.New(),

		releasing: make(map[string]*inflight),
		contended: make(map[string]time.Time),

		want:        make(map[string]*wantState),
		wantChannel: wantedChannelFor(cfg.Prefix, lock.NewHandle()[:16]),
		wantReady:   make(chan struct{}),
	}
	l.gate = localgate.NewSequence(localgate.Backend{Locker: l, Ctx: ctx,
		Attempt: l.attemptOnce, Subscribe: l.subscribe, Retry: cfg.Retry, Handoff: l.handoff, Release: l.release, GaveUp: l.gaveUp, Discard: l.releaseQuietly})
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

// keys of one lock.
type keys struct {
	lock, fence, meta, channel string
	// queue is the first master's queue of waiting Lockers, turn the
	// Locker it told last (firstmaster.go).
	queue, turn string
}

func (l *Locker) keysFor(key string) keys {
	p := l.cfg.Prefix
	return keys{
		lock:    p + ":lock:{" + key + "}",
		fence:   p + ":fence:{" + key + "}",
		meta:    p + ":meta:{" + key + "}",
		channel: p + ":released:{" + key + "}",
		queue:   p + ":queue:{" + key + "}",
		turn:    p + ":turn:{" + key + "}",
	}
}

func (l *Locker) abortKey(key, attempt string) string {
	return l.cfg.Prefix + ":abort:{" + key + "}:" + attempt
}

// releasedKey is the tombstone a release leaves for its handle
// (release.lua), which refuses that handle's acquires still in flight.
func (l *Locker) releasedKey(key, handle string) string {
	return l.cfg.Prefix + ":gone:{" + key + "}:" + handle
}

// nodeCtx bounds one request to a node. It is detached from the caller's
// cancellation: a request that was sent is always seen through, so that its
// outcome is known and can be undone.
func (l *Locker) nodeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), l.cfg.NodeTimeout)
}

// Close implements lock.Locker: waiters return ErrClosed, auto-renewals
// stop, and once in-flight calls have finished the pub/sub connections and
// clients are closed. Held leases run out at their TTL unless released
// first (through another Locker rebuilt with kit.NewLease).
func (l *Locker) Close() error {
	if !l.life.Close() {
		return nil
	}
	l.work.Close()
	var errs []error
	for _, n := range l.nodes {
		errs = append(errs, n.close())
	}
	return errors.Join(errs...)
}
