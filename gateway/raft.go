package gateway

import (
	"errors"

	"github.com/lockgate/lockgate/backend/raftlock"
)

// ServeRaft mounts a gateway over a raftlock server on its API address
// (seed 000: every server serves clients on 50050+id). On a follower every
// lock call answers with a redirect to the leader. /readyz is ready when
// the node leads or knows the leader to redirect to. /metrics adds the
// node's Raft metrics (raftlock.Node.Collector) to the gateway's.
func ServeRaft(s *raftlock.Server, opts Options) *Gateway {
	if opts.Ready == nil {
		opts.Ready = func() error {
			if s.IsLeader() {
				return nil
			}
			if _, addr := s.Leader(); addr != "" {
				return nil
			}
			return errors.New("no raftlock leader known")
		}
	}
	g := New(s.Node, opts)
	g.Registry().MustRegister(s.Node.Collector()) // Raft's and the lock table's metrics, next to the gateway's
	s.Mux.Handle("/", g)
	return g
}
