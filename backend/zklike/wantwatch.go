package zklike

import (
	"context"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// wantWatch is one of a wantedHub's watches of contender creations: over
// one directory, or over the whole prefix (then it serves every directory
// without a watch of its own). Its fields are guarded by the hub's mu.
type wantWatch struct {
	dir  string // the directory watched; "" for the whole prefix
	gen  int    // this watch's generation; 0 once stopped
	stop context.CancelFunc
	idle *time.Timer // stops the watch once it served nobody for wantedIdle

	seen    int64 // the last revision whose events were applied
	covered int64 // creations after covered are in recent or still to come
	// recent is the newest creation revision the watch saw per directory
	// since covered: a lease registered from a read at revision R learns
	// of the creations between R and seen that the watch applied before
	// the registration. Bounded: at wantedRecent entries it is cleared and
	// covered moves up to seen (a later registration from an older read
	// then reads its directory once).
	recent map[string]int64
}

// watchLocked is the watch that serves dir (its own, else the prefix
// watch), or nil; it will not stop idle while dir has a grant.
func (h *wantedHub) watchLocked(dir string) *wantWatch {
	w := h.dirs[dir]
	if w == nil {
		w = h.all
	}
	for _, x := range []*wantWatch{w, h.all} {
		if x != nil && x.idle != nil {
			x.idle.Stop()
			x.idle = nil
		}
	}
	return w
}

// startLocked starts a watch for dir from rev+1, so that every creation
// after rev will be applied: dir's own while fewer than wantedDirWatches
// directories have one, else the prefix watch.
func (h *wantedHub) startLocked(dir string, rev int64) {
	w := &wantWatch{seen: rev, covered: rev, recent: make(map[string]int64)}
	if len(h.dirs) < wantedDirWatches {
		w.dir = dir
		h.dirs[dir] = w
	} else {
		h.all = w
	}
	h.gens++
	if h.gens <= 0 {
		h.gens = 1
	}
	w.gen = h.gens
	ctx, cancel := context.WithCancel(h.l.ctx)
	w.stop = cancel
	gen := w.gen
	if !h.l.life.Go(func() { h.run(ctx, w, gen) }) {
		cancel()
	}
}

// setLocked stores dir's grants and arms the idle stop of the watches
// that serve nobody now.
func (h *wantedHub) setLocked(dir string, gs []*holding) {
	if len(gs) == 0 {
		delete(h.held, dir)
		if w := h.dirs[dir]; w != nil {
			h.armIdleLocked(w)
		}
	} else {
		h.held[dir] = gs
	}
	if h.n == 0 && h.all != nil {
		h.armIdleLocked(h.all)
	}
}

func (h *wantedHub) armIdleLocked(w *wantWatch) {
	if w.idle == nil && w.gen != 0 {
		gen := w.gen
		w.idle = time.AfterFunc(wantedIdle, func() { h.stopIfIdle(w, gen) })
	}
}

// stopIfIdle ends w, of generation gen, if it still serves nobody: its
// directory holds no grant (a directory's watch), the Locker holds no
// lease (the prefix watch).
func (h *wantedHub) stopIfIdle(w *wantWatch, gen int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.gen != gen {
		return
	}
	switch {
	case w.dir != "" && h.dirs[w.dir] == w && len(h.held[w.dir]) == 0:
		delete(h.dirs, w.dir)
	case w.dir == "" && h.all == w && h.n == 0:
		h.all = nil
	default:
		w.idle = nil // serving again; armed anew when idle
		return
	}
	w.stop()
	w.gen, w.idle = 0, nil
	clear(w.recent)
}

// run is watch w's generation gen: it watches w's range for creations
// from seen+1 and applies them, re-opening the watch where it broke (no
// leader on the member, a broken stream) until ctx ends.
func (h *wantedHub) run(ctx context.Context, w *wantWatch, gen int) {
	l := h.l
	key := h.prefix
	if w.dir != "" {
		key = w.dir
	}
	for ctx.Err() == nil {
		h.mu.Lock()
		from := w.seen + 1
		h.mu.Unlock()
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := l.cli.Watch(wctx, key, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithFilterDelete())
		for wr := range wch {
			if wr.CompactRevision != 0 {
				// Creations since from are gone from etcd's history:
				// read the directories held instead, then watch on.
				cancel()
				h.rescan(ctx, w, gen)
				break
			}
			if wr.Err() != nil {
				break
			}
			h.apply(w, gen, wr.Events)
		}
		cancel()
		sleepCtx(ctx, 50*time.Millisecond) // a broken stream: do not spin
	}
}

// apply records the creations among events and marks wanted the
// registered leases older than a creation in their directory.
func (h *wantedHub) apply(w *wantWatch, gen int, events []*clientv3.Event) {
	var marks []*lock.Lease
	type look struct {
		g   *holding
		dir string
	}
	var looks []look
	defer func() {
		for _, x := range looks {
			h.l.life.Go(func() { h.reread(x.g, x.dir) })
		}
	}()
	h.mu.Lock()
	if w.gen != gen {
		h.mu.Unlock()
		return
	}
	for _, ev := range events {
		kv := ev.Kv
		if kv.ModRevision > w.seen {
			w.seen = kv.ModRevision
		}
		if ev.Type != mvccpb.PUT || kv.Version != 1 {
			continue // a Put on an existing key (a renewal's lease move)
		}
		dir, ok := h.dirOf(string(kv.Key))
		if !ok {
			continue
		}
		if kv.CreateRevision > w.recent[dir] {
			if len(w.recent) >= wantedRecent {
				clear(w.recent)
				w.covered = w.seen
			}
			w.recent[dir] = kv.CreateRevision
		}
		rec := decode(kv.Value)
		for _, g := range h.held[dir] {
			if int64(g.token) >= kv.CreateRevision || g.wanted {
				continue
			}
			switch wanted, reread := g.wantedBy(rec); {
			case wanted:
				g.wanted = true
				marks = append(marks, g.leases...)
			case reread:
				looks = append(looks, look{g, dir})
			}
		}
	}
	h.mu.Unlock()
	for _, lease := range marks {
		kit.MarkWanted(lease)
	}
}

// dirOf is the directory of a contender key: <prefix>/<escaped key>/.
func (h *wantedHub) dirOf(key string) (string, bool) {
	i := strings.LastIndexByte(key, '/')
	if i < len(h.prefix) || !strings.HasPrefix(key, h.prefix) {
		return "", false
	}
	return key[:i+1], true
}

// rescan reads every contender key in w's range at one revision (in
// pages, keys only), marks the registered leases there older than their
// directory's newest key, and moves the watch on past that revision. It
// runs only after the watch lost events to a compaction.
func (h *wantedHub) rescan(ctx context.Context, w *wantWatch, gen int) {
	l := h.l
	first := h.prefix
	if w.dir != "" {
		first = w.dir
	}
	newest := make(map[string]int64)
	var rev int64
	start, end := first, clientv3.GetPrefixRangeEnd(first)
	for ctx.Err() == nil {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(wantedScanPage)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		var resp *clientv3.GetResponse
		err := l.do(ctx, func(rc context.Context) (err error) {
			resp, err = l.cli.Get(rc, start, opts...)
			return err
		})
		if err != nil {
			sleepCtx(ctx, 250*time.Millisecond)
			newest, rev, start = make(map[string]int64), 0, first // start over
			continue
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if dir, ok := h.dirOf(string(kv.Key)); ok && kv.CreateRevision > newest[dir] {
				newest[dir] = kv.CreateRevision
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	if ctx.Err() != nil {
		return
	}
	var marks []*lock.Lease
	h.mu.Lock()
	if w.gen != gen {
		h.mu.Unlock()
		return
	}
	for dir, gs := range h.held {
		if !strings.HasPrefix(dir, first) {
			continue
		}
		for _, g := range gs {
			switch {
			case int64(g.token) >= newest[dir]:
			case g.shared:
				h.l.life.Go(func() { h.reread(g, dir) })
			default:
				g.wanted = true
				marks = append(marks, g.leases...)
			}
		}
	}
	clear(w.recent)
	w.seen, w.covered = rev, rev
	h.mu.Unlock()
	for _, lease := range marks {
		kit.MarkWanted(lease)
	}
}
