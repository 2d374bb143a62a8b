package provision

import (
	"fmt"

	"github.com/lockgate/lockgate/internal/backends"
)

// ServerProc is one server process a bench run started: the leader of a
// process tree (a PostgreSQL server is its postmaster and the backends it
// forks).
type ServerProc struct {
	// Name says which server it is: "raft node 1", "etcd0", "redis
	// 127.0.0.1:6400", "postgres", "zookeeper 2".
	Name string
	PID  int
}

// NotProvisioned is why Procs has no processes for a backend whose servers
// a Spec named.
const NotProvisioned = "not measured: existing servers (--servers), not the bench's"

// Procs lists the processes of the servers that serve backend, those of
// its kind, which other backends of the kind share (etcd's serve etcd and
// etcd-mutex). When the bench did not start them it returns none and why.
func (s *Servers) Procs(backend string) ([]ServerProc, string) {
	var out []ServerProc
	switch KindOf(backend) {
	case backends.KindRaft:
		if s.RaftProcs != nil {
			for _, nd := range s.RaftProcs.Nodes {
				out = append(out, ServerProc{Name: "raft node " + nd.ID, PID: nd.PID()})
			}
		}
	case backends.KindRedis:
		for _, r := range s.Redis {
			out = append(out, ServerProc{Name: "redis " + r.Addr, PID: r.PID()})
		}
	case backends.KindPostgres:
		if s.PG != nil {
			out = append(out, ServerProc{Name: "postgres", PID: s.PG.PID()})
		}
	case backends.KindEtcd:
		if s.EtcdProcs != nil {
			for _, m := range s.EtcdProcs.Members {
				out = append(out, ServerProc{Name: m.Name, PID: m.PID()})
			}
		}
	case backends.KindZooKeeper:
		if s.ZKProcs != nil {
			for _, m := range s.ZKProcs.Members {
				out = append(out, ServerProc{Name: fmt.Sprintf("zookeeper %d", m.ID), PID: m.PID()})
			}
		}
	}
	if len(out) == 0 {
		return nil, NotProvisioned
	}
	return out, ""
}

// LeaderPID is the process that leads the cluster serving backend now: the
// raftlock node the nodes name, the etcd member whose metrics say so, the
// ZooKeeper member in mode leader. Zero when none is known, and for
// servers that are not a cluster with a leader (Redis, PostgreSQL).
// It asks the servers over the network: call it outside a measured
// window.
func (s *Servers) LeaderPID(backend string) int {
	switch KindOf(backend) {
	case backends.KindRaft:
		if s.RaftProcs != nil {
			if nd := s.RaftProcs.Leader(); nd != nil {
				return nd.PID()
			}
		}
	case backends.KindEtcd:
		if s.EtcdProcs != nil {
			for _, m := range s.EtcdProcs.Members {
				if m.IsLeader() {
					return m.PID()
				}
			}
		}
	case backends.KindZooKeeper:
		if s.ZKProcs != nil && len(s.ZKProcs.Members) > 1 {
			for _, m := range s.ZKProcs.Members {
				if mode, err := m.Mode(); err == nil && mode == "leader" {
					return m.PID()
				}
			}
		}
	}
	return 0
}
