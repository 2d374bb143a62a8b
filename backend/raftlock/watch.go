package raftlock

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
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
//
// A prefix watch (lock.PrefixWatcher) sees every key starting with its
// prefix. Prefix watches are few (a console's), so they are kept in one
// set that dispatch scans for every event, beside the per-key map; they
// count toward Config.MaxWatchers and follow the same buffer and overflow
// rules. One starts at the applied index read under the hub's lock (its
// EventSynced's Revision), with no holders: later entries' changes reach
// it, earlier ones' are skipped, as for a key watch.

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
	// prefixes are the prefix watches, scanned by dispatch per event.
	prefixes map[*watch]struct{}
	count    int
	// index and seq number the events of the entry being told.
	index uint64
	seq   uint64
}

type watch struct {
	key     string // the key, or a prefix watch's prefix
	prefix  bool
	ch      chan lock.Event
	from    uint64 // the raft index of the holders it started with
	stop    func() bool
	session *Session
}

func newWatchHub(n *Node) *watchHub {
	return &watchHub{n: n, byKey: make(map[string]map[*watch]struct{}), prefixes: make(map[*watch]struct{})}
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

// watchPrefix opens a watch of every key starting with prefix for session
// s, ended by ctx.
func (h *watchHub) watchPrefix(ctx context.Context, s *Session, prefix string) (<-chan lock.Event, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, lock.ErrClosed
	}
	if h.count >= h.n.cfg.MaxWatchers {
		return nil, fmt.Errorf("raftlock: %d watches already open on node %s (Config.MaxWatchers): %w", h.count, h.n.cfg.ID, lock.ErrUnavailable)
	}
	index := h.n.fsm.AppliedIndex()
	w := &watch{key: prefix, prefix: true, ch: make(chan lock.Event, h.n.cfg.WatchBuffer+2), from: index, session: s}
	if !s.addWatch(w) {
		return nil, lock.ErrClosed
	}
	w.ch <- lock.Event{Type: lock.EventSynced, Key: prefix, Revision: index<<revisionShift | (1<<revisionShift - 1)}
	h.prefixes[w] = struct{}{}
	h.count++
	w.stop = context.AfterFunc(ctx, func() { h.end(w, nil) })
	return w.ch, nil
}

func event(t lock.EventType, key string, l fsm.Lock) lock.Event {
	ev := lock.Event{Type: t, Key: key, Owner: plainOwner(l.Owner), Token: lock.Token(l.Token), Value: l.Value,
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
		h.sendLocked(w, index, rev, t, ev)
	}
	for w := range h.prefixes {
		if strings.HasPrefix(ev.Key, w.key) {
			h.sendLocked(w, index, rev, t, ev)
		}
	}
}

// sendLocked gives w the event, unless it started after index; a watch
// that has no room left for it ends with lock.ErrWatchOverflow.
func (h *watchHub) sendLocked(w *watch, index, rev uint64, t lock.EventType, ev fsm.Event) {
	if index <= w.from {
		return // in the state it started with
	}
	if len(w.ch) >= cap(w.ch)-1 {
		h.endLocked(w, lock.ErrWatchOverflow)
		return
	}
	e := event(t, ev.Key, ev.Lock)
	e.Revision = rev
	w.ch <- e
}

// end ends w: with an EventError for err, if not nil, then closing its
// channel. Ending an ended watch does nothing.
func (h *watchHub) end(w *watch, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.endLocked(w, err)
}

func (h *watchHub) endLocked(w *watch, err error) {
	if w.prefix {
		if _, ok := h.prefixes[w]; !ok {
			return
		}
		delete(h.prefixes, w)
	} else {
		m := h.byKey[w.key]
		if _, ok := m[w]; !ok {
			return
		}
		delete(m, w)
		if len(m) == 0 {
			delete(h.byKey, w.key)
		}
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
	for w := range h.prefixes {
		h.endLocked(w, err)
	}
}

// open returns how many watches are open.
func (h *watchHub) open() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count
}

var (
	_ lock.PrefixWatcher = (*Session)(nil)
	_ lock.PrefixWatcher = (*Node)(nil)
	_ lock.PrefixWatcher = (*clusterLocker)(nil)
)

// WatchPrefix implements lock.PrefixWatcher: it streams the changes of
// every key starting with prefix ("" for all) from this node's applied
// state, opened as Watch opens a key's watch (on the leader only, after
// confirming with a quorum that it leads; a follower answers with a
// *lock.NotLeaderError) and ended by the same things. It starts with
// EventSynced, without holders. It counts toward Config.MaxWatchers and
// ends with lock.ErrWatchOverflow when it falls Config.WatchBuffer events
// behind.
func (s *Session) WatchPrefix(ctx context.Context, prefix string) (<-chan lock.Event, error) {
	if s.ctx.Err() != nil {
		return nil, lock.ErrClosed
	}
	if err := kit.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.n.verifyLeader(); err != nil {
		return nil, err
	}
	return s.n.watches.watchPrefix(ctx, s, prefix)
}

// WatchPrefix implements lock.PrefixWatcher (Session.WatchPrefix).
func (n *Node) WatchPrefix(ctx context.Context, prefix string) (<-chan lock.Event, error) {
	return n.session.WatchPrefix(ctx, prefix)
}

// WatchPrefix implements lock.PrefixWatcher on the current leader's
// applied state, as Watch does.
func (cl *clusterLocker) WatchPrefix(ctx context.Context, prefix string) (<-chan lock.Event, error) {
	return cl.watch(ctx, func(ctx context.Context, n *Node) (<-chan lock.Event, error) { return n.WatchPrefix(ctx, prefix) })
}
