package zklike

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Watch implements lock.Watcher. It reads the key's directory at one
// revision R (the holders, then EventSynced, all with Revision R) and
// watches the directory and the key's release mark from R+1, so that no
// change is missed or seen twice; a broken watch stream is re-opened from
// the revision after the last one applied. It keeps the directory in
// memory and turns each etcd revision into events:
//
//   - a holder's key deleted with a release mark in the same revision
//     (Release, or an Acquire whose grant raced its cancellation, puts
//     <prefix>/<key> = token in its delete's Txn) is EventReleased; one
//     deleted without, by etcd when its lease ran out, is EventExpired;
//   - a contender that becomes a holder (see holders in primitives.go) is
//     EventGranted: on creation if it may hold at once, or when the
//     contenders before it leave, or, for an AcquireAll's key, when it is
//     flagged granted. A waiter's creation or removal is no event.
//
// Event.Revision is the etcd revision of the change shifted left by 16 bits
// plus the event's place among that revision's events (a release and the
// grant it lets through are one Txn, one etcd revision, two events), so
// that it increases from each event to the next; Revision>>16 is the etcd
// revision.
// With a lock-delay, EventExpired comes when etcd deletes the key, a
// lock-delay after the holder's TTL ended. If etcd compacted the revisions
// the watch must resume from (it was cut off longer than the compaction
// retention), the watch ends with EventError wrapping
// lock.ErrWatchOverflow; watch again. A reader that does not keep up
// slows the watch (the events wait in etcd's and the client's buffers);
// nothing is dropped.
func (l *Locker) Watch(ctx context.Context, key string) (<-chan lock.Event, error) {
	if !l.life.Begin() {
		return nil, lock.ErrClosed
	}
	defer l.life.End()
	if err := kit.ValidateKey(key); err != nil {
		return nil, err
	}
	w := &watch{l: l, key: key, dir: l.dir(key), mark: l.markKey(key), held: make(map[int64]bool)}
	dirs, rev, err := l.readDirs(ctx, []string{w.dir})
	if err != nil {
		return nil, l.fail(ctx, "watch", key, err)
	}
	w.es = dirs[0]
	out := make(chan lock.Event, 64)
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(l.ctx, cancel)
	if !l.life.Go(func() {
		defer close(out)
		defer stop()
		defer cancel()
		w.run(wctx, out, rev)
	}) {
		cancel()
		return nil, lock.ErrClosed
	}
	return out, nil
}

type watch struct {
	l              *Locker
	key, dir, mark string
	es             []entry        // the directory, oldest contender first
	held           map[int64]bool // create revisions of the holders
	out            chan<- lock.Event
	ctx            context.Context
	rev            int64 // the etcd revision of the events being sent
	n              int   // events sent at rev so far
}

// revisionShift: Event.Revision is the etcd revision << revisionShift
// plus the event's index within it.
const revisionShift = 16

func (w *watch) send(ev lock.Event) bool {
	ev.Key = w.key
	ev.Revision = uint64(w.rev)<<revisionShift + uint64(min(w.n, 1<<revisionShift-1))
	w.n++
	select {
	case w.out <- ev:
		return true
	case <-w.ctx.Done():
		return false
	}
}

func (w *watch) event(t lock.EventType, e entry) lock.Event {
	ev := lock.Event{
		Type: t, Owner: e.rec.Owner, Token: lock.Token(e.kv.CreateRevision), Value: e.rec.Value,
	}
	if e.rec.Shared {
		ev.Mode, ev.Permits = lock.ModeShared, e.rec.Permits
	}
	return ev
}

func (w *watch) run(ctx context.Context, out chan<- lock.Event, rev int64) {
	w.ctx, w.out, w.rev = ctx, out, rev
	h := holders(w.es)
	for i, e := range w.es {
		if h[i] {
			w.held[e.kv.CreateRevision] = true
			if !w.send(w.event(lock.EventHolder, e)) {
				return
			}
		}
	}
	if !w.send(lock.Event{Type: lock.EventSynced}) {
		return
	}
	from := rev + 1
	end := clientv3.GetPrefixRangeEnd(w.dir) // the range [mark, end) holds the mark and the directory
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := w.l.cli.Watch(wctx, w.mark, clientv3.WithRange(end), clientv3.WithRev(from), clientv3.WithPrevKV())
		for wr := range wch {
			if wr.CompactRevision != 0 {
				cancel()
				w.send(lock.Event{Type: lock.EventError, Err: fmt.Errorf("%w: etcd compacted its history up to revision %d, past the watch's revision %d", lock.ErrWatchOverflow, wr.CompactRevision, from)})
				return
			}
			if wr.Err() != nil {
				break // no leader on that member, or a broken stream: watch again from `from`
			}
			evs := wr.Events
			for len(evs) > 0 {
				r := evs[0].Kv.ModRevision
				n := 1
				for n < len(evs) && evs[n].Kv.ModRevision == r {
					n++
				}
				if !w.apply(evs[:n], r) {
					cancel()
					return
				}
				evs = evs[n:]
				from = r + 1
			}
		}
		cancel()
		sleepCtx(ctx, 50*time.Millisecond) // do not spin on a failing member
	}
}

// apply applies the events of one revision and sends what they mean;
// false when the watch's context ended.
func (w *watch) apply(evs []*clientv3.Event, rev int64) bool {
	w.rev, w.n = rev, 0
	released := make(map[int64]bool)
	var gone []entry
	for _, ev := range evs {
		k := string(ev.Kv.Key)
		if k == w.mark {
			if ev.Type == mvccpb.PUT {
				if tok, err := strconv.ParseInt(string(ev.Kv.Value), 10, 64); err == nil {
					released[tok] = true
				}
			}
			continue
		}
		if !strings.HasPrefix(k, w.dir) {
			continue // a neighbour's key in the watched range
		}
		i := slices.IndexFunc(w.es, func(e entry) bool { return string(e.kv.Key) == k })
		switch {
		case ev.Type == mvccpb.DELETE:
			if i >= 0 {
				if w.held[w.es[i].kv.CreateRevision] {
					gone = append(gone, w.es[i])
				}
				w.es = slices.Delete(w.es, i, i+1)
			}
		case i >= 0:
			w.es[i] = entry{kv: ev.Kv, rec: decode(ev.Kv.Value)} // a lease move or a grant flag
		default:
			e := entry{kv: ev.Kv, rec: decode(ev.Kv.Value)}
			j, _ := slices.BinarySearchFunc(w.es, e.kv.CreateRevision, func(x entry, rev int64) int {
				return int(min(max(x.kv.CreateRevision-rev, -1), 1))
			})
			w.es = slices.Insert(w.es, j, e)
		}
	}
	for _, e := range gone {
		t := lock.EventExpired
		if released[e.kv.CreateRevision] {
			t = lock.EventReleased
		}
		delete(w.held, e.kv.CreateRevision)
		if !w.send(w.event(t, e)) {
			return false
		}
	}
	h := holders(w.es)
	for i, e := range w.es {
		if h[i] && !w.held[e.kv.CreateRevision] {
			w.held[e.kv.CreateRevision] = true
			if !w.send(w.event(lock.EventGranted, e)) {
				return false
			}
		}
	}
	return true
}
