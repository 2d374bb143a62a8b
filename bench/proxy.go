package bench

import (
	"fmt"
	"sync"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Proxies are in-process TCP proxies (toxiproxy) placed between clients and
// servers and between raftlock peers: the chaos campaign's partitions cut
// them. Cut closes the proxy's listener and every connection through it, so
// both directions of the link fail at once, as in a real partition; Heal
// listens again on the same address.
type Proxies struct {
	mu     sync.Mutex
	server *toxiproxy.ApiServer
	all    []*Proxy
}

// Proxy is one proxied link.
type Proxy struct {
	p   *toxiproxy.Proxy
	mu  sync.Mutex
	cut bool
}

// NewProxies returns an empty set of proxies.
func NewProxies() *Proxies {
	return &Proxies{server: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())}
}

// Add starts a proxy on a free 127.0.0.1 port forwarding to upstream.
func (ps *Proxies) Add(name, upstream string) (*Proxy, error) {
	p := toxiproxy.NewProxy(ps.server, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("bench: proxy %s → %s: %w", name, upstream, err)
	}
	px := &Proxy{p: p}
	ps.mu.Lock()
	ps.all = append(ps.all, px)
	ps.mu.Unlock()
	return px, nil
}

// Close stops every proxy.
func (ps *Proxies) Close() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.all {
		p.p.Stop()
	}
	ps.all = nil
}

// Addr is the address clients of the link dial.
func (p *Proxy) Addr() string { return p.p.Listen }

// Cut severs the link: the listener closes and open connections drop.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		p.p.Stop()
		p.cut = true
	}
}

// Heal restores a cut link on the same address.
func (p *Proxy) Heal() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		return nil
	}
	if err := p.p.Start(); err != nil {
		return fmt.Errorf("bench: healing proxy %s: %w", p.p.Name, err)
	}
	p.cut = false
	return nil
}
