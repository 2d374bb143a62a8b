package zklike

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock/locktest"
)

// etcdTTL is the short TTL of the expiry cases: etcd's smallest lease TTL
// with its default 100 ms heartbeat and 1 s election timeout is 2 s
// (⌈1.5 election timeouts⌉); a shorter one is raised to it.
const etcdTTL = 2 * time.Second

// caps: etcd revokes an expired lease from a check every 500 ms, through a
// Raft commit (and after an election, a new leader extends every lease by
// an election timeout), hence 2 s of expiry slack.
var caps = locktest.Capabilities{
	FIFO: true, InspectOwner: true, InspectValue: true, InspectWaiters: true,
	TTL: etcdTTL, ExpirySlack: 2 * time.Second, Wanted: true,
}

// newLocker returns a Locker on e, closed when t ends.
func newLocker(t testing.TB, e *testenv.Etcd, edit func(*Config)) *Locker {
	t.Helper()
	cfg := DefaultConfig(e.Endpoints...)
	if edit != nil {
		edit(&cfg)
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// rawClient returns a plain etcd client of e, closed when t ends.
func rawClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("clientv3.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func bg(t testing.TB, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

func clientWithPrefix() []clientv3.OpOption { return []clientv3.OpOption{clientv3.WithPrefix()} }
