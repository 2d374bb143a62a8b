package raftlock

import (
	"context"
	"fmt"
	"sync"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/lock"
)

// Watches: every node's state machine tells the node's watch hub each
// change of a key's holders as it applies it (fsm.SetObserver), so a watch
// on a follower sees what the leader's does, in the same order — it is the
// replicated table — only as late as the follower applies.
//
// A watch registers under the hub's lock and reads the key's holders, and
// the index of the last entry they reflect, before that lock is released;
// the state machine's callbacks take the same lock, so every change of a
// later entry reaches the watch, and those of earlier entries (a callback
// that runs late) are skipped: nothing is missed or told twice.
//
// Each watch's channel is its buffer (Config.WatchBuffer events, plus its
// first holders): the hub never blocks and starts no goroutine per event.
// A watch whose reader falls that far behind gets EventError with
// lock.ErrWatchOverflow (a slot is kept for it) and is closed.

// revisionShift: an event's Revision is its entry's raft index shifted
// left by revisionShift, plus its position among the entry's events (one
// entry can hold several changes of a key: a release and the grant to the
// next waiter). Revision>>revisionShift is the raft index.
const revisionShift = 20

type watchHub struct {
	n      *Node
	mu     sync.Mutex
	closed bool
	byKey  map[string]map[*watch]struct{}
	count  int
	// index and seq number the events of the entry being told.
	index uint64
	seq   uint64
}

type watch struct {
	key     string
	ch      chan lock.Event
	from    uint64 // the raft index of the holders it started with
	stop    func() bool
	session *Session
}

func newWatchHub(n *Node) *watchHub {
	return &watchHub{n: n, byKey: make(map[string]map[*watch]struct{})}
}

// watch opens a watch of key for session s, ended by ctx.
func (h *watchHub) watch(ctx context.Context, s *Session, key string) (<-chan lock.Event, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, lock.ErrClosed
	}
	if h.count >= h.n.cfg.MaxWatchers {
		return nil, fmt.Errorf("raftlock: %d watches already open on node %s (Config.MaxWatchers): %w", h.count, h.n.cfg.ID, lock.ErrUnavailable)
	}
	ls, index := h.n.fsm.Holders(key)
	w := &watch{key: key, ch: make(chan lock.Event, h.n.cfg.WatchBuffer+len(ls)+2), from: index, session: s}
	if !s.addWatch(w) {
		return nil, lock.ErrClosed
	}
	base := index << revisionShift
	for i, l := range ls {
		ev := event(lock.EventHolder, key, l)
		ev.Revision = base + uint64(i)
		w.ch <- ev
	}
	w.ch <- lock.Event{Type: lock.EventSynced, Key: key, Revision: base | (1<<revisionShift - 1)}
	m := h.byKey[key]
	if m == nil {
		m = make(map[*watch]struct{})
		h.byKey[key] = m
	}
	m[w] = struct{}{}
	h.count++
	w.stop = context.AfterFunc(ctx, func() { h.end(w, nil) })
	return w.ch, nil
}

func event(t lock.EventType, key string, l fsm.Lock) lock.Event {
	ev := lock.Event{Type: t, Key: key, Owner: l.Owner, Token: lock.Token(l.Token), Value: l.Value,
		Mode: lock.Mode(l.Mode), Permits: int(l.Permits)}
	return ev
}

// dispatch tells the watches of ev's key about it (the state machine's
// callback, on every node).
func (h *watchHub) dispatch(index uint64, ev fsm.Event) {
	var t lock.EventType
	switch ev.Kind {
	case fsm.EventGranted:
		t = lock.EventGranted
	case fsm.EventReleased:
		t = lock.EventReleased
	case fsm.EventExpired:
		t = lock.EventExpired
	default:
		return // a renewal is not an event
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if index != h.index {
		h.index, h.seq = index, 0
	}
	rev := index<<revisionShift + min(h.seq, 1<<revisionShift-2)
	h.seq++
	for w := range h.byKey[ev.Key] {
		if index <= w.from {
			continue // in the holders it started with
		}
		if len(w.ch) >= cap(w.ch)-1 {
			h.endLocked(w, lock.ErrWatchOverflow)
			continue
		}
		e := event(t, ev.Key, ev.Lock)
		e.Revision = rev
		w.ch <- e
	}
}

// end ends w: with an EventError for err, if not nil, then closing its
// channel. Ending an ended watch does nothing.
func (h *watchHub) end(w *watch, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.endLocked(w, err)
}

func (h *watchHub) endLocked(w *watch, err error) {
	m := h.byKey[w.key]
	if _, ok := m[w]; !ok {
		return
	}
	delete(m, w)
	if len(m) == 0 {
		delete(h.byKey, w.key)
	}
	h.count--
	if w.stop != nil {
		w.stop()
	}
	w.session.removeWatch(w)
	if err != nil {
		w.ch <- lock.Event{Type: lock.EventError, Key: w.key, Err: err} // its slot is kept free
	}
	close(w.ch)
}

// shutdown ends every watch with err and refuses new ones.
func (h *watchHub) shutdown(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, m := range h.byKey {
		for w := range m {
			h.endLocked(w, err)
		}
	}
}

// open returns how many watches are open.
func (h *watchHub) open() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count
}
