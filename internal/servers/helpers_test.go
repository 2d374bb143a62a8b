package servers

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// requireBinary returns the path of the executable name or skips the test
// (fails it under CI=true, as internal/testenv does; this package cannot
// import testenv, which imports it).
func requireBinary(t *testing.T, name string) string {
	t.Helper()
	pkg := map[string]string{"redis-server": "redis-server", "etcd": "etcd-server"}[name]
	p, err := LookBinary(name, pkg)
	skipMissing(t, err)
	return p
}

// requirePostgres returns PostgreSQL's bin directory or skips the test.
func requirePostgres(t *testing.T) string {
	t.Helper()
	p, err := PostgresBinDir("")
	skipMissing(t, err)
	return p
}

func skipMissing(t *testing.T, err error) {
	t.Helper()
	switch {
	case err == nil:
	case errors.Is(err, ErrNotInstalled) && os.Getenv("CI") != "true":
		t.Skip(err)
	default:
		t.Fatal(err)
	}
}

func redisSetGet(t *testing.T, addr, key, val string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	if err := c.Set(ctx, key, val, 0).Err(); err != nil {
		t.Fatalf("SET %s on %s: %v", key, addr, err)
	}
	got, err := c.Get(ctx, key).Result()
	if err != nil || got != val {
		t.Fatalf("GET %s on %s = %q, %v; want %q", key, addr, got, err, val)
	}
}

func pgConnect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func pgExec(t *testing.T, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func newEtcdClient(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("clientv3.New(%v): %v", endpoints, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func etcdPut(t *testing.T, c *clientv3.Client, key, val string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, key, val); err != nil {
		t.Fatalf("Put %s via %v: %v", key, c.Endpoints(), err)
	}
}
