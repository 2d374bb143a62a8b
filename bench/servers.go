// Package bench measures lockgate's backends side by side: latency
// workloads (`lockgate bench latency`) and, sharing the same provisioning,
// fault campaigns (`lockgate bench chaos`).
//
// The servers every backend needs are started here, as real processes on
// free 127.0.0.1 ports, through internal/testenv — the same code the tests
// trust — and stopped by PID when the run ends: five redis-server, one
// PostgreSQL, a three-node etcd and a three-node raftlock cluster of
// `lockgate node` processes. A Spec may point at existing servers instead.
// The chaos campaign provisions through the same Provision, with Faults:
// every server behind an in-process proxy it can cut, PostgreSQL under a
// clock it can move.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lockgate/lockgate/internal/testenv"
)

// Backend names, as `--backend` spells them.
const (
	Raft     = "raft"
	Redlock  = "redlock"
	Postgres = "postgres"
	Etcd     = "etcd"
)

// Backends lists every backend in report order.
var Backends = []string{Raft, Redlock, Postgres, Etcd}

// Sizes of the clusters Provision starts.
const (
	RedisMasters = 5
	EtcdMembers  = 3
	RaftNodes    = 3
)

// Spec names existing servers per backend; a backend without an entry is
// provisioned. Its text form (ParseSpec) is
// "raft=h:p,h:p;redlock=h:p,...;postgres=URL;etcd=URL,URL".
type Spec struct {
	Raft     []string // raftlock nodes' API addresses
	Redlock  []string // independent Redis masters
	Postgres string   // connection URL
	Etcd     []string // client URLs
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
		default:
			return Spec{}, fmt.Errorf("servers %q: unknown backend %q (want %s)", part, name, strings.Join(Backends, ", "))
		}
	}
	return sp, nil
}

// has reports whether the Spec names servers for backend.
func (sp Spec) has(backend string) bool {
	switch backend {
	case Raft:
		return len(sp.Raft) > 0
	case Redlock:
		return len(sp.Redlock) > 0
	case Postgres:
		return sp.Postgres != ""
	case Etcd:
		return len(sp.Etcd) > 0
	}
	return false
}

// CheckBackends returns an error naming the first unknown backend.
func CheckBackends(names []string) error {
	for _, b := range names {
		if !slices.Contains(Backends, b) {
			return fmt.Errorf("unknown backend %q (want %s)", b, strings.Join(Backends, ", "))
		}
	}
	return nil
}

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
}

// Servers are the running servers of a set of backends. The provisioned
// ones are exposed for fault injection; Close stops them.
type Servers struct {
	Spec // the addresses, provisioned or existing

	Redis     []*testenv.Redis  // nil when existing or not asked for
	PG        *testenv.Postgres // ditto
	EtcdProcs *testenv.Etcd     // ditto
	RaftProcs *testenv.Raftlock // ditto

	// With ProvisionOptions.Faults: the links a partition cuts, and the
	// clock a clock jump moves.
	Proxies       *Proxies
	RedisLinks    []*Proxy // clients → redis i
	PGLink        *Proxy   // clients → postgres
	PGClock       *testenv.FakeClock
	EtcdLinks     []*Proxy   // clients → etcd member i
	RaftAPILinks  []*Proxy   // clients → node i's API
	RaftPeerLinks [][]*Proxy // node i → node j's Raft transport

	tb *testenv.ProcessTB
}

// Provision starts the servers of backends that opts.Existing does not
// name, concurrently, and returns once all are ready. On error nothing it
// started is left running.
func Provision(ctx context.Context, backends []string, opts ProvisionOptions) (*Servers, error) {
	if err := CheckBackends(backends); err != nil {
		return nil, err
	}
	s := &Servers{Spec: opts.Existing, tb: testenv.NewProcessTB("bench"), Proxies: NewProxies()}
	s.tb.Out = opts.Log
	// link puts a proxy in front of addr when faults are wanted.
	link := func(tb testing.TB, name, addr string) (*Proxy, string) {
		if !opts.Faults {
			return nil, addr
		}
		p, err := s.Proxies.Add(name, addr)
		if err != nil {
			tb.Fatal(err)
		}
		return p, p.Addr()
	}
	var wg sync.WaitGroup
	start := func(f func(tb testing.TB)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.tb.Do(f)
		}()
	}
	for _, b := range backends {
		if opts.Existing.has(b) {
			continue
		}
		switch b {
		case Raft:
			if opts.Lockgate == "" {
				s.Close()
				return nil, errors.New("bench: provisioning raft needs the lockgate binary")
			}
			start(func(tb testing.TB) {
				var ro testenv.RaftlockOptions
				if opts.Faults {
					ro.Args = s.raftFaultArgs
				}
				s.RaftProcs = testenv.StartRaftlockWith(tb, opts.Lockgate, RaftNodes, ro)
				s.Spec.Raft = s.RaftProcs.APIAddrs
				if opts.Faults {
					s.Spec.Raft = make([]string, len(s.RaftAPILinks))
					for i, p := range s.RaftAPILinks {
						s.Spec.Raft[i] = p.Addr()
					}
				}
			})
		case Redlock:
			start(func(tb testing.TB) {
				s.Redis = testenv.StartRedisN(tb, RedisMasters)
				for i, r := range s.Redis {
					p, addr := link(tb, fmt.Sprintf("redis-%d", i), r.Addr)
					s.RedisLinks = append(s.RedisLinks, p)
					s.Spec.Redlock = append(s.Spec.Redlock, addr)
				}
			})
		case Postgres:
			start(func(tb testing.TB) {
				// fsync on: raftlock and etcd wait for their disks too.
				po := testenv.PostgresOptions{Durable: true}
				if opts.Faults {
					s.PGClock = testenv.NewFakeClock(tb)
					po.Env = s.PGClock.Env()
				}
				s.PG = testenv.StartPostgresWith(tb, po)
				server := fmt.Sprintf("127.0.0.1:%d", s.PG.Port)
				var addr string
				s.PGLink, addr = link(tb, "postgres", server)
				s.Spec.Postgres = strings.Replace(s.PG.URL, server, addr, 1)
			})
		case Etcd:
			start(func(tb testing.TB) {
				s.EtcdProcs = testenv.StartEtcd(tb, EtcdMembers)
				for _, m := range s.EtcdProcs.Members {
					p, addr := link(tb, m.Name, strings.TrimPrefix(m.ClientURL, "http://"))
					s.EtcdLinks = append(s.EtcdLinks, p)
					s.Spec.Etcd = append(s.Spec.Etcd, "http://"+addr)
				}
			})
		}
	}
	wg.Wait()
	if s.tb.Failed() {
		s.Close()
		return nil, fmt.Errorf("bench: starting servers failed: %s", s.tb.Errors())
	}
	return s, ctx.Err()
}

// Close stops every proxy and every provisioned server, by PID, and removes
// its data.
func (s *Servers) Close() {
	s.Proxies.Close()
	s.tb.Close()
}

// FloorDir is the directory the physical floor's sync is measured in: the
// one that holds the provisioned raftlock nodes' data directories, so that
// the sync is the nodes' filesystem's; without provisioned nodes, the
// system's temporary directory, where testenv keeps every server's data.
func (s *Servers) FloorDir() string {
	if s != nil && s.RaftProcs != nil && len(s.RaftProcs.Nodes) > 0 {
		return filepath.Dir(s.RaftProcs.Nodes[0].DataDir)
	}
	return os.TempDir()
}

// raftFaultArgs is the testenv hook that puts proxies in front of every
// node's API and on every Raft link (node i dials node j through
// RaftPeerLinks[i][j]), and turns fault injection on.
func (s *Servers) raftFaultArgs(i int, nodes []*testenv.RaftNode) []string {
	if i == 0 { // one set of proxies per start attempt
		s.RaftAPILinks = make([]*Proxy, len(nodes))
		s.RaftPeerLinks = make([][]*Proxy, len(nodes))
		for a := range nodes {
			s.RaftAPILinks[a], _ = s.Proxies.Add(fmt.Sprintf("api-%d", a+1), nodes[a].APIAddr)
			s.RaftPeerLinks[a] = make([]*Proxy, len(nodes))
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
