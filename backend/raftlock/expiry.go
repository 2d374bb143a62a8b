package raftlock

import (
	"container/heap"
	"slices"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
)

// Expiry on the leader: one min-heap of (expiry, key, token) and one timer
// for all held locks, instead of a goroutine and a timer per lock. Items are
// never updated in place: a renewal pushes a new item and the old one is
// skipped when it surfaces, because the lock table then shows a later
// expiry. When the earliest expiry passes, the leader appends one entry that
// expires every due lock and grants each freed key to its next waiter.

const (
	// maxExpireBatch bounds the ops of one expiry entry.
	maxExpireBatch = 1024
	// maxSessionExpireLeases bounds the session leases one expiry entry
	// ends (at least one session per entry, however many leases it has):
	// an expiry storm of a million leases is then a few hundred entries,
	// committed one after the other, between which the grants of other
	// keys commit, instead of one entry that stalls every node's state
	// machine for seconds.
	maxSessionExpireLeases = 8192
	// expireRetry is how soon a failed expiry entry is tried again.
	expireRetry = 100 * time.Millisecond
)

// expiryItem is a lock's expiry (key, token), or, with token 0, the end of
// key's lock-delay, or, with session set, a session's expiry.
type expiryItem struct {
	expires int64 // leader clock, Unix ns
	token   uint64
	key     string
	session string
}

type expiryHeap []expiryItem

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires < h[j].expires }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiryItem)) }
func (h *expiryHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// pushLocked tracks a lock's expiry, re-arming the timer if it is the
// earliest.
func (s *scheduler) pushLocked(it expiryItem) {
	heap.Push(&s.expiry, it)
	if s.expiry[0] == it {
		s.armLocked()
	}
}

// armLocked sets the timer to the earliest expiry.
func (s *scheduler) armLocked() {
	if !s.ready || len(s.expiry) == 0 {
		if s.timer != nil {
			s.timer.Stop()
		}
		return
	}
	d := time.Duration(s.expiry[0].expires - s.n.cfg.Clock.Now())
	if s.timer == nil {
		s.timer = time.AfterFunc(d, s.expireDue)
	} else {
		s.timer.Reset(d)
	}
}

// expireDue appends the release of every lock whose TTL has passed by this
// leader's clock; the state machine re-checks each against the entry's time.
// Items without a token are the ends of lock-delays: their keys' queues are
// served again.
func (s *scheduler) expireDue() {
	s.mu.Lock()
	defer s.unlockAndRun(false)
	if !s.ready {
		return
	}
	now := s.n.cfg.Clock.Now()
	entry := fsm.Entry{}
	var grants []pending
	var items []expiryItem
	var keys []string
	seen := map[expiryItem]bool{}
	kick := map[string]bool{}
	sessionLeases, sessions, held := 0, 0, false
	var ended []fsm.SessionInfo // the sessions this entry expires, for the audit trail
	for len(s.expiry) > 0 && s.expiry[0].expires <= now && len(entry.Ops) < maxExpireBatch {
		if it := s.expiry[0]; it.session != "" {
			si, ok := s.n.fsm.Session(it.session)
			if !ok || si.Expires > now || seen[expiryItem{session: it.session}] {
				heap.Pop(&s.expiry) // ended, or renewed (its new expiry has an item of its own)
				continue
			}
			if s.expiringSessions || (sessions > 0 && sessionLeases+si.Leases > maxSessionExpireLeases) {
				held = true // the next entry's: see maxSessionExpireLeases
				break
			}
			heap.Pop(&s.expiry)
			seen[expiryItem{session: it.session}] = true
			sessions++
			sessionLeases += si.Leases
			items = append(items, expiryItem{expires: si.Expires, session: it.session})
			ended = append(ended, si)
			entry.Ops = append(entry.Ops, fsm.Op{Type: fsm.OpSessionExpire, Key: it.session})
			continue
		}
		it := heap.Pop(&s.expiry).(expiryItem)
		if it.token == 0 {
			kick[it.key] = true
			continue
		}
		l, ok := s.n.fsm.Holder(it.key, it.token)
		key := expiryItem{token: it.token, key: it.key}
		if !ok || l.Expires > now || seen[key] {
			continue // released, renewed, or already in this batch
		}
		seen[key] = true
		items = append(items, expiryItem{expires: l.Expires, token: l.Token, key: it.key})
		entry.Ops = append(entry.Ops, fsm.Op{Type: fsm.OpExpire, Key: it.key, Token: it.token})
		if !slices.Contains(keys, it.key) {
			keys = append(keys, it.key)
		}
	}
	// The freed keys go to their next waiters in the same entry (the
	// expired holders count as gone: they are, by this leader's clock).
	for _, k := range keys {
		s.roundLocked(k, nil, &entry, &grants)
		delete(kick, k)
	}
	for k := range kick {
		s.kickLocked(k)
	}
	if len(items) > 0 {
		done := make(chan applied, 1)
		s.proposeLocked(entry, grants, done)
		epoch := s.epoch
		if sessions > 0 {
			s.expiringSessions = true // one session-expiry entry at a time
		}
		go func() {
			a := <-done
			s.mu.Lock()
			defer s.unlockAndRun(false)
			if s.epoch != epoch {
				return
			}
			if sessions > 0 {
				s.expiringSessions = false
				s.armLocked() // the sessions held back are due
			}
			if a.err == nil {
				s.n.auditSessionsExpired(ended, a.res)
			}
			if a.err != nil {
				s.n.log.Warn("expiring locks failed; will retry", "locks", len(items), "err", a.err)
				for _, it := range items {
					it.expires = s.n.cfg.Clock.Now() + int64(expireRetry)
					s.pushLocked(it)
				}
			}
		}()
	}
	if !held || !s.expiringSessions {
		s.armLocked()
	}
}
