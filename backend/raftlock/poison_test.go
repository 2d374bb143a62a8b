package raftlock

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// TestPoisonBatchRetry: an op that passes the leader's validation but that
// the state machine rejects (here let through by disabling the check) shares
// an entry with good ops. The good ops must still commit and be answered
// normally; only the bad op's submitter gets an error, and the rejection is
// logged at Error. Before the batcher retried a rejected entry without the
// offending op, every submission of the entry failed.
func TestPoisonBatchRetry(t *testing.T) {
	errs := &errorLog{}
	c := startCluster(t, 1, func(cfg *Config) {
		cfg.Logger = slog.New(teeHandler{cfg.Logger.Handler(), errs})
	})
	n := leader(t, c)
	pass := func(fsm.Op) error { return nil }
	n.batch.check.Store(&pass)

	h := lock.NewHandle()
	acquire := func(key string) fsm.Op {
		return fsm.Op{Type: fsm.OpAcquire, Key: key, Owner: "good", Handle: h, TTL: time.Minute}
	}
	bad := func(key string) fsm.Op { // a handle over the state machine's limit
		return fsm.Op{Type: fsm.OpRelease, Key: key, Handle: strings.Repeat("a", fsm.MaxHandleLen+1), Token: 1}
	}
	// Submissions as the batcher would have coalesced them: good ones
	// (one of two ops, like a release and its handoff), bad ones among
	// them, at both ends and in the middle.
	opss := [][]fsm.Op{
		{bad("b0")},
		{acquire("g1")},
		{acquire("g2"), acquire("g3")},
		{bad("b1")},
		{acquire("g4")},
		{acquire("g5")},
		{bad("b2")},
		{acquire("g6")},
	}
	var batch []*submission
	for _, ops := range opss {
		batch = append(batch, &submission{ops: ops, timeout: 10 * time.Second, done: make(chan applied, 1)})
	}
	n.batch.commit(batch)

	var last uint64
	for i, s := range batch {
		a := <-s.done
		if s.ops[0].Type == fsm.OpRelease {
			if a.err == nil || !errors.Is(a.err, fsm.ErrMalformed) {
				t.Errorf("bad submission %d (%s): %+v, want an error matching fsm.ErrMalformed", i, s.ops[0].Key, a)
			}
			continue
		}
		if a.err != nil {
			t.Errorf("good submission %d (%s) failed beside the bad ones: %v", i, s.ops[0].Key, a.err)
			continue
		}
		if len(a.res.Results) != len(s.ops) {
			t.Fatalf("good submission %d got %d results for %d ops", i, len(a.res.Results), len(s.ops))
		}
		for j, r := range a.res.Results {
			key := s.ops[j].Key
			l, ok := n.fsm.Lock(key)
			if r.Status != fsm.StatusOK || !ok || l.Token != r.Token {
				t.Errorf("%s: result %+v, lock table %+v %v; want granted", key, r, l, ok)
			}
			// Order kept: the submissions commit in the order they came.
			if r.Token <= last {
				t.Errorf("%s: token %d after %d: submissions committed out of order", key, r.Token, last)
			}
			last = r.Token
		}
	}
	if got := errs.count("state machine rejected an entry"); got == 0 {
		t.Error("the rejected entry was not logged at Error")
	}
}

// TestPoisonOpRefusedBeforeBatch: an op over the state machine's limits
// never reaches the Raft log: the batcher refuses it with the field's
// validation error (a membership change with a 2,000-byte server id used to
// become an entry that the state machine rejected, with every op batched
// with it). The same holds for a release and renew whose lease is
// oversize, through a Session, and a waiter queued for the key is not
// disturbed.
func TestPoisonOpRefusedBeforeBatch(t *testing.T) {
	c := startCluster(t, 1)
	n := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	before := n.raft.LastIndex()
	for _, tc := range []struct {
		op   fsm.Op
		want error
	}{
		{fsm.Op{Type: fsm.OpSetMember, Key: strings.Repeat("n", fsm.MaxKeyLen+1), Value: []byte("127.0.0.1:1")}, lock.ErrInvalidKey},
		{fsm.Op{Type: fsm.OpRelease, Key: "k", Handle: strings.Repeat("a", fsm.MaxHandleLen+1), Token: 1}, lock.ErrInvalidHandle},
		{fsm.Op{Type: fsm.OpAcquire, Key: "k", Owner: strings.Repeat("o", fsm.MaxOwnerLen+1), Handle: lock.NewHandle(), TTL: time.Second}, lock.ErrInvalidOwner},
		{fsm.Op{Type: fsm.OpAppendData, Key: "d", Value: make([]byte, fsm.MaxValueLen+1)}, lock.ErrInvalidValue},
	} {
		_, err := n.applyCtx(ctx, tc.op)
		var ve *lock.ValidationError
		if !errors.Is(err, tc.want) || !errors.As(err, &ve) {
			t.Errorf("%s op over a limit: %v, want a *lock.ValidationError matching %v", tc.op.Type, err, tc.want)
		}
	}
	if after := n.raft.LastIndex(); after != before {
		t.Errorf("refused ops reached the log: last index %d → %d", before, after)
	}

	// Through a Session: a holder, a waiter queued behind it, and bad
	// renews and releases naming the key.
	s := n.NewSession()
	defer s.Close()
	held, err := s.Acquire(ctx, "q", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	waiter := make(chan error, 1)
	var wl *lock.Lease
	go func() {
		var err error
		wl, err = n.NewSession().Acquire(ctx, "q", lock.AcquireOptions{TTL: time.Minute})
		waiter <- err
	}()
	for waiting := 0; waiting == 0; {
		n.sched.mu.Lock()
		if q := n.sched.queues["q"]; q != nil {
			waiting = len(q.waiters)
		}
		n.sched.mu.Unlock()
		if waiting == 0 {
			select {
			case err := <-waiter:
				t.Fatalf("the waiter returned before the key was free: %v", err)
			case <-time.After(time.Millisecond):
			}
		}
	}
	long := strings.Repeat("a", 300)
	for _, bad := range []*lock.Lease{
		kit.NewLease(kit.Grant{Key: "q", Token: held.Token, Handle: long, TTL: time.Minute, Sent: time.Now()}),
		kit.NewLease(kit.Grant{Key: strings.Repeat("q", 2000), Token: held.Token, Handle: held.Handle, TTL: time.Minute, Sent: time.Now()}),
	} {
		var ve *lock.ValidationError
		if err := s.Release(ctx, bad); !errors.As(err, &ve) {
			t.Errorf("Release(key %d bytes, handle %d bytes) = %v, want a validation error", len(bad.Key), len(bad.Handle), err)
		}
		if err := s.Renew(ctx, bad, time.Minute); !errors.As(err, &ve) {
			t.Errorf("Renew(key %d bytes, handle %d bytes) = %v, want a validation error", len(bad.Key), len(bad.Handle), err)
		}
	}
	select {
	case err := <-waiter:
		t.Fatalf("the waiter returned while the key was held: %v", err)
	default:
	}
	if err := s.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	if err := <-waiter; err != nil || wl.Token <= held.Token {
		t.Fatalf("the waiter behind the bad requests: %v (lease %+v)", err, wl)
	}
}

// errorLog counts the Error records of a logger, by message.
type errorLog struct {
	mu   sync.Mutex
	msgs []string
}

func (e *errorLog) count(prefix string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, m := range e.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// teeHandler passes records on and notes the Error ones in log.
type teeHandler struct {
	slog.Handler
	log *errorLog
}

func (h teeHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.log.mu.Lock()
		h.log.msgs = append(h.log.msgs, r.Message)
		h.log.mu.Unlock()
	}
	return h.Handler.Handle(ctx, r)
}

func (h teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return teeHandler{h.Handler.WithAttrs(as), h.log}
}

func (h teeHandler) WithGroup(name string) slog.Handler {
	return teeHandler{h.Handler.WithGroup(name), h.log}
}
