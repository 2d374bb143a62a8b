package gateway

import (
	"context"
	"fmt"
	"sync"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Watches (commands 9 and 10), of a key or, with prefix, of every key
// under a prefix (lock.PrefixWatcher). Each watch has a pump that reads the
// backend's event channel at once, whatever the client does, into the
// watch's queue of at most Options.WatchBuffer messages; a flush on a
// worker writes the queue to the connection. A backend is never held up
// by a slow client, and a watch never holds up the connection's other
// replies by more than the one message it is writing. When the queue is
// full the watch ends: its queued events are dropped and one final
// "event" of type error with code watch_overflow is written, after which
// nothing more of the watch is sent.

// watch is one open watch of a connection.
type watch struct {
	c      *conn
	id     string
	key    string // the key, or the prefix of a prefix watch
	prefix bool
	ctx    context.Context // ends with the watch (unwatch) or the connection
	cancel context.CancelFunc
	// identity is the caller's: a prefix watch's events are of the keys
	// it may read. free gives its watch back to its quota.
	identity string
	free     func()

	mu       sync.Mutex
	queue    []wire.Reply // messages not yet written
	flushing bool         // a flush is writing the queue
	ended    bool         // nothing more is queued (final message queued, or stopped)
	done     chan struct{}
	doneOnce sync.Once
}

// watch serves command 9: {id, key, prefix}. With prefix it watches
// every key starting with key ("" for all; lock.PrefixWatcher), and each
// event carries its own key.
func (c *conn) watch(req wire.Request) {
	switch {
	case req.ID == "":
		c.fail("", newError(wire.CodeMissingField, "id is required for a watch: its events carry it, and unwatch names it"))
		return
	case req.Key == "" && !req.Prefix:
		c.fail(req.ID, newError(wire.CodeInvalidKey, "key is empty"))
		return
	}
	validate, need := kit.ValidateKey, lock.FeatureWatch
	if req.Prefix {
		validate, need = kit.ValidatePrefix, lock.FeatureWatch|lock.FeatureWatchPrefix
	}
	if err := validate(req.Key); err != nil {
		c.fail(req.ID, toAPIError(err))
		return
	}
	if aerr := c.g.unsupported(need); aerr != nil {
		c.fail(req.ID, aerr)
		return
	}
	id := CallerOf(c.ctx).Identity
	if req.Prefix && !c.g.Policy().Reaches(id, PermRead, req.Key) {
		c.fail(req.ID, toAPIError(c.g.tenants.refused(id, "forbidden", forbidden(id, PermRead, []string{req.Key}))))
		return
	}
	if !req.Prefix {
		if err := c.g.tenants.allow(id, PermRead, req.Key); err != nil {
			c.fail(req.ID, toAPIError(err))
			return
		}
	}
	free, err := c.g.tenants.reserve(id, "watches", 1)
	if err != nil {
		c.fail(req.ID, toAPIError(err))
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	w := &watch{c: c, id: req.ID, key: req.Key, prefix: req.Prefix, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		identity: id, free: free}
	c.mu.Lock()
	switch {
	case c.watches == nil: // the connection ended
		c.mu.Unlock()
		cancel()
		free()
		return
	case c.watches[req.ID] != nil:
		c.mu.Unlock()
		cancel()
		free()
		c.fail(req.ID, newError(wire.CodeDuplicateID, fmt.Sprintf("a watch with id %q is already open on this connection", req.ID)))
		return
	case len(c.watches) >= c.g.opts.MaxWatchesPerConn:
		c.mu.Unlock()
		cancel()
		free()
		c.fail(req.ID, newError(wire.CodeTooManyWatches,
			fmt.Sprintf("this connection already has %d watches open, the maximum (unwatch some first)", c.g.opts.MaxWatchesPerConn)))
		return
	}
	c.watches[req.ID] = w
	c.mu.Unlock()
	if !c.takeSlot() {
		cancel()
		free()
		return
	}
	open := c.g.l.(lock.Watcher).Watch // featuresOf checked the interfaces
	if req.Prefix {
		open = c.g.l.(lock.PrefixWatcher).WatchPrefix
	}
	c.g.workers.Go(func() {
		defer c.giveSlot()
		ch, err := open(ctx, req.Key)
		if err != nil {
			// An unwatch that came first answers for the watch.
			if c.dropWatch(w) && w.claimEnd() {
				c.fail(req.ID, toAPIError(err))
			}
			cancel()
			free()
			return
		}
		c.g.metrics.watches.Inc()
		go w.pump(ch)
	})
}

// unwatch serves command 10: {id, target}. It answers "unwatched" once
// nothing more of the watch can be written.
func (c *conn) unwatch(req wire.Request) {
	if req.Target == "" {
		c.fail(req.ID, newError(wire.CodeMissingField, "target (the id of the watch to end) is required"))
		return
	}
	c.mu.Lock()
	w := c.watches[req.Target]
	if w != nil {
		delete(c.watches, req.Target)
	}
	c.mu.Unlock()
	if w == nil {
		c.fail(req.ID, newError(wire.CodeNotFound, fmt.Sprintf("no open watch with id %q", req.Target)))
		return
	}
	w.stop()
	c.g.workers.Go(func() {
		<-w.done
		c.send(wire.Reply{ID: req.ID, Type: wire.TypeUnwatched, Success: true, Key: w.key})
	})
}

// dropWatch removes w from the connection's table; false if it had gone
// (an unwatch, or the connection's end, took it).
func (c *conn) dropWatch(w *watch) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watches[w.id] != w {
		return false
	}
	delete(c.watches, w.id)
	return true
}

// pump moves the backend's events into the queue until the channel closes
// or the watch ends, then drains the channel (so that the backend's
// sender never waits for us) until the backend closes it.
func (w *watch) pump(ch <-chan lock.Event) {
	defer w.c.g.metrics.watches.Dec()
	defer w.free()
	defer func() {
		w.cancel()
		for range ch {
		}
	}()
	for ev := range ch {
		if ev.Type == lock.EventError {
			w.final(toAPIError(ev.Err))
			return
		}
		if ev.Key != "" && ev.Type != lock.EventSynced && !w.c.g.Readable(w.identity, ev.Key) {
			continue // a key of the prefix this identity may not read
		}
		if !w.push(w.eventReply(ev)) {
			return
		}
	}
	// Closed without an error event: the watch's context ended (unwatch,
	// or the connection's end: nothing to say), or the Locker closed.
	if w.ctx.Err() == nil {
		w.final(newError(wire.CodeClosed, "the gateway's locker closed; the watch ended"))
	}
}

// eventReply is ev's "event" message. Its key is the event's own: a
// prefix watch's events are of many keys (its synced names the prefix).
func (w *watch) eventReply(ev lock.Event) wire.Reply {
	key := w.key
	if w.prefix && ev.Type != lock.EventSynced {
		key = ev.Key
	}
	r := wire.Reply{ID: w.id, Type: wire.TypeEvent, Success: true, Key: key, Event: ev.Type.String(),
		Owner: ev.Owner, Mode: modeName(ev.Mode), Permits: ev.Permits, Revision: ev.Revision, Value: wireValue(ev.Value)}
	if ev.Token != 0 {
		r.FencingToken = &wire.FencingToken{Key: key, Value: uint64(ev.Token)}
	}
	return r
}

// push queues an event; false once the watch has ended (an overflow
// ends it here).
func (w *watch) push(r wire.Reply) bool {
	w.mu.Lock()
	if w.ended {
		w.mu.Unlock()
		return false
	}
	if len(w.queue) >= w.c.g.opts.WatchBuffer {
		w.mu.Unlock()
		w.final(toAPIError(fmt.Errorf("%w: the client did not read %d events of the watch %q in time", lock.ErrWatchOverflow, w.c.g.opts.WatchBuffer, w.id)))
		if f := w.c.g.watchOverflowed; f != nil {
			f()
		}
		return false
	}
	w.queue = append(w.queue, r)
	w.flushLocked()
	w.mu.Unlock()
	return true
}

// final ends the watch with an error event (its queued events dropped
// when the end is an overflow) and takes it off the connection's table.
func (w *watch) final(e *apiError) {
	w.c.dropWatch(w)
	w.mu.Lock()
	if w.ended {
		w.mu.Unlock()
		return
	}
	w.ended = true
	if e.Code == wire.CodeWatchOverflow {
		w.queue = nil
	}
	w.c.g.metrics.errors.WithLabelValues(e.Code).Inc()
	w.queue = append(w.queue, wire.Reply{ID: w.id, Type: wire.TypeEvent, Key: w.key, Event: wire.EventError, Error: &e.Error})
	w.flushLocked()
	w.finishLocked()
	w.mu.Unlock()
}

// claimEnd ends a watch that never started; false if it had ended.
func (w *watch) claimEnd() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return false
	}
	w.ended = true
	w.finishLocked()
	return true
}

// stop ends the watch without a word (unwatch, or the connection's end):
// queued events are dropped, and done closes once no write of the watch
// is in progress.
func (w *watch) stop() {
	w.mu.Lock()
	w.ended = true
	w.queue = nil
	w.finishLocked()
	w.mu.Unlock()
	w.cancel()
}

// flushLocked starts a flush unless one runs.
func (w *watch) flushLocked() {
	if w.flushing || len(w.queue) == 0 {
		return
	}
	w.flushing = true
	w.c.g.workers.Go(w.flush)
}

// flush writes the queue, one message at a time, until it is empty.
func (w *watch) flush() {
	for {
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.flushing = false
			w.finishLocked()
			w.mu.Unlock()
			return
		}
		r := w.queue[0]
		w.queue[0] = wire.Reply{}
		w.queue = w.queue[1:]
		w.mu.Unlock()
		w.c.send(r)
		if r.Type == wire.TypeEvent && r.Error == nil {
			w.c.g.metrics.watchEvents.Inc()
		}
	}
}

// finishLocked closes done once the watch has ended and nothing of it is
// left to write.
func (w *watch) finishLocked() {
	if w.ended && !w.flushing && len(w.queue) == 0 {
		w.doneOnce.Do(func() { close(w.done) })
	}
}
