package tenants

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
)

// tenantsHeldKey is the key the attacker holds and queues waiters for.
const tenantsHeldKey = attackerPrefix + "held"

// floodSessionsWS opens sessions over WebSocket on each worker's
// connection, tenantsSessionsPerConn at a time (or until the connection's
// own limit refuses) before it closes the client and connects anew; a
// keeper client keeps every session alive.
func (a *tenantsAttacker) floodSessionsWS(ctx context.Context, f *tenantsFlood) {
	keeper, err := a.newClient("attacker-keeper", true)
	if err != nil {
		f.errored(tenantsErrKind(err))
		return
	}
	for w := range a.conns {
		var c *client.Client
		opened := 0
		a.goRun(func() {
			a.climb(ctx, f, false, func(ctx context.Context) error {
				if c == nil || opened >= tenantsSessionsPerConn {
					if c != nil {
						c.Close()
					}
					var err error
					if c, err = a.newClient(fmt.Sprintf("attacker-sessions-%d", w), true); err != nil {
						return err
					}
					opened = 0
				}
				s, err := c.OpenSession(ctx, lock.SessionOptions{TTL: tenantsAttackTTL})
				if err != nil {
					if errors.Is(err, lock.ErrTooManySessions) {
						opened = tenantsSessionsPerConn // this connection is full: the next request connects anew
					}
					return err
				}
				opened++
				f.add(1)
				a.goRun(func() {
					lock.KeepSessionAlive(ctx, keeper, s)
					if s.Err() != nil {
						f.add(-1)
					}
				})
				return nil
			})
		})
	}
}

// floodSessionsREST opens sessions with POST /sessions from each
// worker's connections (dropped every tenantsRESTReconnect requests); a
// keeper renews them all every TTL/3.
func (a *tenantsAttacker) floodSessionsREST(ctx context.Context, f *tenantsFlood) {
	var (
		mu  sync.Mutex
		ids []string
	)
	ttl := tenantsAttackTTL.Milliseconds()
	for w := range a.conns {
		rc := a.newREST(w)
		a.goRun(func() {
			a.climb(ctx, f, false, func(ctx context.Context) error {
				var out struct {
					SessionID string `json:"session_id"`
				}
				if _, err := rc.do(ctx, "POST", "/sessions", map[string]any{"client_id": "attacker-rest", "ttl_ms": ttl}, &out, 201); err != nil {
					return err
				}
				f.add(1)
				mu.Lock()
				ids = append(ids, out.SessionID)
				mu.Unlock()
				return nil
			})
		})
	}
	keeper := a.newREST(a.conns)
	a.goRun(func() {
		for provision.SleepCtx(ctx, tenantsAttackTTL/3) {
			mu.Lock()
			live := slices.Clone(ids)
			mu.Unlock()
			gone := map[string]bool{}
			for _, id := range live {
				_, err := keeper.do(ctx, "POST", "/sessions/renew", map[string]any{"session_id": id}, nil, 200)
				var re *tenantsRESTError
				switch {
				case ctx.Err() != nil:
					return
				case errors.As(err, &re) && re.Code == "session_expired":
					gone[id] = true
					f.add(-1)
					f.errored("renew: session_expired")
				case err != nil:
					f.errored("renew: " + tenantsErrKind(err))
				}
			}
			if len(gone) > 0 {
				mu.Lock()
				ids = slices.DeleteFunc(ids, func(id string) bool { return gone[id] })
				mu.Unlock()
			}
		}
	})
}

// floodLeasesWS takes leases of keys of its own on each lease client, in
// the client's session (the SDK's default).
func (a *tenantsAttacker) floodLeasesWS(ctx context.Context, f *tenantsFlood, clients []*client.Client) {
	for w, c := range clients {
		n := 1
		a.goRun(func() {
			a.climb(ctx, f, false, func(ctx context.Context) error {
				key := fmt.Sprintf("%slease-%d-%d", attackerPrefix, w, n)
				n++
				lease, err := c.TryAcquire(ctx, key, lock.AcquireOptions{})
				if err != nil {
					return err
				}
				a.holding(ctx, f, lease)
				return nil
			})
		})
	}
}

// floodLeasesREST takes leases with POST /locks/{key}, each with a TTL
// past the phase's end (so none needs renewing).
func (a *tenantsAttacker) floodLeasesREST(ctx context.Context, f *tenantsFlood) {
	for w := range a.conns {
		rc := a.newREST(w)
		n := 0
		a.goRun(func() {
			a.climb(ctx, f, false, func(ctx context.Context) error {
				key := fmt.Sprintf("%srest-%d-%d", attackerPrefix, w, n)
				n++
				ttl := min(time.Until(a.end)+time.Minute, 24*time.Hour)
				if _, err := rc.do(ctx, "POST", "/locks/"+url.PathEscape(key), map[string]any{"client_id": "attacker-rest", "ttl_ms": ttl.Milliseconds()}, nil, 200); err != nil {
					return err
				}
				f.add(1)
				return nil
			})
		})
	}
}

// floodWaiters queues waiting acquires for the held key with POST
// /locks/{key} and wait_ms: refusals answer at once, a queued wait after
// the synchronous window with 202 and a ticket (the wait goes on in the
// gateway). Over REST because the Go SDK's Acquire waits out rate_limited
// answers itself, which would hide them.
func (a *tenantsAttacker) floodWaiters(ctx context.Context, f *tenantsFlood) {
	path := "/locks/" + url.PathEscape(tenantsHeldKey)
	for w := range a.conns {
		rc := a.newREST(w)
		for range tenantsWaiterWorkersPerConn {
			a.goRun(func() {
				a.climb(ctx, f, false, func(ctx context.Context) error {
					wait := min(time.Until(a.end)+10*time.Second, 5*time.Minute)
					var out struct {
						LockToken    string `json:"lock_token"`
						FencingToken struct {
							Value uint64 `json:"value"`
						} `json:"fencing_token"`
					}
					status, err := rc.do(ctx, "POST", path, map[string]any{"client_id": "attacker-wait", "wait_ms": wait.Milliseconds()}, &out, 202, 200)
					if err != nil {
						return err
					}
					if status == 200 {
						// Granted: the holder lost the key. Let it go again.
						q := url.Values{"lock_token": {out.LockToken}, "fencing_token": {fmt.Sprint(out.FencingToken.Value)}}
						rc.do(ctx, "DELETE", path+"?"+q.Encode(), nil, nil, 204)
						return errors.New("granted: the held key was free")
					}
					f.add(1)
					time.AfterFunc(wait, func() { f.add(-1) })
					return nil
				})
			})
		}
	}
}

// floodWatches opens prefix watches, each drained until it ends; a
// connection at its own limit of watches is joined by another.
func (a *tenantsAttacker) floodWatches(ctx context.Context, f *tenantsFlood) {
	prefix := a.r.cfg.WatchPrefix
	for w := range a.conns {
		var c *client.Client
		a.goRun(func() {
			a.climb(ctx, f, false, func(ctx context.Context) error {
				if c == nil {
					var err error
					if c, err = a.newClient(fmt.Sprintf("attacker-watches-%d", w), true); err != nil {
						return err
					}
				}
				ch, err := c.WatchPrefix(ctx, prefix)
				if err != nil {
					if code, _ := tenantsRefusal(err); code == codeTooManyWatches {
						c = nil // the next watch on another connection
					}
					return err
				}
				f.add(1)
				a.goRun(func() {
					defer f.add(-1)
					for ev := range ch {
						switch ev.Type {
						case lock.EventGranted, lock.EventReleased, lock.EventExpired:
							a.watchEvents.Add(1)
						case lock.EventError:
							if ctx.Err() == nil {
								f.errored("watch ended: " + tenantsErrKind(ev.Err))
							}
						}
					}
				})
				return nil
			})
		})
	}
}

// startHammer starts the hammer once every quota flood is limited, or
// tenantsHammerAfter into the phase.
func (a *tenantsAttacker) startHammer(ctx context.Context, floods []*tenantsFlood) {
	deadline := a.start.Add(time.Duration(tenantsHammerAfter * float64(a.d)))
	unlimited := func(f *tenantsFlood) bool { return !f.limited.Load() }
	for time.Now().Before(deadline) && slices.ContainsFunc(floods, unlimited) {
		if !provision.SleepCtx(ctx, 50*time.Millisecond) {
			return
		}
	}
	if ctx.Err() != nil {
		return
	}
	a.hammerAt.Store(int64(time.Since(a.start)))
	pace := ratePace(a.r.cfg.HammerRate)
	for i := range a.conns {
		c, err := a.newClient(fmt.Sprintf("attacker-hammer-%d", i), true)
		if err != nil {
			a.hammer.errored(tenantsErrKind(err))
			return
		}
		for j := range 2 {
			key := fmt.Sprintf("%shammer-%d-%d", attackerPrefix, i, j)
			a.goRun(func() {
				a.climb(ctx, a.hammer, true, func(ctx context.Context) error {
					if !pace(ctx) {
						return ctx.Err()
					}
					lease, err := c.TryAcquire(ctx, key, lock.AcquireOptions{TTL: 10 * time.Second})
					if err != nil {
						return err
					}
					a.hammer.add(1)
					defer a.hammer.add(-1)
					return c.Release(ctx, lease)
				})
			})
		}
	}
}

// probeForbidden tries the victim's contended key every
// tenantsForbiddenEvery: the policy must refuse it (forbidden); a grant is
// counted and released at once.
func (a *tenantsAttacker) probeForbidden(ctx context.Context, f *tenantsFlood) {
	c, err := a.newClient("attacker-forbidden", true)
	if err != nil {
		f.errored(tenantsErrKind(err))
		return
	}
	a.goRun(func() {
		for provision.SleepCtx(ctx, tenantsForbiddenEvery) {
			a.attempt(ctx, f, func(ctx context.Context) error {
				lease, err := c.TryAcquire(ctx, hotKey, lock.AcquireOptions{TTL: 10 * time.Second})
				if err != nil {
					return err
				}
				a.forbiddenGranted.Add(1)
				return c.Release(ctx, lease)
			})
		}
	})
}
