package redlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// Inspect implements lock.Locker: it reads every node and reports the
// holder that a quorum agrees on: its token as recorded by the token
// propagation (sync.lua) where it landed, else the quorum-th smallest
// node-local token among them (exact unless a node that granted late,
// after the quorum formed, holds a token below the grant's and the
// propagation has not reached it yet), and the quorum's remaining TTL.
// Waiters is -1: they are not tracked in Redis.
func (l *Locker) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	return l.life.Inspect(key, func() (*lock.LockInfo, error) { return l.inspect(ctx, key) })
}

func (l *Locker) inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	k := l.keysFor(key)
	now := time.Now()
	r := broadcast(l, ctx, func(c context.Context, nd *node) (holderReply, error) {
		return decodeInspect(inspectScript.Run(c, nd.client, []string{k.lock, k.meta}).Slice())
	})
	r.collect(false)
	type view struct {
		owner, value string
		tokens       []lock.Token // the node-local tokens
		final        lock.Token   // the grant's token, where sync recorded it
		pttls        []time.Duration
	}
	views := map[string]*view{}
	for i, h := range r.vals {
		if !r.heard[i] || !h.Held {
			continue
		}
		v := views[h.Handle]
		if v == nil {
			v = &view{owner: h.Owner, value: h.Value}
			views[h.Handle] = v
		}
		v.tokens = append(v.tokens, h.Token)
		if h.Final {
			v.final = h.Token
		}
		v.pttls = append(v.pttls, h.PTTL)
	}
	for _, v := range views { // at most one holder has a quorum
		if !r.reached(len(v.pttls)) {
			continue
		}
		slices.SortFunc(v.pttls, func(a, b time.Duration) int { return cmp.Compare(b, a) })
		// The grant's token is the largest of its quorum's. Where the
		// propagation has not recorded it yet, take the quorum-th smallest
		// node-local token: a node that granted late, after a failed
		// earlier attempt had raised its counter, holds a larger one than
		// the grant's, so the largest token would overstate the grant's.
		slices.Sort(v.tokens)
		token := v.tokens[r.quorum-1]
		if v.final != 0 {
			token = v.final
		}
		info := &lock.LockInfo{
			Key: key, Owner: v.owner, Token: token,
			Expires: now.Add(v.pttls[r.quorum-1]), Waiters: -1,
		}
		if v.value != "" {
			info.Value = []byte(v.value)
		}
		return info, nil
	}
	if !r.reached(r.answered()) {
		return nil, fmt.Errorf("%w: redlock: inspect %q: only %d of %d nodes answered (quorum %d): %v",
			lock.ErrUnavailable, key, r.answered(), r.n, r.quorum, r.err())
	}
	return nil, fmt.Errorf("%w: %q", lock.ErrNotFound, key)
}
