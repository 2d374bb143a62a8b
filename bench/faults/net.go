package faults

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/proxy"
)

// Network nemeses beyond the plain partition (raftPartition): partitions
// of other shapes between raftlock's nodes, one-way loss, and latency and
// loss toxics on every link of any backend. All go through the campaign's
// toxiproxy links (bench/proxy.go).

// raftLeaderIndex returns the index in Nodes of the node the cluster
// reports as leader, or -1.
func raftLeaderIndex(s *provision.Servers) int {
	l := s.RaftProcs.Leader()
	for i, nd := range s.RaftProcs.Nodes {
		if nd == l {
			return i
		}
	}
	return -1
}

// raftBetween returns the Raft links between nodes i and j, both
// directions.
func raftBetween(s *provision.Servers, i, j int) []*proxy.Proxy {
	return []*proxy.Proxy{s.RaftPeerLinks[i][j], s.RaftPeerLinks[j][i]}
}

// raftLeaderOrAny returns the leader's index and "leader N", or, when no
// node knows a leader, a random node's and "node N".
func raftLeaderOrAny(s *provision.Servers, rng *rand.Rand) (int, string) {
	if i := raftLeaderIndex(s); i >= 0 {
		return i, "leader " + s.RaftProcs.Nodes[i].ID
	}
	i := rng.IntN(len(s.RaftProcs.Nodes))
	return i, "node " + s.RaftProcs.Nodes[i].ID + " (no leader known)"
}

// raftPartitionLeader cuts the leader from every peer, both directions; its
// clients still reach it, so it must stop granting on its own (it steps
// down within 2 × LeaderLeaseTimeout) while the others elect a leader.
func raftPartitionLeader(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	i, who := raftLeaderOrAny(env.S, rng)
	var cut []*proxy.Proxy
	for j := range env.S.RaftProcs.Nodes {
		if j != i {
			cut = append(cut, raftBetween(env.S, i, j)...)
		}
	}
	return cutAll(cut), "isolate " + who + " from its peers (its clients still reach it)", nil
}

// raftPartitionMajority splits the nodes into a random minority and the
// majority, both directions cut between them.
func raftPartitionMajority(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	nodes := env.S.RaftProcs.Nodes
	perm := rng.Perm(len(nodes))
	minority, majority := perm[:(len(nodes)-1)/2], perm[(len(nodes)-1)/2:]
	var cut []*proxy.Proxy
	for _, i := range minority {
		for _, j := range majority {
			cut = append(cut, raftBetween(env.S, i, j)...)
		}
	}
	return cutAll(cut), fmt.Sprintf("split nodes %v | %v", ids(env.S, minority), ids(env.S, majority)), nil
}

// raftPartitionBridge cuts two nodes from each other while a third (the
// bridge) still sees both: a partial partition, in which the bridge's vote
// decides every election and a leader on either side may be deposed by
// the other's higher term.
func raftPartitionBridge(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	perm := rng.Perm(len(env.S.RaftProcs.Nodes))
	a, b, c := perm[0], perm[1], perm[2]
	what := fmt.Sprintf("cut node %s from node %s; node %s bridges them", idOf(env.S, a), idOf(env.S, b), idOf(env.S, c))
	return cutAll(raftBetween(env.S, a, b)), what, nil
}

// oneWay is the toxic of a one-way partition: toxiproxy's timeout toxic
// with timeout 0 drops every byte of the stream it is on and keeps the
// connection open, so the other direction of the same connection still
// flows.
var oneWay = proxy.Toxic{Name: "oneway", Type: "timeout", Attributes: map[string]any{"timeout": 0}}

// raftPartitionOneWay drops the Raft traffic in one direction only,
// between the leader (or one time in two a random node) and every peer:
// "deaf", the node hears nothing from its peers (their requests to it and
// their answers to its requests are dropped) while they hear it; or
// "mute", the reverse. Link i→j carries i's requests upstream and j's
// answers downstream. The heal drops every connection through the links
// before the data flows again: a stream with a hole in it must not reach
// the other side.
func raftPartitionOneWay(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	_, v, who := raftVictim(env.S, rng, true)
	deaf := rng.IntN(2) == 0
	peer := env.S.RaftPeerLinks
	var links []*proxy.Proxy
	add := func(p *proxy.Proxy, stream string) error {
		t := oneWay
		t.Stream = stream
		links = append(links, p)
		return p.AddToxic(t)
	}
	heal := func() error {
		var errs []error
		for _, p := range links {
			errs = append(errs, p.RemoveToxics(true))
		}
		return errors.Join(errs...)
	}
	for j := range env.S.RaftProcs.Nodes {
		if j == v {
			continue
		}
		var err error
		if deaf {
			err = errors.Join(add(peer[j][v], "upstream"), add(peer[v][j], "downstream"))
		} else {
			err = errors.Join(add(peer[v][j], "upstream"), add(peer[j][v], "downstream"))
		}
		if err != nil {
			return nil, "", errors.Join(err, heal())
		}
	}
	if deaf {
		return heal, who + " hears nothing from its peers; they hear it", nil
	}
	return heal, who + "'s peers hear nothing from it; it hears them", nil
}

// slowNet puts a latency toxic on both directions of every link of the
// campaign (client↔server, and raftlock's node↔node): each direction
// L/2 ± L/8 for a round trip of L, L drawn in [50, 200) ms. Latency delays
// data and never drops it, so the heal takes the toxics off the open
// connections.
func slowNet(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	l := provision.Between(rng, 50*time.Millisecond, 200*time.Millisecond)
	half := l.Milliseconds() / 2
	links := env.S.Proxies.All()
	heal := func() error {
		var errs []error
		for _, p := range links {
			errs = append(errs, p.RemoveToxics(false))
		}
		return errors.Join(errs...)
	}
	for _, p := range links {
		for _, stream := range []string{"upstream", "downstream"} {
			t := proxy.Toxic{Name: "slow-" + stream, Type: "latency", Stream: stream,
				Attributes: map[string]any{"latency": half, "jitter": half / 4}}
			if err := p.AddToxic(t); err != nil {
				return nil, "", errors.Join(err, heal())
			}
		}
	}
	return heal, fmt.Sprintf("round trips %v ± %v slower on all %d links", l.Round(time.Millisecond), (l / 4).Round(time.Millisecond), len(links)), nil
}

// lossyNet emulates packet loss. A TCP proxy sees no packets — the
// kernel retransmits lost ones — so loss shows above TCP as a connection
// that stalls, then dies: toxiproxy's timeout toxic, which drops every
// byte of a stream and closes the connection after a timeout, put on a
// random fraction p of the streams (its toxicity, drawn per connection
// and direction), p in [5 %, 20 %), the timeout in [0.5, 1.5) s, on both
// directions of every link. Each new connection draws again, so the loss
// moves around as the clients and nodes reconnect. The bandwidth and
// slicer toxics would only slow the streams, which slow-net covers. The
// heal drops every connection through the links first, so no stream with
// a hole in it carries data again.
func lossyNet(env Env, rng *rand.Rand, _ time.Duration) (func() error, string, error) {
	p := 0.05 + 0.15*rng.Float64()
	timeout := provision.Between(rng, 500*time.Millisecond, 1500*time.Millisecond)
	links := env.S.Proxies.All()
	heal := func() error {
		var errs []error
		for _, px := range links {
			errs = append(errs, px.RemoveToxics(true))
		}
		return errors.Join(errs...)
	}
	for _, px := range links {
		for _, stream := range []string{"upstream", "downstream"} {
			t := proxy.Toxic{Name: "lossy-" + stream, Type: "timeout", Stream: stream, Toxicity: float32(p),
				Attributes: map[string]any{"timeout": timeout.Milliseconds()}}
			if err := px.AddToxic(t); err != nil {
				return nil, "", errors.Join(err, heal())
			}
		}
	}
	return heal, fmt.Sprintf("%.0f %% of the streams on all %d links black-holed, closed after %v",
		100*p, len(links), timeout.Round(time.Millisecond)), nil
}

func idOf(s *provision.Servers, i int) string { return s.RaftProcs.Nodes[i].ID }

func ids(s *provision.Servers, idx []int) []string {
	out := make([]string, len(idx))
	for k, i := range idx {
		out[k] = idOf(s, i)
	}
	return out
}
