package client

import (
	"context"
	"fmt"
	"sync"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// WatchBuffer is how many events of one watch the client holds for a
// caller that does not read its channel; one more ends the watch with an
// EventError matching lock.ErrWatchOverflow (the connection's reader never
// waits for a watcher). The gateway has its own bound (1024 by default)
// for a client that does not read its connection.
const WatchBuffer = 1024

// stream is an open watch on one connection: the reader hands it the
// watch's messages without ever waiting.
type stream struct {
	ch       chan *reply
	overOnce sync.Once
	over     chan struct{} // closed when ch was full
	onOver   func()        // tests: called at the overflow
}

func newStream(onOver func()) *stream {
	return &stream{ch: make(chan *reply, WatchBuffer), over: make(chan struct{}), onOver: onOver}
}

// deliver queues r, or marks the stream overflowed.
func (st *stream) deliver(r *reply) {
	select {
	case st.ch <- r:
	default:
		st.overOnce.Do(func() {
			close(st.over)
			if st.onOver != nil {
				st.onOver()
			}
		})
	}
}

// openStream registers st for the messages with id; false if the
// connection has ended.
func (wc *wsConn) openStream(id string, st *stream) bool {
	wc.pmu.Lock()
	defer wc.pmu.Unlock()
	if wc.streams == nil {
		return false
	}
	wc.streams[id] = st
	return true
}

func (wc *wsConn) closeStream(id string) {
	wc.pmu.Lock()
	if wc.streams != nil {
		delete(wc.streams, id)
	}
	wc.pmu.Unlock()
}

// Watch implements lock.Watcher over the gateway's watch (command 9): the
// key's holders, EventSynced, then every grant, release and expiry, with
// the gateway's revisions. The watch lives on one connection. When that
// connection is lost (a gateway failure, a leader change: the new
// leader's gateway knows nothing of it) the channel gets an EventError
// matching lock.ErrUnavailable and closes; the client does not re-watch by
// itself, since it could not promise that no change was missed in
// between: watch again (lock/election's Observe does), and the new watch
// starts with the current holders. A gateway whose backend lacks watches
// answers an error matching lock.ErrUnsupported; a watch that falls
// behind (the gateway's buffer or this client's WatchBuffer) ends with
// lock.ErrWatchOverflow. When ctx ends the watch is ended on the gateway
// (unwatch) and the channel closes without an error; so it does when the
// client closes.
func (c *Client) Watch(ctx context.Context, key string) (<-chan lock.Event, error) {
	return c.watch(ctx, key, false)
}

// WatchPrefix implements lock.PrefixWatcher over the gateway's watch with
// prefix (feature "watchprefix"): EventSynced, then every grant, release
// and expiry of a key starting with prefix ("" for every key), each Event
// with its own Key. It ends as Watch does; a gateway without the feature
// answers an error matching lock.ErrUnsupported.
func (c *Client) WatchPrefix(ctx context.Context, prefix string) (<-chan lock.Event, error) {
	return c.watch(ctx, prefix, true)
}

func (c *Client) watch(ctx context.Context, key string, prefix bool) (<-chan lock.Event, error) {
	if !c.enter() {
		return nil, lock.ErrClosed
	}
	defer c.leave()
	validate, what := kit.ValidateKey, fmt.Sprintf("watch %q", key)
	if prefix {
		validate, what = kit.ValidatePrefix, fmt.Sprintf("watch prefix %q", key)
	}
	if err := validate(key); err != nil {
		return nil, err
	}
	octx, cancel := c.opCtx(ctx)
	defer cancel()
	var (
		last  error
		hops  int
		retry int
	)
	for {
		if octx.Err() != nil {
			return nil, c.gaveUp(ctx, octx, what, c.orDialErr(last))
		}
		wc, err := c.conn(octx)
		if err != nil {
			return nil, c.gaveUp(ctx, octx, what, c.orDialErr(last))
		}
		id := c.newID()
		st := newStream(c.watchOverflowed)
		if !wc.openStream(id, st) {
			<-wc.done
			continue
		}
		if err := wc.send(&wire.Request{ID: id, CommandType: wire.CmdWatch, Key: key, Prefix: prefix}); err != nil {
			wc.closeStream(id)
			last = fmt.Errorf("%w: %v", errDropped, err)
			continue
		}
		var first *reply
		select {
		case first = <-st.ch:
		case <-wc.done:
			select {
			case first = <-st.ch:
			default:
				last = errDropped
				continue
			}
		case <-octx.Done():
			wc.closeStream(id)
			c.unwatch(wc, id)
			return nil, c.gaveUp(ctx, octx, what, last)
		}
		if first.Type == wire.TypeError {
			wc.closeStream(id)
			switch first.code() {
			case wire.CodeNotLeader:
				lid, addr := leaderOf(first.Error)
				last = &lock.NotLeaderError{LeaderID: lid, LeaderAddr: addr}
				if addr != "" && addr != wc.addr && !c.dead(addr) && hops < c.opts.MaxHops {
					hops++
					wc.closeFor(addr, false, last)
					continue
				}
				if addr == "" || c.dead(addr) {
					wc.strike() // no leader known here: as for unavailable, a few in a row move on
				}
			case wire.CodeClosed:
				last = replyError(first, key)
				wc.closeFor("", true, last)
				continue
			case wire.CodeUnavailable:
				last = replyError(first, key)
				wc.strike()
			default:
				return nil, replyError(first, key)
			}
			retry++
			if !c.backoff(octx, retry) {
				return nil, c.gaveUp(ctx, octx, what, last)
			}
			continue
		}
		wc.good()
		out := make(chan lock.Event)
		go c.pumpWatch(ctx, wc, id, key, prefix, st, first, out)
		return out, nil
	}
}

// unwatch ends the watch id on the gateway, without waiting for the answer
// (its reply finds no pending request and is dropped).
func (c *Client) unwatch(wc *wsConn, id string) {
	wc.send(&wire.Request{ID: c.newID(), CommandType: wire.CmdUnwatch, Target: id})
}

// pumpWatch turns the watch's messages into Events on out until the watch
// ends.
func (c *Client) pumpWatch(ctx context.Context, wc *wsConn, id, key string, prefix bool, st *stream, first *reply, out chan<- lock.Event) {
	defer close(out)
	defer wc.closeStream(id)
	emit := func(ev lock.Event) bool {
		select {
		case out <- ev:
			return true
		case <-ctx.Done():
		case <-c.ctx.Done():
		}
		return false
	}
	fail := func(err error) { emit(lock.Event{Type: lock.EventError, Key: key, Err: err}) }
	// handle reports whether the watch goes on after r.
	handle := func(r *reply) bool {
		if r.Type == wire.TypeError || r.Event == wire.EventError {
			fail(replyError(r, key))
			return false
		}
		ev, ok := eventOf(r, key, prefix)
		if !ok {
			fail(fmt.Errorf("lockgate client: %s: the gateway sent %q/%q: %w", fmt.Sprintf("watch %q", key), r.Type, r.Event, lock.ErrUnavailable))
			c.unwatch(wc, id)
			return false
		}
		if !emit(ev) {
			if c.ctx.Err() == nil {
				c.unwatch(wc, id)
			}
			return false
		}
		return true
	}
	if !handle(first) {
		return
	}
	for {
		select {
		case r := <-st.ch:
			if !handle(r) {
				return
			}
		case <-st.over:
			c.unwatch(wc, id)
			fail(fmt.Errorf("lockgate client: watch %q: %w: the caller did not read %d events in time", key, lock.ErrWatchOverflow, WatchBuffer))
			return
		case <-wc.done:
			for { // what arrived before the connection ended
				select {
				case r := <-st.ch:
					if !handle(r) {
						return
					}
					continue
				default:
				}
				break
			}
			fail(fmt.Errorf("lockgate client: watch %q: %w: %w (watch again)", key, errDropped, lock.ErrUnavailable))
			return
		case <-ctx.Done():
			c.unwatch(wc, id)
			return
		case <-c.ctx.Done():
			return
		}
	}
}

// eventOf is the Event an "event" message reports; a prefix watch's
// events carry their own key (the prefix where the message has none).
func eventOf(r *reply, key string, prefix bool) (lock.Event, bool) {
	if r.Type != wire.TypeEvent {
		return lock.Event{}, false
	}
	if prefix && r.Key != "" {
		key = r.Key
	}
	ev := lock.Event{Key: key, Owner: r.Owner, Token: r.token(), Permits: r.Permits, Revision: r.Revision}
	switch r.Event {
	case wire.EventHolder:
		ev.Type = lock.EventHolder
	case wire.EventSynced:
		ev.Type = lock.EventSynced
	case wire.EventGranted:
		ev.Type = lock.EventGranted
	case wire.EventReleased:
		ev.Type = lock.EventReleased
	case wire.EventExpired:
		ev.Type = lock.EventExpired
	default:
		return lock.Event{}, false
	}
	if r.Value != nil {
		ev.Value = []byte(*r.Value)
	}
	if r.Mode != "" {
		ev.Mode, _ = lock.ParseMode(r.Mode)
	}
	return ev, true
}

var _ lock.PrefixWatcher = (*Client)(nil)
