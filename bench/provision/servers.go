// Package provision starts what a bench run measures and opens its
// lockers: the servers every backend needs are started here, as real processes on
// free 127.0.0.1 ports, through internal/servers — the same code the tests
// trust, through internal/testenv — and stopped by PID when the run ends: five redis-server, one
// PostgreSQL, a three-node etcd and a three-node raftlock cluster of
// `lockgate node` processes. A Spec may point at existing servers instead.
// The fault campaign provisions through the same Provision, with Faults:
// every server behind an in-process proxy it can cut, PostgreSQL under a
// clock it can move. Also here: the Conns a run measures (directly or
// through a gateway), the machine a report names, and small helpers every
// bench shares.
package provision

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/lockgate/lockgate/bench/proxy"
	"github.com/lockgate/lockgate/internal/backends"
	_ "github.com/lockgate/lockgate/internal/peers" // the peer libraries join the table of backends
	"github.com/lockgate/lockgate/internal/servers"
)

// Backend names, as `--backend` spells them: internal/backends' table.
const (
	Raft     = backends.Raft
	Redlock  = backends.Redlock
	Postgres = backends.Postgres
	Etcd     = backends.Etcd
)

// Peer libraries, as `--backend` spells them: internal/backends' table.
const (
	EtcdMutex  = backends.EtcdMutex
	Redsync    = backends.Redsync
	Redislock  = backends.Redislock
	PGAdvisory = backends.PGAdvisory
	ZooKeeper  = backends.ZooKeeper
)

// Backends lists every backend, ours then the peer libraries, in report
// order.
var Backends = backends.Names

// Ours lists lockgate's own backends: the default of `--backend`.
var Ours = backends.Ours

// Sizes of the clusters Provision starts.
const (
	RedisMasters = 5
	EtcdMembers  = 3
	RaftNodes    = 3
	ZKServers    = 3
)

// Spec names existing servers per backend; a backend without an entry is
// provisioned. Its text form (ParseSpec) is
// "raft=h:p,h:p;redlock=h:p,...;postgres=URL;etcd=URL,URL;zookeeper=h:p,...".
// The servers of a kind serve every backend of that kind: redlock's Redis
// masters serve redsync and redislock too.
type Spec struct {
	Raft      []string // raftlock nodes' API addresses
	Redlock   []string // independent Redis masters
	Postgres  string   // connection URL
	Etcd      []string // client URLs
	ZooKeeper []string // client addresses (host:port)
}

// ParseSpec parses the text form of a Spec; "" is the empty Spec.
func ParseSpec(s string) (Spec, error) {
	var sp Spec
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		if !ok || strings.TrimSpace(val) == "" {
			return Spec{}, fmt.Errorf("servers %q: want backend=address[,address...]", part)
		}
		list := strings.Split(val, ",")
		for i := range list {
			list[i] = strings.TrimSpace(list[i])
		}
		switch strings.TrimSpace(name) {
		case Raft:
			sp.Raft = list
		case Redlock:
			sp.Redlock = list
		case Postgres:
			sp.Postgres = val
		case Etcd:
			sp.Etcd = list
		case ZooKeeper:
			sp.ZooKeeper = list
		default:
			return Spec{}, fmt.Errorf("servers %q: unknown backend %q (want %s)", part, name, strings.Join(Backends, ", "))
		}
	}
	return sp, nil
}

// has reports whether the Spec names servers for backend.
func (sp Spec) has(backend string) bool { return backends.Spec(sp).Has(backend) }

// CheckBackends returns an error naming the first unknown backend or
// variant ("name" or "name:variant").
func CheckBackends(refs []string) error { return backends.Check(refs...) }

// InfoOf describes a backend reference that CheckBackends accepted.
func InfoOf(ref string) backends.Info {
	info, _ := backends.Parse(ref)
	return info
}

// KindOf is the server kind a backend reference runs on.
func KindOf(ref string) string { return InfoOf(ref).Kind }

// ProvisionOptions configures Provision.
type ProvisionOptions struct {
	// Existing servers to use instead of starting them.
	Existing Spec
	// Lockgate is the lockgate binary that raftlock nodes run as
	// (`lockgate node`); needed when raft is provisioned.
	Lockgate string
	// Log receives the servers' output; nil discards it.
	Log io.Writer
	// Faults prepares the provisioned servers for a fault campaign: each
	// one behind an in-process proxy (and raftlock's nodes behind proxies
	// between each other, with their fault-injection endpoint on), and
	// PostgreSQL under a FakeClock. Spec then holds the proxies' addresses.
	Faults bool
	// RaftArgs are extra `lockgate node` arguments for every provisioned
	// raftlock node (e.g. --otlp-endpoint for a traced run).
	RaftArgs []string
}

// Servers are the running servers of a set of backends. The provisioned
// ones are exposed for fault injection; Close stops them.
type Servers struct {
	Spec // the addresses, provisioned or existing

	Redis     []*servers.Redis   // nil when existing or not asked for
	PG        *servers.Postgres  // ditto
	EtcdProcs *servers.Etcd      // ditto
	RaftProcs *servers.Raftlock  // ditto
	ZKProcs   *servers.ZooKeeper // ditto

	// With ProvisionOptions.Faults: the links a partition cuts, and the
	// clock a clock jump moves.
	Proxies       *proxy.Proxies
	RedisLinks    []*proxy.Proxy // clients → redis i
	PGLink        *proxy.Proxy   // clients → postgres
	PGClock       *servers.FakeClock
	EtcdLinks     []*proxy.Proxy   // clients → etcd member i
	EtcdPeerLinks []*proxy.Proxy   // etcd members → member i's peer port
	RaftAPILinks  []*proxy.Proxy   // clients → node i's API
	RaftPeerLinks [][]*proxy.Proxy // node i → node j's Raft transport
	ZKLinks       []*proxy.Proxy   // clients → ZooKeeper server i
	// RaftDiskDir is the filesystem (a small tmpfs) that holds raftlock
	// node 1's data directory, for the disk-full fault; "" when the
	// campaign could not mount one (canMountTmpfs says why).
	RaftDiskDir string

	mu      sync.Mutex
	closers []func() // stop what was started; run last first
}

// onClose registers f to run at Close; safe from the starting goroutines.
func (s *Servers) onClose(f func()) {
	s.mu.Lock()
	s.closers = append(s.closers, f)
	s.mu.Unlock()
}

// Provision starts the servers of backends that opts.Existing does not
// name, concurrently, and returns once all are ready. On error nothing it
// started is left running.
func Provision(ctx context.Context, names []string, opts ProvisionOptions) (*Servers, error) {
	if err := CheckBackends(names); err != nil {
		return nil, err
	}
	s := &Servers{Spec: opts.Existing, Proxies: proxy.NewProxies()}
	logger := servers.WriterLogger(opts.Log)
	// link puts a proxy in front of addr when faults are wanted.
	link := func(name, addr string) (*proxy.Proxy, string, error) {
		if !opts.Faults {
			return nil, addr, nil
		}
		p, err := s.Proxies.Add(name, addr)
		if err != nil {
			return nil, "", err
		}
		return p, p.Addr(), nil
	}
	var (
		wg    sync.WaitGroup
		errMu sync.Mutex
		errs  []error
	)
	start := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errMu.Lock()
				errs = append(errs, err)
				errMu.Unlock()
			}
		}()
	}
	started := map[string]bool{}
	for _, b := range names {
		kind := KindOf(b)
		if opts.Existing.has(b) || started[kind] {
			continue
		}
		started[kind] = true
		switch kind {
		case backends.KindRaft:
			if opts.Lockgate == "" {
				s.Close()
				return nil, errors.New("bench: provisioning raft needs the lockgate binary")
			}
			start(func() error {
				ro := servers.RaftlockOptions{Log: logger}
				if len(opts.RaftArgs) > 0 {
					ro.Args = func(i int, nodes []*servers.RaftNode) []string { return opts.RaftArgs }
				}
				if opts.Faults {
					ro.Args = s.raftFaultArgs
					if CanMountTmpfs() == nil {
						dir, unmount, err := mountRaftDisk()
						if err != nil {
							return err
						}
						s.onClose(unmount)
						s.RaftDiskDir = dir
						ro.DataDir = func(i int) string {
							if i == 0 {
								return dir
							}
							return ""
						}
					}
				}
				c, err := servers.StartRaftlock(ctx, opts.Lockgate, RaftNodes, ro)
				if err != nil {
					return err
				}
				s.onClose(c.Close)
				s.RaftProcs = c
				s.Spec.Raft = c.APIAddrs
				if opts.Faults {
					s.Spec.Raft = make([]string, len(s.RaftAPILinks))
					for i, p := range s.RaftAPILinks {
						s.Spec.Raft[i] = p.Addr()
					}
				}
				return nil
			})
		case backends.KindRedis:
			start(func() error {
				rs, err := servers.StartRedisN(ctx, RedisMasters, servers.RedisOptions{Log: logger})
				if err != nil {
					return err
				}
				for _, r := range rs {
					s.onClose(r.Close)
				}
				s.Redis = rs
				for i, r := range rs {
					p, addr, err := link(fmt.Sprintf("redis-%d", i), r.Addr)
					if err != nil {
						return err
					}
					s.RedisLinks = append(s.RedisLinks, p)
					s.Spec.Redlock = append(s.Spec.Redlock, addr)
				}
				return nil
			})
		case backends.KindPostgres:
			start(func() error {
				// fsync on: raftlock and etcd wait for their disks too.
				po := servers.PostgresOptions{Durable: true, Log: logger}
				if opts.Faults {
					c, err := servers.NewFakeClock()
					if err != nil {
						return err
					}
					s.onClose(c.Close)
					s.PGClock = c
					po.Env = c.Env()
				}
				pg, err := servers.StartPostgres(ctx, po)
				if err != nil {
					return err
				}
				s.onClose(pg.Close)
				s.PG = pg
				server := fmt.Sprintf("127.0.0.1:%d", pg.Port)
				var addr string
				s.PGLink, addr, err = link("postgres", server)
				if err != nil {
					return err
				}
				s.Spec.Postgres = strings.Replace(pg.URL, server, addr, 1)
				return nil
			})
		case backends.KindEtcd:
			start(func() error {
				eo := servers.EtcdOptions{Log: logger}
				if opts.Faults {
					// Every member's peer port behind a proxy, which its
					// peers dial: the links etcdPartition cuts.
					eo.AdvertisePeer = func(i int, m *servers.EtcdMember) (string, error) {
						if i == 0 {
							s.EtcdPeerLinks = make([]*proxy.Proxy, EtcdMembers)
						}
						p, err := s.Proxies.Add(m.Name+"-peer", strings.TrimPrefix(m.PeerURL, "http://"))
						if err != nil {
							return "", err
						}
						s.EtcdPeerLinks[i] = p
						return "http://" + p.Addr(), nil
					}
				}
				e, err := servers.StartEtcd(ctx, EtcdMembers, eo)
				if err != nil {
					return err
				}
				s.onClose(e.Close)
				s.EtcdProcs = e
				for _, m := range e.Members {
					p, addr, err := link(m.Name, strings.TrimPrefix(m.ClientURL, "http://"))
					if err != nil {
						return err
					}
					s.EtcdLinks = append(s.EtcdLinks, p)
					s.Spec.Etcd = append(s.Spec.Etcd, "http://"+addr)
				}
				return nil
			})
		case backends.KindZooKeeper:
			start(func() error {
				z, err := servers.StartZooKeeper(ctx, ZKServers, servers.ZooKeeperOptions{Log: logger})
				if err != nil {
					return err
				}
				s.onClose(z.Close)
				s.ZKProcs = z
				for i, a := range z.Addrs {
					p, addr, err := link(fmt.Sprintf("zookeeper-%d", i), a)
					if err != nil {
						return err
					}
					s.ZKLinks = append(s.ZKLinks, p)
					s.Spec.ZooKeeper = append(s.Spec.ZooKeeper, addr)
				}
				return nil
			})
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		s.Close()
		return nil, fmt.Errorf("bench: starting servers failed: %w", err)
	}
	return s, ctx.Err()
}

// Close stops every proxy and every provisioned server, by PID, and removes
// its data.
func (s *Servers) Close() {
	s.Proxies.Close()
	s.mu.Lock()
	cs := s.closers
	s.closers = nil
	s.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// FloorDir is the directory the physical floor's sync is measured in: the
// one that holds the provisioned raftlock nodes' data directories, so that
// the sync is the nodes' filesystem's; without provisioned nodes, the
// system's temporary directory, where internal/servers keeps every server's data.
func (s *Servers) FloorDir() string {
	if s != nil && s.RaftProcs != nil && len(s.RaftProcs.Nodes) > 0 {
		// The last node: a campaign may put node 1 on a tmpfs (RaftDiskDir).
		return filepath.Dir(s.RaftProcs.Nodes[len(s.RaftProcs.Nodes)-1].DataDir)
	}
	return os.TempDir()
}

// raftFaultArgs is the servers.RaftlockOptions.Args hook that puts proxies in front of every
// node's API and on every Raft link (node i dials node j through
// RaftPeerLinks[i][j]), and turns fault injection on.
func (s *Servers) raftFaultArgs(i int, nodes []*servers.RaftNode) []string {
	if i == 0 { // one set of proxies per start attempt
		s.RaftAPILinks = make([]*proxy.Proxy, len(nodes))
		s.RaftPeerLinks = make([][]*proxy.Proxy, len(nodes))
		for a := range nodes {
			s.RaftAPILinks[a], _ = s.Proxies.Add(fmt.Sprintf("api-%d", a+1), nodes[a].APIAddr)
			s.RaftPeerLinks[a] = make([]*proxy.Proxy, len(nodes))
			for b := range nodes {
				if a != b {
					s.RaftPeerLinks[a][b], _ = s.Proxies.Add(fmt.Sprintf("raft-%d-%d", a+1, b+1), nodes[b].RaftAddr)
				}
			}
		}
	}
	var dial []string
	for j, nd := range nodes {
		if p := s.RaftPeerLinks[i][j]; p != nil {
			dial = append(dial, nd.RaftAddr+"="+p.Addr())
		}
	}
	out := []string{"--fault-injection", "--raft-dial", strings.Join(dial, ",")}
	if p := s.RaftAPILinks[i]; p != nil {
		out = append(out, "--api-listen", nodes[i].APIAddr, "--api-addr", p.Addr())
	}
	return out
}

// Variants lists every backend's modes, "name:variant".
func Variants() []string { return backends.Variants() }
