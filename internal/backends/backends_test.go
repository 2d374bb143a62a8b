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
	_ "github.com/lockgate/lockgate/internal/peers" // the peer libraries join the table
	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

// TestNames: the names are the ones `--backend` and bench's reports spell,
// ours first and in report order, and Check tells a backend or a variant
// from anything else.
func TestNames(t *testing.T) {
	if want := []string{"raft", "redlock", "postgres", "etcd"}; !slices.Equal(backends.Ours, want) {
		t.Fatalf("Ours = %v, want %v", backends.Ours, want)
	}
	if !slices.Equal(backends.Names[:len(backends.Ours)], backends.Ours) {
		t.Fatalf("Names = %v: ours must come first", backends.Names)
	}
	if err := backends.Check(backends.Names...); err != nil {
		t.Fatalf("Check(Names): %v", err)
	}
	if err := backends.Check(backends.Variants()...); err != nil {
		t.Fatalf("Check(Variants): %v", err)
	}
	for _, bad := range []string{"", "consul", "Raft", "redis", "etcd:", "etcd:bogus", "raft:session:x"} {
		err := backends.Check("raft", bad)
		if !errors.Is(err, backends.ErrUnknownBackend) || !strings.Contains(err.Error(), strings.Split(bad, ":")[0]) {
			t.Errorf("Check(raft, %q) = %v, want ErrUnknownBackend naming it", bad, err)
		}
	}
}

// TestParse: a bare name is its first variant, a variant keeps its own mode
// and the session capability follows the variant, and every peer names one
// of ours.
func TestParse(t *testing.T) {
	def, err := backends.Parse("etcd")
	if err != nil {
		t.Fatal(err)
	}
	lease, err := backends.Parse("etcd:lease")
	if err != nil {
		t.Fatal(err)
	}
	if def.Ref != "etcd:session" || !def.Caps.Session || lease.Caps.Session || def.Mode == lease.Mode {
		t.Errorf("etcd = %+v, etcd:lease = %+v: want the session variant by default, each with its own mode", def, lease)
	}
	for _, n := range backends.Names {
		info, err := backends.Parse(n)
		if err != nil {
			t.Fatal(err)
		}
		isOurs := slices.Contains(backends.Ours, n)
		if isOurs != (info.PeerOf == "") || (!isOurs && !slices.Contains(backends.Ours, info.PeerOf)) {
			t.Errorf("%s: peerOf %q", n, info.PeerOf)
		}
		if info.Mode == "" || info.Kind == "" {
			t.Errorf("%s: %+v: want a mode and a server kind", n, info)
		}
	}
}

// TestOpenWithoutServers: Open refuses a backend the Spec names no servers
// for, and an unknown name, with matchable errors and no Locker.
func TestOpenWithoutServers(t *testing.T) {
	ctx := context.Background()
	full := backends.Spec{Raft: []string{"a:1"}, Redlock: []string{"b:2"}, Postgres: "postgres://c:3/d", Etcd: []string{"http://e:4"},
		ZooKeeper: []string{"f:5"}}
	for _, name := range backends.Names {
		if !full.Has(name) {
			t.Errorf("Has(%s) = false for a Spec naming every backend's servers", name)
		}
		if (backends.Spec{}).Has(name) {
			t.Errorf("Has(%s) = true for the empty Spec", name)
		}
		// Another backend's servers do not count.
		other := full
		info, _ := backends.Parse(name)
		switch info.Kind {
		case backends.KindRaft:
			other.Raft = nil
		case backends.KindRedis:
			other.Redlock = nil
		case backends.KindPostgres:
			other.Postgres = ""
		case backends.KindEtcd:
			other.Etcd = nil
		case backends.KindZooKeeper:
			other.ZooKeeper = nil
		default:
			t.Fatalf("%s: server kind %q not covered", name, info.Kind)
		}
		if l, err := backends.Open(ctx, name, other, backends.Options{}); !errors.Is(err, backends.ErrNoServers) || l != nil {
			t.Errorf("Open(%s) without its servers = %v, %v; want nil, ErrNoServers", name, l, err)
		}
	}
	if l, err := backends.Open(ctx, "consul", full, backends.Options{}); !errors.Is(err, backends.ErrUnknownBackend) || l != nil {
		t.Errorf("Open(consul) = %v, %v; want nil, ErrUnknownBackend", l, err)
	}
	if full.Has("consul") {
		t.Error(`Has("consul") = true`)
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

// TestOpenEveryBackend opens every backend and peer, in every variant, over
// its real servers and checks that the Locker is that backend's: a lock
// taken through it is refused to a second Locker of the same backend and
// free after release, with a larger fencing token where it has them.
func TestOpenEveryBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis, postgres, etcd, zookeeper and a raftlock cluster")
	}
	servers := map[string]func(t *testing.T) backends.Spec{
		backends.KindRaft: func(t *testing.T) backends.Spec {
			return backends.Spec{Raft: startRaft(t)}
		},
		backends.KindRedis: func(t *testing.T) backends.Spec {
			var addrs []string
			for _, r := range testenv.StartRedisN(t, 3) {
				addrs = append(addrs, r.Addr)
			}
			return backends.Spec{Redlock: addrs}
		},
		backends.KindPostgres: func(t *testing.T) backends.Spec {
			return backends.Spec{Postgres: testenv.StartPostgres(t).URL}
		},
		backends.KindEtcd: func(t *testing.T) backends.Spec {
			return backends.Spec{Etcd: testenv.StartEtcd(t, 1).Endpoints}
		},
		backends.KindZooKeeper: func(t *testing.T) backends.Spec {
			return backends.Spec{ZooKeeper: testenv.StartZooKeeper(t, 1).Addrs}
		},
	}
	byKind := map[string][]string{}
	for _, ref := range backends.Variants() {
		info, _ := backends.Parse(ref)
		byKind[info.Kind] = append(byKind[info.Kind], ref)
	}
	for kind, refs := range byKind {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			spec := servers[kind](t)
			for _, ref := range refs {
				t.Run(ref, func(t *testing.T) { checkOpen(t, ref, spec) })
			}
		})
	}
}

func checkOpen(t *testing.T, ref string, spec backends.Spec) {
	info, _ := backends.Parse(ref)
	key := "backends-test-" + strings.ReplaceAll(ref, ":", "-")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := backends.Options{RequestTimeout: 5 * time.Second, PoolSize: 2, SessionTTL: 5 * time.Second}
	a, err := backends.Open(ctx, ref, spec, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", ref, err)
	}
	defer a.Close()
	b, err := backends.Open(ctx, ref, spec, opts)
	if err != nil {
		t.Fatalf("Open(%s) again: %v", ref, err)
	}
	defer b.Close()
	lease, err := a.Acquire(ctx, key, lock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if _, err := b.TryAcquire(ctx, key, lock.AcquireOptions{TTL: 10 * time.Second}); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("second Locker's TryAcquire: %v, want ErrNotAcquired", err)
	}
	if err := a.Release(ctx, lease); err != nil {
		t.Fatalf("release: %v", err)
	}
	l2, err := b.TryAcquire(ctx, key, lock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	if info.Caps.Fencing && l2.Token <= lease.Token {
		t.Errorf("token %d after %d: fencing tokens must increase", l2.Token, lease.Token)
	}
	b.Release(ctx, l2)
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
