package zklike

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// sessionIdle is how long a session lease that no contender uses is kept
// alive before it is revoked: long enough that a Locker acquiring and
// releasing in a loop never pays for a new lease grant.
const sessionIdle = time.Minute

// session is a Locker's shared lease for auto-renewed locks of one TTL,
// the counterpart of a ZooKeeper session (and of concurrency.Session): it
// is granted once, kept alive by its keeper every TTL/3, and every
// auto-renewed contender of that TTL puts its key under it. Acquire then
// costs one Txn, not a LeaseGrant and a Txn.
type session struct {
	l     *Locker
	secs  int64
	ready chan struct{} // closed once the grant answered; then id or err is set
	err   error
	id    clientv3.LeaseID
	ttl   time.Duration
	dead  chan struct{} // closed when the lease is known to be gone

	mu        sync.Mutex
	sent      time.Time // when the last confirmed grant or keep-alive was sent
	users     int       // contenders (waiting or holding) whose key is under it
	idleSince time.Time
	gone      bool // dead or retired: takes no new users
	died      bool // dead is closed
}

// session returns the Locker's session lease for TTL secs, granting it if
// needed, with one use registered (see unuse).
func (l *Locker) session(ctx context.Context, secs int64) (*session, error) {
	for {
		l.mu.Lock()
		if l.sessions == nil {
			l.mu.Unlock()
			return nil, context.Canceled // closed; the caller reports ErrClosed
		}
		s := l.sessions[secs]
		fresh := s == nil
		if fresh {
			s = &session{l: l, secs: secs, ready: make(chan struct{}), dead: make(chan struct{})}
			l.sessions[secs] = s
		}
		l.mu.Unlock()
		if fresh {
			s.grant(ctx)
		}
		select {
		case <-s.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if s.err != nil {
			l.forget(s)
			return nil, s.err
		}
		if s.use() {
			return s, nil
		}
		l.forget(s) // died or retired meanwhile: make a new one
	}
}

// forget removes s from the Locker's sessions if it is still there.
func (l *Locker) forget(s *session) {
	l.mu.Lock()
	if l.sessions[s.secs] == s {
		delete(l.sessions, s.secs)
	}
	l.mu.Unlock()
}

// grant asks etcd for the lease and starts the keeper.
func (s *session) grant(ctx context.Context) {
	l := s.l
	defer close(s.ready)
	var resp *clientv3.LeaseGrantResponse
	sent := time.Now()
	err := l.do(ctx, func(c context.Context) (err error) {
		sent = time.Now()
		resp, err = l.cli.Grant(c, s.secs)
		return err
	})
	if err != nil {
		s.err = err
		return
	}
	s.id, s.ttl = resp.ID, time.Duration(resp.TTL)*time.Second
	s.sent, s.idleSince = sent, time.Now()
	l.life.Go(s.keep)
}

// keep renews the lease every TTL/3 until the Locker closes, the lease is
// lost, or it has been idle for sessionIdle (then it is revoked).
func (s *session) keep() {
	l := s.l
	every := s.ttl / 3
	pause := every
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-time.After(pause):
		}
		if s.retireIfIdle() {
			l.forget(s)
			ctx, cancel := context.WithTimeout(l.ctx, l.cfg.RequestTimeout)
			l.cli.Revoke(ctx, s.id)
			cancel()
			return
		}
		sent := time.Now()
		ctx, cancel := context.WithTimeout(l.ctx, l.cfg.RequestTimeout)
		_, err := l.keepAliveOnce(ctx, s.id)
		cancel()
		switch {
		case err == nil:
			s.mu.Lock()
			s.sent = sent
			s.mu.Unlock()
			pause = every
		case leaseNotFound(err):
			l.cfg.Logger.Warn("zklike: session lease lost; its locks and waiters are gone", "lease", int64(s.id), "ttl", s.ttl)
			s.die()
			l.forget(s)
			return
		default:
			// etcd unreachable: try again soon; the lease may still be
			// saved before it runs out.
			pause = min(every, 250*time.Millisecond)
		}
	}
}

// lastSent is the send time of the last confirmed grant or keep-alive:
// the lease lives at least until lastSent + TTL on etcd's clock.
func (s *session) lastSent() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent
}

// refreshed records a keep-alive sent at sent that etcd confirmed.
func (s *session) refreshed(sent time.Time) {
	s.mu.Lock()
	if sent.After(s.sent) {
		s.sent = sent
	}
	s.mu.Unlock()
}

func (s *session) use() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return false
	}
	s.users++
	return true
}

func (s *session) unuse() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users--; s.users == 0 {
		s.idleSince = time.Now()
	}
}

func (s *session) die() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.died {
		s.died = true
		close(s.dead)
	}
	s.gone = true
}

// retireIfIdle marks s gone if nobody used it for sessionIdle.
func (s *session) retireIfIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users == 0 && time.Since(s.idleSince) >= sessionIdle {
		s.gone = true
		return true
	}
	return false
}

// retire marks s gone and reports whether nobody uses it (Close revokes
// such sessions; the others run out at their TTL).
func (s *session) retire() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gone = true
	return s.users == 0 && s.err == nil && s.id != 0
}
