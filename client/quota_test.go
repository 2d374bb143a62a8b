package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/lock"
)

// The client against a gateway that refuses what an identity's quotas and
// rates refuse: opens of its session (quota_exceeded, too_many_sessions,
// forbidden) and acquires sent too fast (rate_limited). The gateway is a
// real one, over a one-node raftlock cluster whose Node is wrapped so that
// it refuses with the lock contract's errors; the gateway maps them onto
// the protocol's codes (wire.CodeOf) as it does any backend's.

// refusingNode is a raftlock Node (every interface of it: sessions,
// multikey, watches) whose OpenSession answers sessionErr while it is set,
// and whose acquires answer lock.ErrRateLimited while rateLimit is above 0
// (counting it down).
type refusingNode struct {
	*raftlock.Node
	mu         sync.Mutex
	sessionErr error
	opens      []time.Time // when each OpenSession came, refused or not
	rateLimit  atomic.Int32
	acquires   atomic.Int32 // TryAcquire and Acquire calls, refused or not
}

func (n *refusingNode) refuseSessions(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sessionErr = err
}

// openTimes are the arrival times of the OpenSession calls so far.
func (n *refusingNode) openTimes() []time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]time.Time(nil), n.opens...)
}

func (n *refusingNode) OpenSession(ctx context.Context, opts lock.SessionOptions) (*lock.Session, error) {
	n.mu.Lock()
	n.opens = append(n.opens, time.Now())
	err := n.sessionErr
	n.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("test gateway: identity %q: %w", opts.Owner, err)
	}
	return n.Node.OpenSession(ctx, opts)
}

func (n *refusingNode) rateLimited(key string) error {
	n.acquires.Add(1)
	if n.rateLimit.Add(-1) >= 0 {
		return fmt.Errorf("test gateway: acquire %q: %w", key, lock.ErrRateLimited)
	}
	return nil
}

func (n *refusingNode) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	if err := n.rateLimited(key); err != nil {
		return nil, err
	}
	return n.Node.TryAcquire(ctx, key, opts)
}

func (n *refusingNode) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	if err := n.rateLimited(key); err != nil {
		return nil, err
	}
	return n.Node.Acquire(ctx, key, opts)
}

// startRefusingGateway starts a one-node raftlock cluster and serves a
// gateway over its node, wrapped in a refusingNode, on a loopback port.
func startRefusingGateway(t *testing.T) (*refusingNode, string) {
	t.Helper()
	rc := startRaftN(t, 1)
	n := &refusingNode{Node: raftLeader(t, rc)}
	g := gateway.New(n, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		g.Close()
		srv.Close() // the node stops with its cluster
	})
	return n, strings.TrimPrefix(srv.URL, "http://")
}

// warnings is a slog handler that counts the Warn records whose message
// contains match, and writes every record at Warn and above to t.Log.
type warnings struct {
	t     testing.TB
	match string
	n     atomic.Int32
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && strings.Contains(r.Message, w.match) {
		w.n.Add(1)
	}
	w.t.Log(r.Level, r.Message)
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

// TestSessionRefusedFallsBack: a gateway that refuses the client's session
// (the identity's session quota, or the sessions cap) does not fail the
// acquires that wanted it: they go ahead without a session, each lease
// renewing itself past its TTL; the client warns once, counts the refusal
// and the fallbacks, does not ask again before SessionRetry, and opens its
// session at the first acquire after it once the gateway allows one.
func TestSessionRefusedFallsBack(t *testing.T) {
	for name, refusal := range map[string]error{
		"quota_exceeded":    lock.ErrQuotaExceeded,
		"too_many_sessions": lock.ErrTooManySessions,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			n, addr := startRefusingGateway(t)
			n.refuseSessions(refusal)
			const ttl, retry = 600 * time.Millisecond, 1500 * time.Millisecond
			w := &warnings{t: t, match: "refused the client's session"}
			c := newClient(t, []string{addr}, client.Options{SessionTTL: ttl, SessionRetry: retry, Logger: slog.New(w)})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			var leases []*lock.Lease
			for i := range 3 {
				l, err := c.Acquire(ctx, fmt.Sprintf("refused/%d", i), lock.AcquireOptions{})
				if err != nil {
					t.Fatalf("acquire %d with the session refused: %v", i, err)
				}
				if l.Session() != nil {
					t.Fatalf("lease %d is in a session the gateway refused", i)
				}
				if l.TTL() != ttl {
					t.Errorf("lease %d has TTL %v, want the session's %v", i, l.TTL(), ttl)
				}
				leases = append(leases, l)
			}
			all, err := c.TryAcquireAll(ctx, []string{"refused/x", "refused/y"}, lock.AcquireOptions{})
			if err != nil {
				t.Fatalf("try-acquire-all with the session refused: %v", err)
			}
			leases = append(leases, all...)
			if got := len(n.openTimes()); got != 1 {
				t.Errorf("%d opens of the session within SessionRetry, want 1", got)
			}
			st := c.SessionStats()
			if st.Refused != 1 || st.Fallbacks != 4 || st.Opened != 0 || !st.FallingBack {
				t.Errorf("SessionStats %+v, want 1 refused, 4 fallbacks, none opened, falling back", st)
			}
			if got := w.n.Load(); got != 1 {
				t.Errorf("%d warnings of the refusal, want 1", got)
			}

			// Each lease renews itself: the gateway sees lease renewals
			// until the first deadline has long passed, and the leases
			// still hold their keys on the server.
			first := leases[0].Deadline()
			lr0, _ := renewals(t, addr)
			for lr, _ := renewals(t, addr); lr < lr0+3*len(leases); lr, _ = renewals(t, addr) {
				if ctx.Err() != nil {
					t.Fatalf("%d lease renewals after the fallback, want %d", lr-lr0, 3*len(leases))
				}
				time.Sleep(20 * time.Millisecond)
			}
			if !time.Now().After(first) {
				t.Fatalf("three renewals of every lease before the first lease's TTL ran out")
			}
			other := newClient(t, []string{addr}, client.Options{NoSession: true})
			for i, l := range leases {
				if err := l.Err(); err != nil {
					t.Fatalf("lease %d ended: %v", i, err)
				}
				if !l.Deadline().After(first) {
					t.Errorf("lease %d: its deadline did not move past the first one", i)
				}
				info, err := other.Inspect(ctx, l.Key)
				if err != nil || info.Token != l.Token {
					t.Fatalf("lease %d past its TTL on the server: %+v %v", i, info, err)
				}
			}

			// The gateway allows the session again: the first acquire
			// after SessionRetry opens it, none before.
			n.refuseSessions(nil)
			var in *lock.Lease
			for i := 0; in == nil; i++ {
				l, err := c.Acquire(ctx, fmt.Sprintf("retried/%d", i), lock.AcquireOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if l.Session() != nil {
					in = l
				} else {
					time.Sleep(50 * time.Millisecond)
				}
			}
			opens := n.openTimes()
			if len(opens) != 2 {
				t.Fatalf("%d opens of the session, want the refused one and one after SessionRetry", len(opens))
			}
			if gap := opens[1].Sub(opens[0]); gap < retry {
				t.Errorf("the session was asked for again %v after the refusal, before SessionRetry %v", gap, retry)
			}
			st = c.SessionStats()
			if st.Opened != 1 || st.FallingBack || st.Refused != 1 {
				t.Errorf("SessionStats %+v after the session opened, want 1 opened, not falling back", st)
			}
			if in.TTL() != ttl {
				t.Errorf("the session's lease has TTL %v, want %v", in.TTL(), ttl)
			}
			for i, l := range leases {
				if err := l.Err(); err != nil {
					t.Errorf("fallback lease %d ended once the session opened: %v", i, err)
				}
			}
			if got := w.n.Load(); got != 1 {
				t.Errorf("%d warnings of the refusal, want 1", got)
			}
		})
	}
}

// TestSessionForbiddenFails: a gateway that forbids the client's session
// fails the acquire (the identity may not do it; falling back would hide
// that), and counts no fallback.
func TestSessionForbiddenFails(t *testing.T) {
	n, addr := startRefusingGateway(t)
	n.refuseSessions(lock.ErrForbidden)
	c := newClient(t, []string{addr}, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Acquire(ctx, "forbidden/a", lock.AcquireOptions{})
	if !errors.Is(err, lock.ErrForbidden) {
		t.Fatalf("acquire with the session forbidden: %v, want ErrForbidden", err)
	}
	if st := c.SessionStats(); st.Fallbacks != 0 || st.Refused != 0 || st.FallingBack {
		t.Errorf("SessionStats %+v, want no refusal or fallback counted", st)
	}
	// A lease with a TTL of its own needs no session.
	if _, err := c.TryAcquire(ctx, "forbidden/b", lock.AcquireOptions{TTL: time.Second}); err != nil {
		t.Fatalf("acquire outside the session: %v", err)
	}
}

// TestRateLimitedAcquire: a try-acquire answered rate_limited returns a
// *client.RateLimitedError matching lock.ErrRateLimited; a waiting
// acquire waits and tries again until it is served, within its context.
func TestRateLimitedAcquire(t *testing.T) {
	n, addr := startRefusingGateway(t)
	const pause = 150 * time.Millisecond
	c := newClient(t, []string{addr}, client.Options{Backoff: lock.ConstantBackoff{Interval: pause}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	n.rateLimit.Store(1)
	_, err := c.TryAcquire(ctx, "rate/a", lock.AcquireOptions{})
	var rl *client.RateLimitedError
	if !errors.Is(err, lock.ErrRateLimited) || !errors.As(err, &rl) || rl.Key != "rate/a" {
		t.Fatalf("try-acquire refused rate_limited: %v, want a *client.RateLimitedError for rate/a", err)
	}
	if errors.Is(err, lock.ErrUnavailable) || errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("rate_limited %v matches another sentinel", err)
	}
	if _, err := c.TryAcquire(ctx, "rate/a", lock.AcquireOptions{}); err != nil {
		t.Fatalf("try-acquire once the rate allows: %v", err)
	}

	for _, opts := range []lock.AcquireOptions{{}, {TTL: time.Second}} { // in the session, and a lease of its own
		n.rateLimit.Store(2)
		before := n.acquires.Load()
		start := time.Now()
		l, err := c.Acquire(ctx, fmt.Sprintf("rate/b-%v", opts.TTL), opts)
		if err != nil {
			t.Fatalf("acquire refused rate_limited twice: %v, want it to wait and be granted", err)
		}
		if got := n.acquires.Load() - before; got != 3 {
			t.Errorf("the gateway saw %d acquires, want the two refused and the granted one", got)
		}
		if took := time.Since(start); took < 2*pause {
			t.Errorf("acquire took %v, less than the two waits of %v", took, pause)
		}
		if err := c.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}

	// A context that ends while the acquire waits out the rate: the error
	// says both.
	n.rateLimit.Store(1 << 30)
	short, cancelShort := context.WithTimeout(ctx, 400*time.Millisecond)
	defer cancelShort()
	_, err = c.Acquire(short, "rate/c", lock.AcquireOptions{})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lock.ErrRateLimited) {
		t.Fatalf("acquire rate-limited past its context: %v, want DeadlineExceeded and ErrRateLimited", err)
	}
}
