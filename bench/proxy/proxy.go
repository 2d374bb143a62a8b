// Package proxy is the in-process TCP proxies (toxiproxy) that a bench run
// puts in front of every server and between raftlock peers when it
// provisions for faults: a fault cuts, slows or drops the links they carry.
package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
	p      *toxiproxy.Proxy
	mu     sync.Mutex
	cut    bool
	toxics []string // names of the toxics AddToxic put on
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

// Toxic is a toxiproxy toxic on one direction of a link: Type is one of
// toxiproxy's ("latency", "timeout", "bandwidth", "slicer", ...),
// Stream "upstream" (what the dialling side sends) or "downstream" (what it
// receives), Toxicity the chance in [0, 1] that one connection's stream
// gets it (toxiproxy draws it per connection; 0 means 1), and Attributes
// the toxic's own (e.g. {"latency": 100, "jitter": 20} in milliseconds).
type Toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Stream     string         `json:"stream"`
	Toxicity   float32        `json:"toxicity"`
	Attributes map[string]any `json:"attributes"`
}

// AddToxic puts t on the link, for the connections open now and those to
// come, until RemoveToxics.
func (p *Proxy) AddToxic(t Toxic) error {
	if t.Toxicity == 0 {
		t.Toxicity = 1
	}
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	w, err := p.p.Toxics.AddToxicJson(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("bench: toxic %s on proxy %s: %w", t.Name, p.p.Name, err)
	}
	p.mu.Lock()
	p.toxics = append(p.toxics, w.Name)
	p.mu.Unlock()
	return nil
}

// RemoveToxics takes every toxic off the link. With reset, it first drops
// the link's open connections (as Cut, then Heal): a toxic that dropped
// data leaves a byte stream with a hole in it, which must not reach the
// other side once the data flows again.
func (p *Proxy) RemoveToxics(reset bool) error {
	if reset {
		p.Cut()
	}
	p.mu.Lock()
	names := p.toxics
	p.toxics = nil
	p.mu.Unlock()
	for _, name := range names {
		if err := p.p.Toxics.RemoveToxic(context.Background(), name); err != nil && !errors.Is(err, toxiproxy.ErrToxicNotFound) {
			return fmt.Errorf("bench: removing toxic %s from proxy %s: %w", name, p.p.Name, err)
		}
	}
	if reset {
		return p.Heal()
	}
	return nil
}

// All returns every proxy of the set: every link of the campaign.
func (ps *Proxies) All() []*Proxy {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return slices.Clone(ps.all)
}
