package clients_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/election"
	"github.com/lockgate/lockgate/lock/kit"
)

// goSteps are the Go runner's implementations of the step kinds of
// clients/scenarios/README.md, by kind: the vocabulary. Each returns nil or
// why the step failed.
var goSteps map[string]func(r *goRun, st step) error

func init() {
	goSteps = map[string]func(r *goRun, st step) error{
		"client":            stepClient,
		"acquire":           func(r *goRun, st step) error { return stepAcquire(r, st, false, false) },
		"tryAcquire":        func(r *goRun, st step) error { return stepAcquire(r, st, true, false) },
		"acquireAll":        func(r *goRun, st step) error { return stepAcquire(r, st, false, true) },
		"tryAcquireAll":     func(r *goRun, st step) error { return stepAcquire(r, st, true, true) },
		"campaign":          stepCampaign,
		"await":             stepAwait,
		"pending":           stepPending,
		"cancel":            stepCancel,
		"release":           stepRelease,
		"releaseRebuilt":    stepReleaseRebuilt,
		"resign":            stepResign,
		"tokenAbove":        stepTokenAbove,
		"checkLease":        stepCheckLease,
		"ended":             stepEnded,
		"notEnded":          stepNotEnded,
		"hold":              stepHold,
		"wanted":            stepWanted,
		"signalsWanted":     stepSignalsWanted,
		"inspect":           stepInspect,
		"mark":              stepMark,
		"elapsed":           stepElapsed,
		"deadline":          stepDeadline,
		"killLeader":        stepKillLeader,
		"failedOver":        stepFailedOver,
		"renewedSince":      stepRenewedSince,
		"leftFollower":      stepLeftFollower,
		"features":          stepFeatures,
		"cacheStats":        stepCacheStats,
		"openSession":       stepOpenSession,
		"closeSession":      stepCloseSession,
		"renewSession":      stepRenewSession,
		"sessionOf":         stepSessionOf,
		"ops":               stepOps,
		"opsDelta":          stepOpsDelta,
		"watch":             stepWatch,
		"event":             stepEvent,
		"closeWatch":        stepCloseWatch,
		"watchEnded":        stepWatchEnded,
		"revisionsIncrease": stepRevisionsIncrease,
		"current":           stepCurrent,
		"observe":           stepObserve,
		"leader":            stepLeader,
	}
}

func stepClient(r *goRun, st step) error {
	endpoints := r.h.rl.APIAddrs
	if st.Endpoints == "follower" {
		var ep endpointsBody
		if err := r.control(r.ctx, http.MethodGet, "/endpoints", &ep); err != nil {
			return err
		}
		r.follower, endpoints = ep.Follower, []string{ep.Follower}
	} else if st.Endpoints != "" && st.Endpoints != "all" {
		return fmt.Errorf("endpoints %q: want all or follower", st.Endpoints)
	}
	return r.newClient(st.As, client.Options{CacheLeases: st.CacheLeases, SessionTTL: ms(st.SessionTTLMs)}, endpoints)
}

// start runs call in the background as the pending call name, marking
// name.sent now and name.answered when it returns.
func (r *goRun) start(name string, c *client.Client, keys []string, ctx context.Context, cancel context.CancelFunc,
	call func(ctx context.Context) ([]*lock.Lease, *election.Leadership, error)) *pendingOp {
	op := &pendingOp{done: make(chan struct{}), keys: keys, cancel: cancel, client: c}
	r.cleanup = append(r.cleanup, cancel)
	r.marks[name+".sent"] = time.Now()
	go func() {
		op.leases, op.ld, op.err = call(ctx)
		op.at = time.Now()
		close(op.done)
	}()
	r.pending[name] = op
	return op
}

// finish waits up to d for op (the pending call name) and judges its
// outcome by st: the error st expects, or a grant, bound to name.
func (r *goRun) finish(name string, op *pendingOp, st step, d time.Duration) error {
	select {
	case <-op.done:
	case <-time.After(d):
		return fmt.Errorf("%s: no answer within %v", name, d)
	}
	delete(r.pending, name)
	r.marks[name+".answered"] = op.at
	if st.ExpectError != "" {
		if err := r.matchError(op.err, st); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
	if op.err != nil {
		return fmt.Errorf("%s: %w", name, op.err)
	}
	if op.ld != nil {
		r.leaderships[name] = op.ld
		op.leases = []*lock.Lease{op.ld.Lease}
	}
	if len(op.leases) != len(op.keys) {
		return fmt.Errorf("%s: %d leases for %d keys", name, len(op.leases), len(op.keys))
	}
	for i, l := range op.leases {
		if l.Key != op.keys[i] || l.Token == 0 {
			return fmt.Errorf("%s: lease %d: key %q token %d; want %q with a token", name, i, l.Key, l.Token, op.keys[i])
		}
		r.owner[l] = op.client
	}
	if st.SameAs != "" {
		first, err := r.one(st.SameAs)
		if err != nil {
			return err
		}
		if op.leases[0] != first || op.leases[0].Token != first.Token {
			return fmt.Errorf("%s: token %d, a lease other than %s's (token %d); want the same lease", name, op.leases[0].Token, st.SameAs, first.Token)
		}
	}
	r.bind(name, op.leases)
	return nil
}

// bind names leases: name for all of them, name.i for each of a group.
func (r *goRun) bind(name string, ls []*lock.Lease) {
	r.leases[name] = ls
	if len(ls) > 1 {
		for i, l := range ls {
			r.leases[fmt.Sprintf("%s.%d", name, i)] = []*lock.Lease{l}
		}
	}
}

// matchError checks err against st's expectError (a code of the
// protocol's table, matched as wire.CodeOf does) and its details.
func (r *goRun) matchError(err error, st step) error {
	if err == nil {
		return fmt.Errorf("succeeded, want %s", st.ExpectError)
	}
	switch st.ExpectError {
	case wire.CodeTimeout:
		// The Go SDK has no wait bound: a context deadline bounds the wait.
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%v, want an error matching %v", err, context.DeadlineExceeded)
		}
	case wire.CodeHeld:
		var held *lock.HeldError
		if !errors.As(err, &held) {
			return fmt.Errorf("%v, want a *lock.HeldError", err)
		}
		if st.Holder != "" {
			l, err := r.one(st.Holder)
			if err != nil {
				return err
			}
			if held.Owner != l.Owner || held.Token != l.Token {
				return fmt.Errorf("held names %q token %d, want %s: %q token %d", held.Owner, held.Token, st.Holder, l.Owner, l.Token)
			}
		}
	case wire.CodeDelayed:
		var delayed *lock.DelayedError
		if !errors.As(err, &delayed) {
			return fmt.Errorf("%v, want a *lock.DelayedError", err)
		}
		if max := ms(st.RetryInMaxMs); max > 0 {
			if left := time.Until(delayed.Until); left <= 0 || left > max {
				return fmt.Errorf("delayed for another %v: want within (0, %v]", left, max)
			}
		}
	default:
		if got := wire.CodeOf(err); got != st.ExpectError {
			return fmt.Errorf("%v (code %s), want %s", err, got, st.ExpectError)
		}
	}
	return nil
}

func stepAcquire(r *goRun, st step, try, all bool) error {
	c, err := r.client(st.Client)
	if err != nil {
		return err
	}
	opts := lock.AcquireOptions{TTL: ms(st.TTLMs), AutoRenew: st.AutoRenew != nil && *st.AutoRenew,
		Permits: st.Permits, LockDelay: ms(st.LockDelayMs)}
	if st.Value != nil {
		opts.Value = []byte(*st.Value)
	}
	switch st.Mode {
	case "", "exclusive":
	case "shared":
		opts.Mode = lock.ModeShared
	default:
		return fmt.Errorf("mode %q", st.Mode)
	}
	if st.Session != "" {
		s, ok := r.sessions[st.Session]
		if !ok {
			return fmt.Errorf("no session %q", st.Session)
		}
		opts.Session = s
	}
	var keys [][]string
	switch {
	case all:
		var ks []string
		for _, k := range st.Keys {
			ks = append(ks, r.key+k)
		}
		keys = [][]string{ks}
	case st.Count > 0:
		for i := range st.Count {
			keys = append(keys, []string{r.keyOf(st, i)})
		}
	default:
		keys = [][]string{{r.keyOf(st, 0)}}
	}
	var granted []*lock.Lease
	for i, ks := range keys {
		name := st.Lease
		if st.Count > 0 {
			name = fmt.Sprintf("%s.%d", st.Lease, i)
		}
		ctx, cancel := context.WithCancel(r.ctx)
		if st.WaitMs > 0 {
			// The Go SDK has no wait bound: a context deadline is one.
			ctx, cancel = context.WithTimeout(r.ctx, ms(st.WaitMs))
		}
		op := r.start(name, c, ks, ctx, cancel, func(ctx context.Context) ([]*lock.Lease, *election.Leadership, error) {
			var l *lock.Lease
			var ls []*lock.Lease
			var err error
			switch {
			case all && try:
				ls, err = c.TryAcquireAll(ctx, ks, opts)
			case all:
				ls, err = c.AcquireAll(ctx, ks, opts)
			case try:
				l, err = c.TryAcquire(ctx, ks[0], opts)
			default:
				l, err = c.Acquire(ctx, ks[0], opts)
			}
			if l != nil {
				ls = []*lock.Lease{l}
			}
			return ls, nil, err
		})
		if st.Async {
			continue
		}
		if err := r.finish(name, op, st, within(st, callBound)); err != nil {
			return err
		}
		if st.Count > 0 {
			granted = append(granted, r.leases[name]...)
		}
	}
	if st.Count > 0 && !st.Async && st.ExpectError == "" {
		r.leases[st.Lease] = granted
	}
	return nil
}

func stepCampaign(r *goRun, st step) error {
	c, err := r.client(st.Client)
	if err != nil {
		return err
	}
	value := ""
	if st.Value != nil {
		value = *st.Value
	}
	ctx, cancel := context.WithCancel(r.ctx)
	op := r.start(st.Lease, c, []string{r.keyOf(st, 0)}, ctx, cancel, func(ctx context.Context) ([]*lock.Lease, *election.Leadership, error) {
		ld, err := election.Campaign(ctx, c, r.keyOf(st, 0), []byte(value), election.WithTTL(ms(st.TTLMs)))
		return nil, ld, err
	})
	if st.Async {
		return nil
	}
	return r.finish(st.Lease, op, st, within(st, callBound))
}

func stepAwait(r *goRun, st step) error {
	op, ok := r.pending[st.Lease]
	if !ok {
		return fmt.Errorf("no pending call %q", st.Lease)
	}
	return r.finish(st.Lease, op, st, within(st, waitBound))
}

func stepPending(r *goRun, st step) error {
	op, ok := r.pending[st.Lease]
	if !ok {
		return fmt.Errorf("no pending call %q", st.Lease)
	}
	select {
	case <-op.done:
		return fmt.Errorf("%s answered already: leases %v, %v", st.Lease, op.leases, op.err)
	default:
		return nil
	}
}

func stepCancel(r *goRun, st step) error {
	op, ok := r.pending[st.Lease]
	if !ok {
		return fmt.Errorf("no pending call %q", st.Lease)
	}
	op.cancel()
	return nil
}

// leaseClient is the client that was granted l.
func (r *goRun) leaseClient(l *lock.Lease) *client.Client {
	return r.owner[l]
}

func stepRelease(r *goRun, st step) error {
	ls, err := r.group(st.Lease)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.ctx, within(st, callBound))
	defer cancel()
	for _, l := range ls {
		err := r.leaseClient(l).Release(ctx, l)
		if st.ExpectError != "" {
			if err := r.matchError(err, st); err != nil {
				return fmt.Errorf("release of %q: %w", l.Key, err)
			}
		} else if err != nil {
			return fmt.Errorf("release of %q: %w", l.Key, err)
		}
	}
	return nil
}

// stepReleaseRebuilt releases a copy of the lease rebuilt from its grant
// (as after a restart): it goes to the server whatever the SDK remembers
// about the lease.
func stepReleaseRebuilt(r *goRun, st step) error {
	l, err := r.one(st.Lease)
	if err != nil {
		return err
	}
	c, err := r.client(st.Client)
	if err != nil {
		return err
	}
	cp := kit.NewLease(kit.Grant{Key: l.Key, Owner: l.Owner, Token: l.Token, Handle: l.Handle, TTL: l.TTL(), Sent: time.Now()})
	ctx, cancel := context.WithTimeout(r.ctx, within(st, callBound))
	defer cancel()
	err = c.Release(ctx, cp)
	if st.ExpectError == "" {
		return err
	}
	return r.matchError(err, st)
}

func stepResign(r *goRun, st step) error {
	ld, ok := r.leaderships[st.Lease]
	if !ok {
		return fmt.Errorf("no leadership %q", st.Lease)
	}
	ctx, cancel := context.WithTimeout(r.ctx, within(st, callBound))
	defer cancel()
	return ld.Resign(ctx)
}

func stepTokenAbove(r *goRun, st step) error {
	l, err := r.one(st.Lease)
	if err != nil {
		return err
	}
	o, err := r.one(st.Above)
	if err != nil {
		return err
	}
	if l.Token <= o.Token {
		return fmt.Errorf("%s's token %d is not above %s's %d", st.Lease, l.Token, st.Above, o.Token)
	}
	return nil
}

func stepCheckLease(r *goRun, st step) error {
	ls, err := r.group(st.Lease)
	if err != nil {
		return err
	}
	for _, l := range ls {
		if st.Mode != "" && l.Mode.String() != st.Mode {
			return fmt.Errorf("lease of %q: mode %v, want %s", l.Key, l.Mode, st.Mode)
		}
		if st.Permits != 0 && l.Permits != st.Permits {
			return fmt.Errorf("lease of %q: %d permits, want %d", l.Key, l.Permits, st.Permits)
		}
	}
	// autoRenew: the Go SDK renews only with AcquireOptions.AutoRenew,
	// which the acquire step sets from its own autoRenew; a Lease has no
	// accessor to read it back (the ended steps see the behaviour).
	return nil
}

func stepEnded(r *goRun, st step) error {
	ls, err := r.group(st.Lease)
	if err != nil {
		return err
	}
	d := within(st, waitBound)
	for _, l := range ls {
		if d == 0 {
			select {
			case <-l.Done():
			default:
				return fmt.Errorf("the lease of %q still lives", l.Key)
			}
		} else if _, _, err := receive(r.ctx, l.Done(), d, fmt.Sprintf("the end of the lease of %q", l.Key)); err != nil {
			return err
		}
		want := map[string]error{"": nil, "expired": lock.ErrExpired, "released": lock.ErrReleased}[st.Reason]
		if st.Reason != "" && want == nil {
			return fmt.Errorf("reason %q: want expired or released", st.Reason)
		}
		if l.Err() == nil || (want != nil && !errors.Is(l.Err(), want)) {
			return fmt.Errorf("the lease of %q ended with %v, want %s", l.Key, l.Err(), st.Reason)
		}
	}
	return nil
}

func notEnded(ls []*lock.Lease) error {
	for _, l := range ls {
		select {
		case <-l.Done():
			return fmt.Errorf("the lease of %q ended: %v", l.Key, l.Err())
		default:
		}
		if err := l.Err(); err != nil {
			return fmt.Errorf("the lease of %q reports %v", l.Key, err)
		}
		if !time.Now().Before(l.Deadline()) {
			return fmt.Errorf("the lease of %q is past its deadline", l.Key)
		}
	}
	return nil
}

func stepNotEnded(r *goRun, st step) error {
	ls, err := r.group(st.Lease)
	if err != nil {
		return err
	}
	return notEnded(ls)
}

func (r *goRun) groups(names []string) ([]*lock.Lease, error) {
	var all []*lock.Lease
	for _, n := range names {
		ls, err := r.group(n)
		if err != nil {
			return nil, err
		}
		all = append(all, ls...)
	}
	return all, nil
}

// stepHold holds for ms (the scenario's own duration, not a
// synchronisation), failing as soon as a lease ends.
func stepHold(r *goRun, st step) error {
	ls, err := r.groups(st.Leases)
	if err != nil {
		return err
	}
	hold := time.NewTimer(ms(st.Ms))
	defer hold.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-hold.C:
			return notEnded(ls)
		case <-tick.C:
			for _, l := range ls {
				select {
				case <-l.Done():
					return fmt.Errorf("the lease of %q was lost while held: %v", l.Key, l.Err())
				default:
				}
			}
		case <-r.ctx.Done():
			return r.ctx.Err()
		}
	}
}

func stepWanted(r *goRun, st step) error {
	l, err := r.one(st.Lease)
	if err != nil {
		return err
	}
	_, _, err = receive(r.ctx, l.Wanted(), within(st, waitBound), "the wanted signal of "+st.Lease)
	return err
}

func stepSignalsWanted(r *goRun, st step) error {
	c, err := r.client(st.Client)
	if err != nil {
		return err
	}
	if !c.SignalsWanted() {
		return errors.New("the gateway did not announce wanted pushes (Lockgate-Features)")
	}
	return nil
}

func stepInspect(r *goRun, st step) error {
	c, err := r.client(st.Client)
	if err != nil {
		return err
	}
	key := r.keyOf(st, 0)
	check := func(ctx context.Context) error {
		if st.Holder != "" {
			ls, err := r.group(st.Holder)
			if err != nil {
				return stop{err}
			}
			for _, l := range ls {
				if err := holds(ctx, c, l); err != nil {
					return err
				}
			}
		}
		if st.Free {
			return free(ctx, c, key)
		}
		if st.Waiters == nil && st.Mode == "" && st.Holders == nil && st.HolderCount == nil && st.Permits == 0 {
			return nil
		}
		info, err := c.Inspect(ctx, key)
		if err != nil {
			return fmt.Errorf("inspect %q: %w", key, err)
		}
		if st.Waiters != nil && info.Waiters != *st.Waiters {
			return fmt.Errorf("inspect %q: %d waiters, want %d", key, info.Waiters, *st.Waiters)
		}
		if st.Mode != "" && info.Mode.String() != st.Mode {
			return fmt.Errorf("inspect %q: mode %v, want %s", key, info.Mode, st.Mode)
		}
		if st.Permits != 0 && info.Permits != st.Permits {
			return fmt.Errorf("inspect %q: permits %d, want %d", key, info.Permits, st.Permits)
		}
		if st.HolderCount != nil && len(info.Holders) != *st.HolderCount {
			return fmt.Errorf("inspect %q: %d holders, want %d", key, len(info.Holders), *st.HolderCount)
		}
		if st.Holders != nil {
			if len(info.Holders) != len(st.Holders) {
				return fmt.Errorf("inspect %q: holders %+v, want %v", key, info.Holders, st.Holders)
			}
			for i, n := range st.Holders {
				l, err := r.one(n)
				if err != nil {
					return stop{err}
				}
				if info.Holders[i].Token != l.Token {
					return fmt.Errorf("inspect %q: holder %d has token %d, want %s's %d", key, i, info.Holders[i].Token, n, l.Token)
				}
			}
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(r.ctx, within(st, waitBound))
	defer cancel()
	if !st.Poll {
		return check(ctx)
	}
	return pollUntil(ctx, "inspect of "+key, func() (bool, error) {
		err := check(ctx)
		return err == nil, err
	})
}

func stepMark(r *goRun, st step) error {
	r.marks[st.As] = time.Now()
	return nil
}

func stepElapsed(r *goRun, st step) error {
	from, err := r.mark(st.From)
	if err != nil {
		return err
	}
	to, err := r.mark(st.To)
	if err != nil {
		return err
	}
	d := to.Sub(from)
	if st.MinMs != nil && d < ms(*st.MinMs) {
		return fmt.Errorf("%s to %s took %v, want at least %v", st.From, st.To, d, ms(*st.MinMs))
	}
	if st.MaxMs != nil && d > ms(*st.MaxMs) {
		return fmt.Errorf("%s to %s took %v, want at most %v", st.From, st.To, d, ms(*st.MaxMs))
	}
	return nil
}

func stepDeadline(r *goRun, st step) error {
	ls, err := r.group(st.Lease)
	if err != nil {
		return err
	}
	for _, l := range ls {
		dl := l.Deadline()
		if st.Record != "" {
			r.marks[st.Record] = dl
		}
		if st.Before != "" {
			m, err := r.mark(st.Before)
			if err != nil {
				return err
			}
			if !dl.Before(m) {
				return fmt.Errorf("the deadline of %q is %v after %s, want before it", l.Key, dl.Sub(m), st.Before)
			}
		}
		if st.After != "" {
			m, err := r.mark(st.After)
			if err != nil {
				return err
			}
			if m = m.Add(ms(st.PlusMs)); !dl.After(m) {
				return fmt.Errorf("the deadline of %q is %v before %s + %dms, want after it", l.Key, m.Sub(dl), st.After, st.PlusMs)
			}
		}
		if st.EqualsSession != "" {
			s, ok := r.sessions[st.EqualsSession]
			if !ok {
				return fmt.Errorf("no session %q", st.EqualsSession)
			}
			if !dl.Equal(s.Deadline()) {
				return fmt.Errorf("the lease of %q: deadline %v, its session's %v", l.Key, dl, s.Deadline())
			}
		}
	}
	return nil
}

func stepKillLeader(r *goRun, st step) error {
	var killed map[string]string
	if err := r.control(r.ctx, http.MethodPost, "/kill-leader", &killed); err != nil {
		return err
	}
	r.killed = killed["killed"]
	r.marks["killed"] = time.Now()
	return nil
}

// stepFailedOver checks through the control API that the killed node is
// gone and another leads, so that a kill that did not happen cannot pass.
func stepFailedOver(r *goRun, st step) error {
	if r.killed == "" {
		return errors.New("no killLeader step before")
	}
	var ep endpointsBody
	if err := r.control(r.ctx, http.MethodGet, "/endpoints", &ep); err != nil {
		return err
	}
	if ep.Leader == r.killed || slices.Contains(ep.Endpoints, r.killed) {
		return fmt.Errorf("the killed leader %s still runs: %+v", r.killed, ep)
	}
	return nil
}

// stepRenewedSince waits until a renewal (of a lease) or keep-alive (of a
// session) sent after the mark was answered: the deadline passes mark +
// TTL (deadline = sent + TTL − drift). A lease that ends fails it at once.
func stepRenewedSince(r *goRun, st step) error {
	m, err := r.mark(st.Mark)
	if err != nil {
		return err
	}
	watch, err := r.groups(st.Leases)
	if err != nil {
		return err
	}
	var deadline func() time.Time
	var past time.Time
	switch {
	case st.Session != "":
		s, ok := r.sessions[st.Session]
		if !ok {
			return fmt.Errorf("no session %q", st.Session)
		}
		deadline, past = s.Deadline, kit.DeadlineFor(m, s.TTL(), 0)
	default:
		l, err := r.one(st.Lease)
		if err != nil {
			return err
		}
		watch = append(watch, l)
		deadline, past = l.Deadline, m.Add(l.TTL())
	}
	ctx, cancel := context.WithTimeout(r.ctx, within(st, callBound))
	defer cancel()
	return pollUntil(ctx, "a renewal sent after "+st.Mark, func() (bool, error) {
		for _, l := range watch {
			select {
			case <-l.Done():
				return false, stop{fmt.Errorf("the lease of %q was lost: %w", l.Key, l.Err())}
			default:
			}
		}
		return deadline().After(past), fmt.Errorf("deadline %v after %s", deadline().Sub(m), st.Mark)
	})
}

func stepLeftFollower(r *goRun, st step) error {
	c, err := r.client(st.Client)
	if err != nil {
		return err
	}
	if r.follower == "" || c.Endpoint() == r.follower {
		return fmt.Errorf("the client still talks to the follower %q", r.follower)
	}
	return nil
}

// allButWanted: the Go SDK's Features are the lock's (lock.Features),
// which have no "wanted" (the gateway's pushes, SignalsWanted).
func stepFeatures(r *goRun, st step) error {
	c, err := r.client(st.Client)
	if err != nil {
		return err
	}
	// wanted and traceparent are the protocol's, not lock features: the Go
	// SDK uses them without listing them.
	want := slices.DeleteFunc(slices.Clone(st.Want), func(f string) bool { return f == "wanted" || f == "traceparent" })
	if got := c.Features().Names(); !slices.Equal(got, want) {
		return fmt.Errorf("features %v, want %v", got, want)
	}
	return nil
}

func stepCacheStats(r *goRun, st step) error {
	c, err := r.client(st.Client)
	if err != nil {
		return err
	}
	s := c.CacheStats()
	if (st.Hits != nil && s.Hits != uint64(*st.Hits)) || (st.Reclaimed != nil && s.Reclaimed != uint64(*st.Reclaimed)) ||
		(st.Unused != nil && s.Unused != *st.Unused) {
		return fmt.Errorf("cache stats %+v, want hits %v reclaimed %v unused %v", s, deref(st.Hits), deref(st.Reclaimed), deref(st.Unused))
	}
	return nil
}

func deref(p *int) any {
	if p == nil {
		return "any"
	}
	return *p
}

func stepOpenSession(r *goRun, st step) error {
	c, err := r.client(st.Client)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.ctx, within(st, callBound))
	defer cancel()
	s, err := c.OpenSession(ctx, lock.SessionOptions{TTL: ms(st.TTLMs)})
	if err != nil {
		return err
	}
	r.sessions[st.Session] = s
	if st.KeepAlive == nil || *st.KeepAlive {
		kctx, stop := context.WithCancel(r.ctx)
		r.cleanup = append(r.cleanup, stop)
		go lock.KeepSessionAlive(kctx, c, s)
	}
	return nil
}

func stepCloseSession(r *goRun, st step) error {
	c, err := r.client(st.Client)
	if err != nil {
		return err
	}
	s, ok := r.sessions[st.Session]
	if !ok {
		return fmt.Errorf("no session %q", st.Session)
	}
	ctx, cancel := context.WithTimeout(r.ctx, within(st, callBound))
	defer cancel()
	return c.CloseSession(ctx, s)
}

func stepRenewSession(r *goRun, st step) error {
	c, err := r.client(st.Client)
	if err != nil {
		return err
	}
	s, ok := r.sessions[st.Session]
	if !ok {
		return fmt.Errorf("no session %q", st.Session)
	}
	ctx, cancel := context.WithTimeout(r.ctx, within(st, callBound))
	defer cancel()
	err = c.RenewSession(ctx, s)
	if st.ExpectError == "" {
		return err
	}
	return r.matchError(err, st)
}

func stepSessionOf(r *goRun, st step) error {
	ls, err := r.group(st.Lease)
	if err != nil {
		return err
	}
	s := ls[0].Session()
	if s == nil {
		return fmt.Errorf("the lease of %q is in no session", ls[0].Key)
	}
	for _, l := range ls {
		if l.Session() != s {
			return fmt.Errorf("the lease of %q is in session %p, the first in %p: want one session", l.Key, l.Session(), s)
		}
	}
	if st.TTLMs != 0 && s.TTL() != ms(st.TTLMs) {
		return fmt.Errorf("session TTL %v, want %v", s.TTL(), ms(st.TTLMs))
	}
	if st.LeaseCount != nil && s.Leases() != *st.LeaseCount {
		return fmt.Errorf("the session holds %d leases, want %d", s.Leases(), *st.LeaseCount)
	}
	if st.ClientOwn != "" {
		c, err := r.client(st.ClientOwn)
		if err != nil {
			return err
		}
		if n := c.SessionStats().Opened; n != 1 {
			return fmt.Errorf("client %s opened %d sessions of its own, want 1", st.ClientOwn, n)
		}
	}
	r.sessions[st.As] = s
	return nil
}

func stepOps(r *goRun, st step) error {
	var body opsBody
	if err := r.control(r.ctx, http.MethodGet, "/ops", &body); err != nil {
		return err
	}
	if body.Ops == nil {
		return errors.New("GET /ops: no ops")
	}
	r.ops[st.As] = body.Ops
	return nil
}

func stepOpsDelta(r *goRun, st step) error {
	from, ok1 := r.ops[st.From]
	to, ok2 := r.ops[st.To]
	if !ok1 || !ok2 {
		return fmt.Errorf("no ops %q or %q", st.From, st.To)
	}
	d := to[st.Op] - from[st.Op]
	r.logf("%s: the server committed %v %q ops from %s to %s", r.s.Name, d, st.Op, st.From, st.To)
	if st.Min != nil && d < *st.Min {
		return fmt.Errorf("the server committed %v %q ops, want at least %v", d, st.Op, *st.Min)
	}
	if st.LessThan != nil && d >= *st.LessThan {
		return fmt.Errorf("the server committed %v %q ops, want fewer than %v", d, st.Op, *st.LessThan)
	}
	return nil
}

func stepWatch(r *goRun, st step) error {
	c, err := r.client(st.Client)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(r.ctx)
	r.cleanup = append(r.cleanup, cancel)
	ch, err := c.Watch(wctx, r.keyOf(st, 0))
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	r.watches[st.Watch] = &goWatch{ch: ch, cancel: cancel}
	return nil
}

func (r *goRun) watch(name string) (*goWatch, error) {
	w, ok := r.watches[name]
	if !ok {
		return nil, fmt.Errorf("no watch %q", name)
	}
	return w, nil
}

func stepEvent(r *goRun, st step) error {
	w, err := r.watch(st.Watch)
	if err != nil {
		return err
	}
	ev, ok, err := receive(r.ctx, w.ch, within(st, waitBound), "the next event of "+st.Watch)
	switch {
	case err != nil:
		return err
	case !ok:
		return errors.New("the watch ended")
	case ev.Type == lock.EventError:
		return fmt.Errorf("the watch broke: %w", ev.Err)
	}
	var token lock.Token
	owner := ""
	if n := st.Holder + st.Token; n != "" {
		l, err := r.one(n)
		if err != nil {
			return err
		}
		token = l.Token
		if st.Holder != "" {
			owner = l.Owner
		}
	}
	if ev.Type.String() != st.Type || ev.Token != token || (owner != "" && ev.Owner != owner) ||
		(st.Value != nil && !bytes.Equal(ev.Value, []byte(*st.Value))) || ev.Key != r.keyOf(st, 0) {
		return fmt.Errorf("event %v %q token %d owner %q value %q; want %s token %d owner %q value %v",
			ev.Type, ev.Key, ev.Token, ev.Owner, ev.Value, st.Type, token, owner, deref2(st.Value))
	}
	if st.As != "" {
		r.events[st.As] = ev
	}
	return nil
}

func deref2(p *string) string {
	if p == nil {
		return "(any)"
	}
	return fmt.Sprintf("%q", *p)
}

func stepCloseWatch(r *goRun, st step) error {
	w, err := r.watch(st.Watch)
	if err != nil {
		return err
	}
	w.cancel()
	return nil
}

func stepWatchEnded(r *goRun, st step) error {
	w, err := r.watch(st.Watch)
	if err != nil {
		return err
	}
	ev, ok, err := receive(r.ctx, w.ch, within(st, waitBound), "the end of "+st.Watch)
	if err != nil {
		return err
	}
	if ok {
		return fmt.Errorf("a closed watch goes on: %v", ev)
	}
	return nil
}

func stepRevisionsIncrease(r *goRun, st step) error {
	var revs []uint64
	for _, n := range st.Events {
		ev, ok := r.events[n]
		if !ok {
			return fmt.Errorf("no event %q", n)
		}
		revs = append(revs, ev.Revision)
	}
	for i := 1; i < len(revs); i++ {
		if revs[i] <= revs[i-1] {
			return fmt.Errorf("revisions %v of %v: want increasing", revs, st.Events)
		}
	}
	return nil
}

// wantLeader checks a leader against st: nobody without a lease, else the
// leadership's token and st's value.
func (r *goRun) wantLeader(ld election.Leader, st step) error {
	if st.Lease == "" {
		if ld.Present {
			return fmt.Errorf("leader %+v, want nobody", ld)
		}
		return nil
	}
	l, err := r.one(st.Lease)
	if err != nil {
		return err
	}
	if !ld.Present || ld.Token != l.Token || (st.Value != nil && string(ld.Value) != *st.Value) {
		return fmt.Errorf("leader present %v token %d value %q, want %s: token %d value %s", ld.Present, ld.Token, ld.Value, st.Lease, l.Token, deref2(st.Value))
	}
	return nil
}

func stepCurrent(r *goRun, st step) error {
	c, err := r.client(st.Client)
	if err != nil {
		return err
	}
	ld, err := election.Current(r.ctx, c, r.keyOf(st, 0))
	if err != nil {
		return fmt.Errorf("current: %w", err)
	}
	return r.wantLeader(ld, st)
}

func stepObserve(r *goRun, st step) error {
	c, err := r.client(st.Client)
	if err != nil {
		return err
	}
	octx, cancel := context.WithCancel(r.ctx)
	r.cleanup = append(r.cleanup, cancel)
	ch, err := election.Observe(octx, c, r.keyOf(st, 0))
	if err != nil {
		return fmt.Errorf("observe: %w", err)
	}
	r.observers[st.Observer] = ch
	return nil
}

func stepLeader(r *goRun, st step) error {
	ch, ok := r.observers[st.Observer]
	if !ok {
		return fmt.Errorf("no observer %q", st.Observer)
	}
	ld, ok, err := receive(r.ctx, ch, within(st, waitBound), "the next leader of "+st.Observer)
	if err == nil && !ok {
		err = errors.New("observe ended")
	}
	if err != nil {
		return err
	}
	return r.wantLeader(ld, st)
}
