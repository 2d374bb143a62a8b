package raftlock

import (
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
)

// Group commit: lock operations that arrive while earlier entries are being
// committed share the next log entry. Under light load an operation is
// proposed at once (no added wait); under load, up to maxInflight entries
// are in the Raft pipeline and everything that queued meanwhile rides in the
// next one, so concurrent clients share fsyncs and round trips. The ops of
// one submission stay contiguous and in order (a release and the grant it
// hands over commit together).

const (
	// maxInflight is how many entries the batcher keeps in the Raft
	// pipeline at once.
	maxInflight = 16
	// maxBatchOps bounds the ops of one entry.
	maxBatchOps = 512
)

type submission struct {
	ops     []fsm.Op
	timeout time.Duration
	done    chan applied // buffered 1
}

type batcher struct {
	n     *Node
	queue chan *submission
	slots chan struct{}
}

func newBatcher(n *Node) *batcher {
	return &batcher{n: n, queue: make(chan *submission, 4096), slots: make(chan struct{}, maxInflight)}
}

// submit proposes ops in the next entry and waits for their results.
func (b *batcher) submit(ops []fsm.Op, timeout time.Duration) (*fsm.ApplyResult, error) {
	s := &submission{ops: ops, timeout: timeout, done: make(chan applied, 1)}
	select {
	case b.queue <- s:
	case <-b.n.shutdown:
		return nil, b.n.raftErr(errRaftShutdown)
	}
	a := <-s.done
	return a.res, a.err
}

// run builds entries from queued submissions until the node shuts down.
func (b *batcher) run() {
	defer b.n.wg.Done()
	for {
		var first *submission
		select {
		case first = <-b.queue:
		case <-b.n.shutdown:
			b.drain()
			return
		}
		select { // wait for room in the pipeline; more submissions queue meanwhile
		case b.slots <- struct{}{}:
		case <-b.n.shutdown:
			first.done <- applied{err: b.n.raftErr(errRaftShutdown)}
			b.drain()
			return
		}
		batch := []*submission{first}
		ops := len(first.ops)
		timeout := first.timeout
	collect:
		for ops < maxBatchOps {
			select {
			case s := <-b.queue:
				batch = append(batch, s)
				ops += len(s.ops)
				timeout = min(timeout, s.timeout)
			default:
				break collect
			}
		}
		go b.commit(batch, ops, timeout)
	}
}

func (b *batcher) commit(batch []*submission, nops int, timeout time.Duration) {
	defer func() { <-b.slots }()
	e := fsm.Entry{Ops: make([]fsm.Op, 0, nops)}
	for _, s := range batch {
		e.Ops = append(e.Ops, s.ops...)
	}
	res, err := b.n.apply(e, timeout)
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

// drain fails the submissions still queued at shutdown.
func (b *batcher) drain() {
	for {
		select {
		case s := <-b.queue:
			s.done <- applied{err: b.n.raftErr(errRaftShutdown)}
		default:
			return
		}
	}
}
