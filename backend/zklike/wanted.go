package zklike

import (
	"context"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// The wanted signal (lock.Lease.Wanted). A waiter makes itself known the
// way ZooKeeper's recipe has it: it creates its sequence key in the lock's
// directory, after the holder's. So a holder is wanted exactly when a key
// newer than its own appears in its directory. A Locker learns of such
// keys from watches of creations (deletes are filtered out on the server)
// shared by every lease it holds, never one watch per held lease:
// clientv3 multiplexes watches on one gRPC stream but parks goroutines for
// each Watch call, and a Locker may hold 100k leases. The first
// wantedDirWatches directories it holds get a watch of their own, so that
// etcd sends the Locker only the creations in the directories it holds:
// a watch over the whole prefix would have etcd send every Locker every
// contender creation (and release mark) of every other Locker, work that
// grows with the square of the Lockers and doubled an uncontended cycle
// among 32 of them. Beyond that many directories one watch over the whole
// prefix serves the others; a map lookup drops the creations in
// directories the Locker does not hold.
const (
	// wantedIdle is how long a watch outlives the last lease it serves: a
	// Locker that acquires and releases in a loop keeps one watch rather
	// than opening one per grant.
	wantedIdle = time.Minute
	// wantedDirWatches is how many directories get a watch of their own
	// (two goroutines each, ours and clientv3's); the others share the
	// prefix watch.
	wantedDirWatches = 4
	// wantedRecent bounds the directories whose newest creation a watch
	// remembers (see wantWatch.recent).
	wantedRecent = 4096
	// wantedScanPage is the page size of the rescan after the watch lost
	// events (its revision was compacted).
	wantedScanPage = 1000
)

// wantedHub is a Locker's register of the leases it holds, by directory,
// and the watches that mark them wanted.
type wantedHub struct {
	l      *Locker
	prefix string // <prefix>/: every directory of the Locker

	mu   sync.Mutex
	held map[string][]*holding // directory → the grants held in it
	n    int                   // registered leases in held

	dirs map[string]*wantWatch // the directories with a watch of their own
	all  *wantWatch            // the prefix watch, serving the others; or nil
	gens int                   // the last watch generation handed out
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
		dirs:   make(map[string]*wantWatch),
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
	w := h.watchLocked(dir)
	reread := false
	switch {
	case later:
	case w == nil:
		h.startLocked(dir, rev)
	case w.recent[dir] > rev && !g.shared:
		later = true
	case w.recent[dir] > rev:
		reread = true
	case w.covered > rev:
		// The watch applied, and forgot, events after rev (or began
		// after rev).
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
