package sqllock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockgate/lockgate/lock"
)

// Inspect implements lock.Locker: the live row of key, its remaining TTL
// measured on the database's clock. Waiters is -1: they are not recorded in
// the database.
func (l *Locker) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	return l.life.Inspect(key, func() (*lock.LockInfo, error) {
		var mode, permits int32
		info, _, err := l.inspect(ctx, l.q.inspect, []any{key}, key, &mode, &permits)
		if err != nil || mode == 0 {
			return info, err
		}
		info.Mode, info.Permits = lock.ModeShared, int(permits)
		return l.inspectShared(ctx, info)
	})
}

// inspect runs inspect.sql or waiters.sql with args; extra receives the
// columns after the first four.
func (l *Locker) inspect(ctx context.Context, query string, args []any, key string, extra ...any) (*lock.LockInfo, time.Duration, error) {
	now := time.Now()
	var (
		owner  string
		token  int64
		value  []byte
		micros int64
	)
	err := l.queryRow(ctx, query, args, append([]any{&owner, &token, &value, &micros}, extra...)...)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, 0, fmt.Errorf("%w: %q", lock.ErrNotFound, key)
	case err != nil:
		return nil, 0, l.fail("inspect", key, err)
	}
	remaining := time.Duration(micros) * time.Microsecond
	return &lock.LockInfo{
		Key: key, Owner: owner, Token: lock.Token(token), Value: value,
		Expires: now.Add(remaining), Waiters: -1,
	}, remaining, nil
}
