package redlock

import (
	"context"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// grant turns a round that won its quorum (acquire or handoff) into a
// lease. The grant's token is the largest of its quorum's node-local
// tokens; propagate spreads it to the nodes that may lag. The lease is
// tracked for the wanted signal until it ends; self says it is the grant
// of one of this Locker's Acquire calls (see track).
func (l *Locker) grant(r *round[grantReply], k keys, key, handle string, opts lock.AcquireOptions, sent time.Time, self bool) *lock.Lease {
	token, wanted := maxToken(r), wantedBy(r)
	l.propagate(r, k, handle, token) // r is collected in the background from here on
	lease := kit.NewLease(kit.Grant{
		Key: key, Owner: opts.Owner, Token: token, Handle: handle, Value: opts.Value,
		TTL: opts.TTL, Sent: sent, DriftFactor: l.cfg.DriftFactor,
	})
	l.track(lease, self, wanted)
	return lease
}

// wantedBy reports whether a node that granted r says a waiter was
// refused by the grant (a re-sent acquire) or by the one it replaced (a
// handoff).
func wantedBy(r *round[grantReply]) bool {
	for i, v := range r.vals {
		if r.heard[i] && v.Granted && v.Wanted {
			return true
		}
	}
	return false
}

// tokenOf is node i's token for the grant of r: 0 where it did not grant
// (its counter may lag).
func tokenOf(r *round[grantReply], i int) lock.Token {
	if r.heard[i] && r.vals[i].Granted {
		return r.vals[i].Token
	}
	return 0
}

func maxToken(r *round[grantReply]) lock.Token {
	var t lock.Token
	for i := range r.vals {
		t = max(t, tokenOf(r, i))
	}
	return t
}

// synced reports whether every node of r answered with token, so that no
// counter lags behind it.
func synced(r *round[grantReply], token lock.Token) bool {
	for i := range r.vals {
		if tokenOf(r, i) != token {
			return false
		}
	}
	return true
}

// propagate raises, in the background, the fence counter of every node whose
// counter may lag behind the grant's token (it answered with a smaller
// token, or did not answer), so that any later quorum intersects this one in
// a node that mints a larger token. It first collects the replies r still
// has pending, and records the grant's token (sync.lua) where it holds.
func (l *Locker) propagate(r *round[grantReply], k keys, handle string, token lock.Token) {
	if r.pending == 0 && synced(r, token) {
		return
	}
	if !l.life.Begin() {
		return
	}
	l.work.Go(func() {
		defer l.life.End()
		r.collect(false)
		for i, nd := range l.nodes {
			if tokenOf(r, i) == token {
				continue
			}
			c, cancel := context.WithTimeout(context.Background(), backgroundTimeoutNodes*l.cfg.NodeTimeout)
			syncScript.Run(c, nd.client, []string{k.lock, k.fence, k.meta}, handle, uint64(token))
			cancel()
		}
	})
}

// backgroundTimeoutNodes bounds a request made in the background (sync.lua,
// SUBSCRIBE), in NodeTimeouts: off any caller's path, it can afford to
// wait for a slow node longer than a caller's request would.
const backgroundTimeoutNodes = 4
