package zklike

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// The wanted signal (lock.Lease.Wanted). A waiter makes itself known the
// way ZooKeeper's recipe has it: it creates its sequence key in the lock's
// directory, after the holder's. So a holder is wanted exactly when a key
// newer than its own appears in its directory. Each Locker learns of such
// keys from one watch over its whole prefix, shared by every lease it
// holds, instead of one watch per held lease: clientv3 multiplexes watches
// on one gRPC stream but parks goroutines for each Watch call, and a
// Locker may hold 100k leases. The price is that etcd sends this Locker
// the creation of every contender key under the prefix (deletes are
// filtered out on the server), also for keys it does not hold; a map
// lookup drops those.
const (
	// wantedIdle is how long the shared watch outlives the last lease it
	// serves: a Locker that acquires and releases in a loop keeps one
	// watch rather than opening one per grant.
	wantedIdle = time.Minute
	// wantedRecent bounds the directories whose newest creation the
	// watch remembers (see wantedHub.recent).
	wantedRecent = 4096
	// wantedScanPage is the page size of the rescan after the watch lost
	// events (its revision was compacted).
	wantedScanPage = 1000
)

// wantedHub is a Locker's register of the leases it holds, by directory,
// and the one watch that marks them wanted.
type wantedHub struct {
	l      *Locker
	prefix string // <prefix>/: every directory of the Locker

	mu   sync.Mutex
	held map[string][]*holding // directory → the grants held in it
	n    int                   // registered leases in held
	idle *time.Timer           // stops the watch once n stayed 0 for wantedIdle

	gen     int // the running watch's generation; 0: no watch
	stop    context.CancelFunc
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

// holding is one grant (Token, Handle) this Locker holds, with the live
// Lease objects that stand for it: the one Acquire returned and copies
// rebuilt with kit.NewLease and renewed here (the gateway renews a fresh
// copy each time; a copy leaves when it ends, at the latest at its
// deadline, so a grant has about TTL / renewal interval copies at most).
type holding struct {
	token  lock.Token
	handle string
	leases []*lock.Lease
	wanted bool // a newer contender was seen: every copy that joins is wanted
	// shared: a read lock or semaphore permit (permits N), which only a
	// contender that must wait makes wanted (see wantedBy).
	shared  bool
	permits int
}

// wantedBy says whether the creation of a contender rec newer than g
// makes g wanted: yes when either wants the key exclusively (it then
// waits for g); no for a reader behind a reader (it holds at once, unless
// an exclusive waiter is before it, which made g wanted already); and
// for semaphore permits it depends on how many are before it: reread.
func (g *holding) wantedBy(rec record) (wanted, reread bool) {
	switch {
	case !g.shared || !rec.Shared:
		return true, false
	case g.permits == 0 && rec.Permits == 0:
		return false, false
	}
	return false, true
}

func newWantedHub(l *Locker) *wantedHub {
	return &wantedHub{
		l:      l,
		prefix: l.cfg.Prefix + "/",
		held:   make(map[string][]*holding),
		recent: make(map[string]int64),
	}
}

// SignalsWanted implements lock.WantedSignaler: a holder's Lease.Wanted
// closes when a contender key newer than its own appears in its lock's
// directory (a caller queued behind it, in any process), or at once when
// a caller of this Locker starts waiting for a key it holds.
func (l *Locker) SignalsWanted() bool { return true }

// localWaiter marks wanted the leases this Locker holds on dir, before the
// waiter's own requests: no round trip for a waiter in the same process.
func (h *wantedHub) localWaiter(dir string, exclusive bool) {
	h.mu.Lock()
	var leases []*lock.Lease
	for _, g := range h.held[dir] {
		if !exclusive && g.shared {
			continue // the watch tells whether it must wait
		}
		g.wanted = true
		leases = append(leases, g.leases...)
	}
	h.mu.Unlock()
	for _, lease := range leases {
		kit.MarkWanted(lease)
	}
}

// holdingLocked is the grant of lease in dir's register, or nil.
func (h *wantedHub) holdingLocked(lease *lock.Lease, dir string) *holding {
	for _, g := range h.held[dir] {
		if g.token == lease.Token && g.handle == lease.Handle {
			return g
		}
	}
	return nil
}

// join adds lease to its grant's entry if the grant is in the register,
// wanted at once if the grant is; false if it is not there.
func (h *wantedHub) join(lease *lock.Lease, dir string) bool {
	h.mu.Lock()
	g := h.holdingLocked(lease, dir)
	if g == nil {
		h.mu.Unlock()
		return false
	}
	wanted := g.wanted
	fresh := !slices.Contains(g.leases, lease)
	if fresh {
		g.leases = append(g.leases, lease)
		h.n++
	}
	h.mu.Unlock()
	if fresh {
		lease.AfterEnd(func() { h.unregister(lease, dir) })
	}
	if wanted {
		kit.MarkWanted(lease)
	}
	return true
}

// register adds a held lease on dir, known from a read at revision rev;
// later says whether that read saw a contender newer than the lease's key.
// The lease is marked wanted now if later, or if the watch has applied a
// newer creation since rev; otherwise the watch marks it when one comes.
// It leaves the register when it ends.
func (h *wantedHub) register(lease *lock.Lease, dir string, rev int64, later bool) {
	if h.join(lease, dir) {
		return
	}
	h.mu.Lock()
	if h.holdingLocked(lease, dir) != nil {
		// Registered by another copy meanwhile.
		h.mu.Unlock()
		h.join(lease, dir)
		return
	}
	g := &holding{token: lease.Token, handle: lease.Handle, leases: []*lock.Lease{lease}, shared: lease.Mode == lock.ModeShared, permits: lease.Permits}
	h.held[dir] = append(h.held[dir], g)
	h.n++
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	reread := false
	switch {
	case later:
	case h.gen == 0:
		h.startLocked(rev)
	case h.recent[dir] > rev && !g.shared:
		later = true
	case h.recent[dir] > rev:
		reread = true
	case h.covered > rev:
		// The watch applied, and forgot, events after rev.
		reread = true
	}
	g.wanted = later
	h.mu.Unlock()
	lease.AfterEnd(func() { h.unregister(lease, dir) })
	if later {
		kit.MarkWanted(lease)
	}
	if reread {
		h.l.life.Go(func() { h.reread(g, dir) })
	}
}

// reread reads dir's newest contender and marks g's leases wanted if it
// is newer than the grant's key.
func (h *wantedHub) reread(g *holding, dir string) {
	l := h.l
	var newest int64
	var behind bool
	err := l.do(l.ctx, func(rc context.Context) error {
		if g.shared {
			// Wanted only if a contender behind it waits.
			resp, err := l.cli.Get(rc, dir, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
			if err == nil {
				behind = waitersBehind(entries(resp.Kvs), int64(g.token))
			}
			return err
		}
		resp, err := l.cli.Get(rc, dir, append(clientv3.WithLastCreate(), clientv3.WithKeysOnly())...)
		if err == nil && len(resp.Kvs) > 0 {
			newest = resp.Kvs[0].CreateRevision
		}
		return err
	})
	if err == nil && (newest > int64(g.token) || behind) {
		h.mu.Lock()
		g.wanted = true
		leases := slices.Clone(g.leases)
		h.mu.Unlock()
		for _, lease := range leases {
			kit.MarkWanted(lease)
		}
	}
}

func (h *wantedHub) unregister(lease *lock.Lease, dir string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	gs := h.held[dir]
	for i, g := range gs {
		if j := slices.Index(g.leases, lease); j >= 0 {
			g.leases = slices.Delete(g.leases, j, j+1)
			h.n--
			if len(g.leases) == 0 {
				gs = slices.Delete(gs, i, i+1)
			}
			break
		}
	}
	h.setLocked(dir, gs)
}

// drop removes lease's grant, with every copy of it, from the register:
// the grant was released, so copies that outlive it are not told (they
// would leave only at their deadlines otherwise).
func (h *wantedHub) drop(lease *lock.Lease, dir string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	gs := h.held[dir]
	for i, g := range gs {
		if g.token == lease.Token && g.handle == lease.Handle {
			h.n -= len(g.leases)
			g.leases = nil
			gs = slices.Delete(gs, i, i+1)
			break
		}
	}
	h.setLocked(dir, gs)
}

// setLocked stores dir's grants and arms the idle stop when none is left.
func (h *wantedHub) setLocked(dir string, gs []*holding) {
	if len(gs) == 0 {
		delete(h.held, dir)
	} else {
		h.held[dir] = gs
	}
	if h.n == 0 && h.gen != 0 && h.idle == nil {
		gen := h.gen
		h.idle = time.AfterFunc(wantedIdle, func() { h.stopIfIdle(gen) })
	}
}

// stopIfIdle ends watch generation gen if nothing was registered since.
func (h *wantedHub) stopIfIdle(gen int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen != gen || h.n != 0 {
		return
	}
	h.stop()
	h.gen, h.stop, h.idle = 0, nil, nil
	clear(h.recent)
}

// startLocked starts a watch generation from rev+1: every creation after
// rev will be applied.
func (h *wantedHub) startLocked(rev int64) {
	ctx, cancel := context.WithCancel(h.l.ctx)
	h.gen++
	if h.gen <= 0 {
		h.gen = 1
	}
	gen := h.gen
	h.stop = cancel
	h.seen, h.covered = rev, rev
	clear(h.recent)
	if !h.l.life.Go(func() { h.run(ctx, gen) }) {
		cancel()
	}
}

// run is one watch generation: it watches the prefix for creations from
// seen+1 and applies them, re-opening the watch where it broke (no leader
// on the member, a broken stream) until ctx ends.
func (h *wantedHub) run(ctx context.Context, gen int) {
	l := h.l
	for ctx.Err() == nil {
		h.mu.Lock()
		from := h.seen + 1
		h.mu.Unlock()
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := l.cli.Watch(wctx, h.prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithFilterDelete())
		for wr := range wch {
			if wr.CompactRevision != 0 {
				// Creations since from are gone from etcd's history:
				// read every directory held instead, then watch on.
				cancel()
				h.rescan(ctx, gen)
				break
			}
			if wr.Err() != nil {
				break
			}
			h.apply(gen, wr.Events)
		}
		cancel()
		sleepCtx(ctx, 50*time.Millisecond) // a broken stream: do not spin
	}
}

// apply records the creations among events and marks wanted the
// registered leases older than a creation in their directory.
func (h *wantedHub) apply(gen int, events []*clientv3.Event) {
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
	if h.gen != gen {
		h.mu.Unlock()
		return
	}
	for _, ev := range events {
		kv := ev.Kv
		if kv.ModRevision > h.seen {
			h.seen = kv.ModRevision
		}
		if ev.Type != mvccpb.PUT || kv.Version != 1 {
			continue // a Put on an existing key (a renewal's lease move)
		}
		dir, ok := h.dirOf(string(kv.Key))
		if !ok {
			continue
		}
		if kv.CreateRevision > h.recent[dir] {
			if len(h.recent) >= wantedRecent {
				clear(h.recent)
				h.covered = h.seen
			}
			h.recent[dir] = kv.CreateRevision
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

// rescan reads every contender key under the prefix at one revision (in
// pages, keys only), marks the registered leases older than their
// directory's newest key, and moves the watch on past that revision. It
// runs only after the watch lost events to a compaction.
func (h *wantedHub) rescan(ctx context.Context, gen int) {
	l := h.l
	newest := make(map[string]int64)
	var rev int64
	start, end := h.prefix, clientv3.GetPrefixRangeEnd(h.prefix)
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
			newest, rev, start = make(map[string]int64), 0, h.prefix // start over
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
	if h.gen != gen {
		h.mu.Unlock()
		return
	}
	for dir, gs := range h.held {
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
	clear(h.recent)
	h.seen, h.covered = rev, rev
	h.mu.Unlock()
	for _, lease := range marks {
		kit.MarkWanted(lease)
	}
}
