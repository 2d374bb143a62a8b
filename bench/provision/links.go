package provision

import (
	"errors"
	"fmt"
	"strings"

	"github.com/lockgate/lockgate/bench/proxy"
	"github.com/lockgate/lockgate/internal/backends"
)

// ClientLinks are one client's own proxies in front of its backend's
// servers, for a backend whose locks live on a client session that a
// background keep-alive renews (Caps.Session: etcd's session lease,
// ZooKeeper's session). Stalling the caller alone would not end such a
// lock — the keep-alive runs on — while a paused process stalls its
// keep-alive too: that is the pause the Jepsen analysis of etcd 3.4 used.
// The client pause cuts these links for its length, so the servers hear
// nothing from the paused client, as from a paused process.
type ClientLinks []*proxy.Proxy

func (cl ClientLinks) Cut() {
	for _, p := range cl {
		p.Cut()
	}
}

func (cl ClientLinks) Heal() error {
	var errs []error
	for _, p := range cl {
		errs = append(errs, p.Heal())
	}
	return errors.Join(errs...)
}

// OwnLinks gives client i proxies of its own in front of the servers of
// spec that its backend reaches, and the spec that dials them.
func (s *Servers) OwnLinks(backend string, i int, spec Spec) (Spec, ClientLinks, error) {
	var links ClientLinks
	via := func(name, addr string) (string, error) {
		p, err := s.Proxies.Add(fmt.Sprintf("client-%d-%s", i, name), addr)
		if err != nil {
			return "", err
		}
		links = append(links, p)
		return p.Addr(), nil
	}
	switch KindOf(backend) {
	case backends.KindEtcd:
		eps := make([]string, len(spec.Etcd))
		for j, ep := range spec.Etcd {
			a, err := via(fmt.Sprintf("etcd-%d", j), strings.TrimPrefix(ep, "http://"))
			if err != nil {
				return spec, links, err
			}
			eps[j] = "http://" + a
		}
		spec.Etcd = eps
	case backends.KindZooKeeper:
		addrs := make([]string, len(spec.ZooKeeper))
		for j, addr := range spec.ZooKeeper {
			a, err := via(fmt.Sprintf("zookeeper-%d", j), addr)
			if err != nil {
				return spec, links, err
			}
			addrs[j] = a
		}
		spec.ZooKeeper = addrs
	}
	return spec, links, nil
}
