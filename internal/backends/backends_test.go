package backends_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/gateway/raftgw"
	"github.com/lockgate/lockgate/internal/backends"
	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

// TestNames: the names are the ones `--backend` and bench's reports spell,
// in report order, and Check tells a backend from anything else.
func TestNames(t *testing.T) {
	if want := []string{"raft", "redlock", "postgres", "etcd"}; !slices.Equal(backends.Names, want) {
		t.Fatalf("Names = %v, want %v", backends.Names, want)
	}
	if err := backends.Check(backends.Names...); err != nil {
		t.Fatalf("Check(Names): %v", err)
	}
	for _, bad := range []string{"", "zookeeper", "Raft", "redis"} {
		err := backends.Check("raft", bad)
		if !errors.Is(err, backends.ErrUnknownBackend) || !strings.Contains(err.Error(), `"`+bad+`"`) {
			t.Errorf("Check(raft, %q) = %v, want ErrUnknownBackend naming it", bad, err)
		}
	}
}

// TestOpenWithoutServers: Open refuses a backend the Spec names no servers
// for, and an unknown name, with matchable errors and no Locker.
func TestOpenWithoutServers(t *testing.T) {
	ctx := context.Background()
	full := backends.Spec{Raft: []string{"a:1"}, Redlock: []string{"b:2"}, Postgres: "postgres://c:3/d", Etcd: []string{"http://e:4"}}
	for _, name := range backends.Names {
		if !full.Has(name) {
			t.Errorf("Has(%s) = false for a Spec naming every backend's servers", name)
		}
		if (backends.Spec{}).Has(name) {
			t.Errorf("Has(%s) = true for the empty Spec", name)
		}
		// Another backend's servers do not count.
		other := full
		switch name {
		case backends.Raft:
			other.Raft = nil
		case backends.Redlock:
			other.Redlock = nil
		case backends.Postgres:
			other.Postgres = ""
		case backends.Etcd:
			other.Etcd = nil
		}
		if l, err := backends.Open(ctx, name, other, backends.Options{}); !errors.Is(err, backends.ErrNoServers) || l != nil {
			t.Errorf("Open(%s) without its servers = %v, %v; want nil, ErrNoServers", name, l, err)
		}
	}
	if l, err := backends.Open(ctx, "zookeeper", full, backends.Options{}); !errors.Is(err, backends.ErrUnknownBackend) || l != nil {
		t.Errorf("Open(zookeeper) = %v, %v; want nil, ErrUnknownBackend", l, err)
	}
	if full.Has("zookeeper") {
		t.Error(`Has("zookeeper") = true`)
	}
}

// TestDescribe: the banner `lockgate serve` prints names the backend and
// how many servers it reaches.
func TestDescribe(t *testing.T) {
	sp := backends.Spec{Raft: []string{"a", "b", "c"}, Redlock: []string{"x", "y"}, Postgres: "postgres://h/db", Etcd: []string{"e"}}
	for name, want := range map[string]string{
		backends.Raft:     "raft over 3 nodes",
		backends.Redlock:  "redlock over 2 Redis masters",
		backends.Postgres: "postgres",
		backends.Etcd:     "etcd over 1 endpoints",
	} {
		if got := backends.Describe(name, sp); got != want {
			t.Errorf("Describe(%s) = %q, want %q", name, got, want)
		}
	}
}

// TestOpenEveryBackend opens every backend over its real servers and
// checks that the Locker is that backend's: a lock taken through it is
// refused to a second Locker of the same backend and free after release,
// with a larger fencing token.
func TestOpenEveryBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis, postgres, etcd and a raftlock cluster")
	}
	servers := map[string]func(t *testing.T) backends.Spec{
		backends.Raft: func(t *testing.T) backends.Spec {
			return backends.Spec{Raft: startRaft(t)}
		},
		backends.Redlock: func(t *testing.T) backends.Spec {
			var addrs []string
			for _, r := range testenv.StartRedisN(t, 3) {
				addrs = append(addrs, r.Addr)
			}
			return backends.Spec{Redlock: addrs}
		},
		backends.Postgres: func(t *testing.T) backends.Spec {
			return backends.Spec{Postgres: testenv.StartPostgres(t).URL}
		},
		backends.Etcd: func(t *testing.T) backends.Spec {
			return backends.Spec{Etcd: testenv.StartEtcd(t, 1).Endpoints}
		},
	}
	for _, name := range backends.Names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			spec := servers[name](t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			opts := backends.Options{RequestTimeout: 5 * time.Second, PoolSize: 2, SessionTTL: 5 * time.Second}
			a, err := backends.Open(ctx, name, spec, opts)
			if err != nil {
				t.Fatalf("Open(%s): %v", name, err)
			}
			defer a.Close()
			b, err := backends.Open(ctx, name, spec, opts)
			if err != nil {
				t.Fatalf("Open(%s) again: %v", name, err)
			}
			defer b.Close()
			lease, err := a.Acquire(ctx, "backends-test", lock.AcquireOptions{TTL: 10 * time.Second})
			if err != nil {
				t.Fatalf("acquire: %v", err)
			}
			if _, err := b.TryAcquire(ctx, "backends-test", lock.AcquireOptions{TTL: 10 * time.Second}); !errors.Is(err, lock.ErrNotAcquired) {
				t.Fatalf("second Locker's TryAcquire: %v, want ErrNotAcquired", err)
			}
			if err := a.Release(ctx, lease); err != nil {
				t.Fatalf("release: %v", err)
			}
			l2, err := b.TryAcquire(ctx, "backends-test", lock.AcquireOptions{TTL: 10 * time.Second})
			if err != nil {
				t.Fatalf("after release: %v", err)
			}
			if l2.Token <= lease.Token {
				t.Errorf("token %d after %d: fencing tokens must increase", l2.Token, lease.Token)
			}
			b.Release(ctx, l2)
		})
	}
}

// startRaft starts a three-node raftlock cluster in the test process, each
// node serving the gateway as `lockgate node` does, and returns the nodes'
// API addresses.
func startRaft(t *testing.T) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := raftlock.StartLocalCluster(ctx, 3, t.TempDir(), func(cfg *raftlock.Config) {
		cfg.RaftAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		cfg.RaftLogOutput = io.Discard
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	var addrs []string
	for _, s := range c.Servers {
		raftgw.Serve(s, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
		addrs = append(addrs, s.APIAddr())
	}
	return addrs
}
