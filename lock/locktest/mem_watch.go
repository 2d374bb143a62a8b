package locktest

import (
	"context"
	"slices"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Watch implements lock.Watcher.
func (l *MemLocker) Watch(ctx context.Context, key string) (<-chan lock.Event, error) {
	if l.ctx.Err() != nil {
		return nil, lock.ErrClosed
	}
	if err := l.check(lock.FeatureWatch); err != nil {
		return nil, err
	}
	if err := kit.ValidateKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := l.store
	w := &memWatch{ch: make(chan lock.Event, memWatchBuffer+1)}
	s.mu.Lock()
	k := s.keyLocked(key)
	s.expireLocked(k, time.Now())
	s.scheduleLocked(key)
	k.watches = append(k.watches, w)
	for _, h := range k.holders {
		s.sendLocked(k, w, holderEvent(lock.EventHolder, k, h, s.rev))
	}
	s.sendLocked(k, w, lock.Event{Type: lock.EventSynced, Key: key, Revision: s.rev})
	s.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-l.ctx.Done():
		}
		s.mu.Lock()
		s.dropWatchLocked(k, w)
		s.mu.Unlock()
	}()
	return w.ch, nil
}

func holderEvent(typ lock.EventType, k *memKey, h *memHolder, rev uint64) lock.Event {
	return lock.Event{Type: typ, Key: k.name, Owner: h.owner, Token: h.token, Value: slices.Clone(h.value), Mode: h.mode, Permits: h.permits, Revision: rev}
}

// emitLocked records a change of k's holders: the store's revision moves
// on, and every watcher of k is told.
func (s *MemStore) emitLocked(k *memKey, typ lock.EventType, h *memHolder, queued bool) {
	s.rev++
	switch {
	case typ == lock.EventExpired && s.bugs.watchDropsExpired,
		typ == lock.EventGranted && queued && s.bugs.watchDropsQueuedGrant:
		return
	}
	ev := holderEvent(typ, k, h, s.rev)
	for _, w := range slices.Clone(k.watches) {
		s.sendLocked(k, w, ev)
	}
}

// sendLocked queues ev for w, or drops a watcher that fell memWatchBuffer
// events behind with lock.ErrWatchOverflow.
func (s *MemStore) sendLocked(k *memKey, w *memWatch, ev lock.Event) {
	if w.closed {
		return
	}
	if len(w.ch) >= memWatchBuffer {
		w.ch <- lock.Event{Type: lock.EventError, Key: k.name, Err: lock.ErrWatchOverflow}
		s.dropWatchLocked(k, w)
		return
	}
	w.ch <- ev
}

func (s *MemStore) dropWatchLocked(k *memKey, w *memWatch) {
	if w.closed {
		return
	}
	w.closed = true
	close(w.ch)
	if i := slices.Index(k.watches, w); i >= 0 {
		k.watches = slices.Delete(k.watches, i, i+1)
	}
}
