package raftlock

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/lock"
)

// Group commit: lock operations that arrive while the Raft pipeline is full
// share the next log entry. Under light load a submitter commits its own
// entry at once, on its own goroutine (no added hop, no added wait); when
// maxInflight entries are already being committed, submissions queue, and
// the first committer to finish takes everything queued into one entry. So
// concurrent clients share commits and round trips, while a lone client pays
// exactly one Raft commit per operation. The ops of one submission stay
// contiguous and in order (a release and the grant it hands over commit
// together).
//
// One bad op must never fail the others it would share an entry with: the
// state machine rejects a whole entry that does not decode. So every op is
// checked against the state machine's own limits (fsm.Op.Validate) before
// it joins a batch, and a submission with an op outside them fails alone.
// Should the state machine reject an entry anyway (validation missed
// something), the batch is committed again in halves until the rejected
// submission is alone: the others commit and are answered normally.

const (
	// maxInflight is how many entries may be in the Raft pipeline at once
	// before submissions start to coalesce. One: every fsync then carries
	// all that arrived during the previous one, which is what bounds
	// throughput on a disk-bound log; a lone client commits at once
	// whatever the value. docs/raftlock.md has the measurements behind it.
	maxInflight = 1
	// maxBatchOps bounds the ops of one entry.
	maxBatchOps = 512
)

type submission struct {
	ops     []fsm.Op
	timeout time.Duration
	done    chan applied // buffered 1
}

// urgent reports whether every op of ops keeps something alive (a lease
// renewal, a session keep-alive): such a submission joins the next entry
// ahead of queued acquires and releases. A burst of acquires — a client
// loading a million keys — must not hold back keep-alives until leases
// expire. No order is lost: ops of different submissions come from
// callers that have not waited for each other.
func urgent(ops []fsm.Op) bool {
	for i := range ops {
		if t := ops[i].Type; t != fsm.OpRenew && t != fsm.OpSessionRenew {
			return false
		}
	}
	return len(ops) > 0
}

// The lock package's client-facing limits are within the state machine's,
// so that an op built from a request that passed lock validation always
// passes fsm.Op.Validate. (Each constant below is negative, and so does
// not compile, if a lock limit grows past the state machine's.)
const (
	_ = uint(fsm.MaxKeyLen - lock.MaxKeyLen)
	_ = uint(fsm.MaxOwnerLen - lock.MaxOwnerLen)
	_ = uint(fsm.MaxHandleLen - lock.MaxHandleLen)
	_ = uint(fsm.MaxValueLen - lock.MaxValueLen)
)

type batcher struct {
	n *Node

	mu       sync.Mutex
	pending  []*submission
	urgent   []*submission // keep-alives, taken before pending (see urgent)
	inflight int
	// check validates one op before it joins a batch: fsm.Op.Validate.
	// Tests replace it to let through an op the state machine rejects.
	check atomic.Pointer[func(fsm.Op) error]
}

func newBatcher(n *Node) *batcher {
	b := &batcher{n: n}
	check := fsm.Op.Validate
	b.check.Store(&check)
	return b
}

// submit commits ops (in an entry of their own or shared with others) and
// returns their results. Ops outside the state machine's limits are refused
// before they join a batch, with the error of checkOps.
func (b *batcher) submit(ops []fsm.Op, timeout time.Duration) (*fsm.ApplyResult, error) {
	if err := b.checkOps(ops...); err != nil {
		b.n.log.Warn("op refused before batching", "err", err)
		return nil, err
	}
	s := &submission{ops: ops, timeout: timeout, done: make(chan applied, 1)}
	b.mu.Lock()
	if urgent(ops) {
		b.urgent = append(b.urgent, s)
	} else {
		b.pending = append(b.pending, s)
	}
	if b.inflight < maxInflight {
		b.inflight++
		batch := b.takeLocked()
		b.mu.Unlock()
		b.commit(batch)
		b.next()
	} else {
		b.mu.Unlock()
	}
	a := <-s.done
	return a.res, a.err
}

// next releases a pipeline slot, or, if submissions queued meanwhile, keeps
// it and commits them on a new goroutine (the caller has its result).
func (b *batcher) next() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) == 0 && len(b.urgent) == 0 {
		b.inflight--
		return
	}
	batch := b.takeLocked()
	go func() {
		b.commit(batch)
		b.next()
	}()
}

// takeLocked removes up to maxBatchOps ops' worth of queued submissions,
// the urgent ones first.
func (b *batcher) takeLocked() []*submission {
	var batch []*submission
	ops := 0
	for _, q := range []*[]*submission{&b.urgent, &b.pending} {
		n := 0
		for n < len(*q) && (len(batch)+n == 0 || ops+len((*q)[n].ops) <= maxBatchOps) {
			ops += len((*q)[n].ops)
			n++
		}
		batch = append(batch, (*q)[:n]...)
		*q = (*q)[n:]
		if len(*q) == 0 {
			*q = nil
		}
	}
	return batch
}

// commit applies the submissions' ops as one entry and hands each its
// results. An entry the state machine rejects (it does not decode: an op
// that validation should have stopped) is committed again in halves, so
// that only the submission with the offending op fails.
func (b *batcher) commit(batch []*submission) {
	batch = b.n.withinGate(batch)
	if len(batch) == 0 {
		return
	}
	e := fsm.Entry{}
	timeout := batch[0].timeout
	for _, s := range batch {
		e.Ops = append(e.Ops, s.ops...)
		timeout = min(timeout, s.timeout)
	}
	res, err := b.n.apply(e, timeout)
	if err != nil && errors.Is(err, fsm.ErrMalformed) {
		// The rejected entry changed nothing (Apply decodes the whole
		// entry before applying any op), so committing its submissions
		// again is safe. Each level of halving costs two commits.
		b.n.log.Error("state machine rejected an entry that passed validation", "submissions", len(batch), "ops", len(e.Ops), "err", err)
		if len(batch) > 1 {
			half := len(batch) / 2
			b.commit(batch[:half])
			b.commit(batch[half:])
			return
		}
	}
	i := 0
	for _, s := range batch {
		if err != nil {
			s.done <- applied{err: err}
			continue
		}
		s.done <- applied{res: &fsm.ApplyResult{Index: res.Index, Results: res.Results[i : i+len(s.ops)]}}
		i += len(s.ops)
	}
}

// admit checks ops that start new work (a client's acquire as it queues,
// a session's open) against what the cluster offers now (the gate's
// Offer), then as checkOps does. Ops that follow from admitted work (a
// queued waiter's grant, a release) are checked by checkOps alone, against
// what the cluster writes (the gate's Format): a downgrade that stops
// offering a feature must not refuse the release whose entry grants an
// earlier waiter.
func (b *batcher) admit(ops ...fsm.Op) error {
	g := b.n.fsm.Gate()
	for i := range ops {
		if err := gateRefuses(&ops[i], g, false, false); err != nil {
			return err
		}
	}
	return b.checkOps(ops...)
}

// checkOps validates ops with the state machine's limits (b.check:
// fsm.Op.Validate). An op over a field's limit gives a *lock.ValidationError
// wrapping the field's sentinel (ErrInvalidKey, ErrInvalidOwner,
// ErrInvalidHandle, ErrInvalidValue), so that the caller is told what was
// wrong (400 invalid_* at the gateway); any other failure is returned
// wrapped.
func (b *batcher) checkOps(ops ...fsm.Op) error {
	check := *b.check.Load()
	g, sessions := b.n.fsm.Gate(), b.n.fsm.NumSessions() > 0
	for i := range ops {
		if err := gateRefuses(&ops[i], g, true, sessions); err != nil {
			return err
		}
	}
	for _, op := range ops {
		err := check(op)
		if err == nil {
			continue
		}
		var le *fsm.LimitError
		if errors.As(err, &le) {
			sentinel := map[string]error{
				fsm.FieldKey: lock.ErrInvalidKey, fsm.FieldOwner: lock.ErrInvalidOwner,
				fsm.FieldHandle: lock.ErrInvalidHandle, fsm.FieldValue: lock.ErrInvalidValue,
			}[le.Field]
			if sentinel != nil {
				return &lock.ValidationError{Field: le.Field, Value: fmt.Sprintf("(%d bytes)", le.Len),
					Reason: fmt.Sprintf("is longer than the maximum of %d bytes for a %s", le.Limit, op.Type), Err: sentinel}
			}
		}
		return fmt.Errorf("raftlock: %s op refused: %w", op.Type, err)
	}
	return nil
}
