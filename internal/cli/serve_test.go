package cli

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

// TestServeBackends runs `lockgate serve` as a process over each external
// backend's real servers and speaks the gateway protocol to it with the SDK:
// a lock taken through it is seen held, a second owner is refused, and the
// release frees it.
func TestServeBackends(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis, postgres and etcd")
	}
	bin := testenv.BuildLockgate(t)
	for _, tc := range []struct {
		backend string
		flags   func(t *testing.T) []string
	}{
		{"redlock", func(t *testing.T) []string {
			rs := testenv.StartRedisN(t, 3)
			addrs := make([]string, len(rs))
			for i, r := range rs {
				addrs[i] = r.Addr
			}
			return []string{"--redis-addrs", strings.Join(addrs, ",")}
		}},
		{"postgres", func(t *testing.T) []string {
			return []string{"--postgres-url", testenv.StartPostgres(t).URL}
		}},
		{"etcd", func(t *testing.T) []string {
			return []string{"--etcd-endpoints", strings.Join(testenv.StartEtcd(t, 1).Endpoints, ",")}
		}},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"serve", "--backend", tc.backend, "--listen", "127.0.0.1:0"}, tc.flags(t)...)
			addr := startServe(t, bin, args)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			a, err := client.New([]string{addr}, client.Options{ClientID: "a"})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := client.New([]string{addr}, client.Options{ClientID: "b"})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			lease, err := a.Acquire(ctx, "serve-test", lock.AcquireOptions{TTL: 10 * time.Second})
			if err != nil {
				t.Fatalf("acquire through %s: %v", tc.backend, err)
			}
			if _, err := b.TryAcquire(ctx, "serve-test", lock.AcquireOptions{}); !errors.Is(err, lock.ErrNotAcquired) {
				t.Fatalf("second owner's TryAcquire: %v, want ErrNotAcquired", err)
			}
			info, err := b.Inspect(ctx, "serve-test")
			if err != nil || info.Token != lease.Token {
				t.Fatalf("inspect: %+v, %v; want token %d", info, err, lease.Token)
			}
			if err := a.Release(ctx, lease); err != nil {
				t.Fatal(err)
			}
			l2, err := b.TryAcquire(ctx, "serve-test", lock.AcquireOptions{})
			if err != nil {
				t.Fatalf("after release: %v", err)
			}
			if l2.Token <= lease.Token {
				t.Fatalf("token %d after %d: fencing tokens must increase", l2.Token, lease.Token)
			}
			b.Release(ctx, l2)
		})
	}
}

// startServe starts `lockgate serve` and returns the gateway's address, as
// it prints it; the process is stopped with SIGTERM when t ends, and must
// exit cleanly.
func startServe(t *testing.T, bin string, args []string) string {
	t.Helper()
	return strings.Fields(startProcess(t, bin, "lockgate gateway on ", args...))[0]
}
