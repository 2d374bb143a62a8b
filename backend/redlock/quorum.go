package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// vote is a node's typed answer to a script: granted is its yes (it
// granted, still held, or holds the key), anything else a no.
type vote interface{ granted() bool }

// reply is one node's answer.
type reply[T vote] struct {
	node int
	val  T
	err  error
}

// tally counts the answers of one round.
type tally struct {
	n, quorum   int
	ok, refused int     // nodes that answered yes / no
	errs        []error // one per node that failed, naming it
}

// reached is the one place that decides whether count nodes form a quorum.
func (t tally) reached(count int) bool { return count >= t.quorum }

// won: a quorum answered yes.
func (t tally) won() bool { return t.reached(t.ok) }

// lost: so many answered no that no quorum can say yes.
func (t tally) lost() bool { return !t.reached(t.n - t.refused) }

// answered is the number of nodes that answered at all.
func (t tally) answered() int { return t.ok + t.refused }

// err joins the errors of the nodes that failed. Callers format it with %v:
// a node's context error must not make an unavailable quorum look like the
// caller's own cancellation to errors.Is.
func (t tally) err() error { return errors.Join(t.errs...) }

// round is one request sent to every node in parallel. Its replies are
// collected by collect, possibly in two parts (the first until a quorum
// said yes, the rest in the background).
type round[T vote] struct {
	tally
	l       *Locker
	replies chan reply[T]
	pending int    // replies not collected yet
	heard   []bool // per node: it answered (vals holds its answer)
	vals    []T
}

// broadcast sends req to every node, each bounded by nodeCtx(ctx), on the
// worker pool.
func broadcast[T vote](l *Locker, ctx context.Context, req func(context.Context, *node) (T, error)) *round[T] {
	r := newRound[T](l)
	r.send(ctx, 0, req)
	return r
}

// newRound is a round that expects a reply from every node, none sent yet.
func newRound[T vote](l *Locker) *round[T] {
	n := len(l.nodes)
	return &round[T]{
		tally:   tally{n: n, quorum: l.quorum},
		l:       l,
		replies: make(chan reply[T], n),
		pending: n,
		heard:   make([]bool, n),
		vals:    make([]T, n),
	}
}

// send sends req to the nodes from index from on, each bounded by
// nodeCtx(ctx), on the worker pool (the replies of the nodes before it are
// the caller's to put in r.replies).
func (r *round[T]) send(ctx context.Context, from int, req func(context.Context, *node) (T, error)) {
	l := r.l
	for i, nd := range l.nodes[from:] {
		l.work.Go(func() {
			c, cancel := l.nodeCtx(ctx)
			defer cancel()
			v, err := req(c, nd)
			r.replies <- reply[T]{node: from + i, val: v, err: err}
		})
	}
}

// collect reads replies until every node answered (or failed) or, with
// early, until a quorum said yes: the requests still out are already sent,
// and a later collect reads their answers.
func (r *round[T]) collect(early bool) {
	for r.pending > 0 {
		if early && r.won() {
			return
		}
		r.collect1()
	}
}

// collect1 reads one reply.
func (r *round[T]) collect1() {
	rp := <-r.replies
	r.pending--
	if rp.err != nil {
		nd := r.l.nodes[rp.node]
		r.errs = append(r.errs, fmt.Errorf("node %d (%s): %w", nd.idx, nd.addr, rp.err))
		return
	}
	r.heard[rp.node] = true
	r.vals[rp.node] = rp.val
	if rp.val.granted() {
		r.ok++
	} else {
		r.refused++
	}
}

// validWithin is the Redlock validity rule: a grant whose round took
// elapsed is usable only if some of its ttl is left after that and the
// clock drift allowance.
func (l *Locker) validWithin(ttl, elapsed time.Duration) bool {
	return ttl-elapsed-lock.Drift(ttl, l.cfg.DriftFactor) > 0
}
