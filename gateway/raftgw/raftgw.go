// Package raftgw mounts the lock gateway on a raftlock server, so that every
// node of a raftlock cluster serves the gateway protocol (docs/protocol.md)
// on its own API address, as `lockgate node` and `lockgate serve` run it.
//
// It lives apart from package gateway so that the gateway serves any
// lock.Locker without linking hashicorp/raft: a program that fronts
// Redlock or PostgreSQL does not carry a Raft implementation it never runs.
// It is the one adapter between the two, the way go-redsync keeps one small
// package per driver.
package raftgw

import (
	"errors"

	"net/http"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/console"
	"github.com/lockgate/lockgate/gateway"
)

// ErrNoLeader is what the default readiness check (Serve) reports when the
// node neither leads nor knows a leader to redirect clients to. /readyz
// shows its text, which is kept from before the move for probes that match
// it.
var ErrNoLeader = errors.New("no raftlock leader known")

// Serve mounts a gateway over a raftlock server on its API address (every
// server of the cluster serves clients on its own address). On a follower
// every lock call answers with a redirect to the leader. /readyz is ready
// when the node leads or knows the leader to redirect to, unless
// opts.Ready says otherwise. /metrics adds the node's Raft metrics
// (raftlock.Node.Collector) to the gateway's. The web console is served
// beside it, at /ui (package console, docs/console.md); the gateway admits
// the console's credentials too: the node's admin tokens and client
// certificates verified against the cluster CA, besides its client tokens.
func Serve(s *raftlock.Server, opts gateway.Options) *gateway.Gateway {
	if opts.Ready == nil {
		opts.Ready = func() error {
			if s.IsLeader() {
				return nil
			}
			if _, addr := s.Leader(); addr != "" {
				return nil
			}
			return ErrNoLeader
		}
	}
	if opts.AlsoIdentify == nil {
		opts.AlsoIdentify = func(r *http.Request) (string, bool) {
			// The header's token, or a browser's from its subprotocol.
			tok, has := gateway.BearerToken(r)
			c, ok := s.CredentialWith(r, tok, has)
			if !ok || c.Kind == "open" {
				return "", false
			}
			return c.Identity, true
		}
	}
	g := gateway.New(s.Node, opts)
	g.Registry().MustRegister(s.Node.Collector()) // Raft's and the lock table's metrics, next to the gateway's
	s.Mux.Handle("/", g)
	console.Mount(s.Mux, s.Node, console.Options{Logger: opts.Logger,
		Readable:   g.Readable,
		KeyAdmin:   func(identity, key string) bool { return g.Policy().Allowed(identity, gateway.PermAdmin, key) },
		Restricted: func() bool { return g.Policy().HasRules() },
		Metrics:    g.Registry()})
	return g
}
