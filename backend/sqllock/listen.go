package sqllock

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockgate/lockgate/lock"
)

// Waiting without polling. Each Locker holds one dedicated connection that
// LISTENs on the table's channel. A waiter whose attempt found the key held
// marks the row contended (waiters.sql); release.sql then NOTIFYs the
// channel with the key inside the releasing statement, so the notification
// is sent exactly when the release commits (abandon.sql always notifies).
// The listener fans notifications out in process to the waiters of that
// key only. The local gate (gate.go) leaves at most one waiter per key and
// Locker at the database, so a release wakes one attempt per Locker that
// waits for the key, not one per blocked caller.
//
// A waiter subscribes before its first attempt, so a release that commits
// after the attempt read the row is never missed. If the listening
// connection breaks, notifications sent meanwhile are lost: once it is
// re-established every waiter is woken to try again.
//
// The same channel carries the wanted notices of waiters.sql ("token<TAB>
// key"), which the listener hands to the Locker's wanted bookkeeping
// (wanted.go) instead of the key's waiters.

// waiter is one attempt loop waiting for a key at the database.
type waiter struct {
	key  string
	wake chan struct{} // holds at most one pending wake-up
}

// drain drops a pending wake-up before a new attempt: the attempt sees the
// state that the wake-up announced.
func (w *waiter) drain() {
	select {
	case <-w.wake:
	default:
	}
}

func (w *waiter) notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (l *Locker) subscribe(key string) *waiter {
	w := &waiter{key: key, wake: make(chan struct{}, 1)}
	l.mu.Lock()
	l.subs[key] = append(l.subs[key], w)
	l.mu.Unlock()
	return w
}

func (l *Locker) unsubscribe(w *waiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ws := l.subs[w.key]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(l.subs, w.key)
	} else {
		l.subs[w.key] = ws
	}
}

// deliver wakes the waiters of key.
func (l *Locker) deliver(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.subs[key] {
		w.notify()
	}
}

// wakeAll wakes every waiter: notifications may have been lost.
func (l *Locker) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ws := range l.subs {
		for _, w := range ws {
			w.notify()
		}
	}
}

// waiting is the number of attempt loops waiting for key (for tests).
func (l *Locker) waiting(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.subs[key])
}

// connectListener opens the dedicated connection and LISTENs on it.
func (l *Locker) connectListener(ctx context.Context) (*pgx.Conn, error) {
	c, cancel := l.roundTrip(ctx)
	defer cancel()
	conn, err := pgx.ConnectConfig(c, l.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(c, "LISTEN "+pgx.Identifier{l.names.channel}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// listen runs the listening connection until Close, replacing it whenever
// it fails.
func (l *Locker) listen(conn *pgx.Conn) {
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	backoff := lock.ExponentialBackoff{Base: DefaultRetryBase, Max: DefaultRetryMax, Jitter: 1}
	for {
		err := l.receive(conn)
		conn.Close(context.Background())
		conn = nil
		if l.ctx.Err() != nil {
			return
		}
		l.cfg.Logger.Warn("sqllock: listening connection lost; reconnecting", "table", l.names.plain, "err", err)
		for attempt := 1; conn == nil; attempt++ {
			conn, err = l.connectListener(l.ctx)
			if err == nil {
				break
			}
			if l.ctx.Err() != nil {
				return
			}
			pause, _ := backoff.Backoff(attempt)
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-l.ctx.Done():
				t.Stop()
				return
			}
		}
		l.stats.reconnects.Add(1)
		l.cfg.Logger.Info("sqllock: listening again", "table", l.names.plain)
		l.wakeAll()
		l.startRecheck()
	}
}

// receive delivers notifications until conn fails (or the Locker closes).
// After ListenPing of silence it pings the server, so that a connection to
// a server that stopped answering is noticed.
func (l *Locker) receive(conn *pgx.Conn) error {
	for {
		c, cancel := context.WithTimeout(l.ctx, l.cfg.ListenPing)
		n, err := conn.WaitForNotification(c)
		cancel()
		switch {
		case err == nil:
			if key, token, ok := parseWanted(n.Payload); ok {
				l.wanted.notice(key, token)
			} else {
				l.deliver(n.Payload)
			}
			continue
		case l.ctx.Err() != nil:
			return l.ctx.Err()
		case !pgconn.Timeout(err) || conn.IsClosed():
			return err
		}
		c, cancel = l.roundTrip(l.ctx)
		err = conn.Ping(c)
		cancel()
		if err != nil {
			return err
		}
	}
}
