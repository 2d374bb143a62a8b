package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

type metrics struct {
	reg       *prometheus.Registry
	acquire   *prometheus.HistogramVec
	acquireWS prometheus.Observer // acquire's "ws" child, looked up once
	grants    prometheus.Counter
	// wantedPushes counts "wanted" messages pushed to holders.
	wantedPushes prometheus.Counter
	waiters      prometheus.Gauge
	errors       *prometheus.CounterVec
	connections  prometheus.Gauge
	// watches counts open watches; watchEvents the events pushed to them.
	watches     prometheus.Gauge
	watchEvents prometheus.Counter
	// renewals counts successful renewals by kind: "lease" (renew, 3),
	// "session" (renewSession, 12) — one keep-alive renews a
	// session's every lease.
	renewals      *prometheus.CounterVec
	leaseRenews   prometheus.Counter
	sessionRenews prometheus.Counter
}

func newMetrics(g *Gateway) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.acquire = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "lockgate_acquire_seconds",
		Help:    "Time from an acquire request to its grant, by protocol.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 16), // 100 µs … ~9 min
	}, []string{"protocol"})
	m.acquireWS = m.acquire.WithLabelValues("ws")
	m.grants = prometheus.NewCounter(prometheus.CounterOpts{Name: "lockgate_grants_total", Help: "Leases granted through this gateway."})
	m.wantedPushes = prometheus.NewCounter(prometheus.CounterOpts{Name: "lockgate_wanted_pushes_total",
		Help: "\"wanted\" messages pushed to holders whose key another caller waits for."})
	m.waiters = prometheus.NewGauge(prometheus.GaugeOpts{Name: "lockgate_waiters", Help: "Acquires waiting for a grant."})
	m.errors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockgate_errors_total", Help: "Error replies, by code."}, []string{"code"})
	m.connections = prometheus.NewGauge(prometheus.GaugeOpts{Name: "lockgate_connections", Help: "Open WebSocket connections."})
	m.watches = prometheus.NewGauge(prometheus.GaugeOpts{Name: "lockgate_watches", Help: "Open watches (WebSocket command 9)."})
	m.watchEvents = prometheus.NewCounter(prometheus.CounterOpts{Name: "lockgate_watch_events_total", Help: "Watch events pushed to clients."})
	m.renewals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockgate_renewals_total",
		Help: "Successful renewals through this gateway, by kind: lease (renew) or session (renewSession, one for all of a session's leases)."}, []string{"kind"})
	m.leaseRenews, m.sessionRenews = m.renewals.WithLabelValues("lease"), m.renewals.WithLabelValues("session")
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lockgate_held_locks",
		Help: "Leases granted over WebSocket connections of this gateway and not yet released or expired.",
	}, func() float64 { return float64(g.heldLeases()) })
	if a := g.opts.Audit; a != nil {
		m.reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lockgate_audit_events_written_total", Help: "Audit trail lines written (--audit-log)."},
				func() float64 { return float64(a.Written()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lockgate_audit_events_dropped_total", Help: "Audit trail events lost: the queue stayed full, or a write failed."},
				func() float64 { return float64(a.Dropped()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lockgate_audit_errors_total", Help: "Audit trail I/O errors (write, flush, rotation)."},
				func() float64 { return float64(a.Errors()) }))
	}
	m.reg.MustRegister(m.acquire, m.grants, m.wantedPushes, m.waiters, m.errors, m.connections, held, m.watches, m.watchEvents, m.renewals,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// heldLeases counts the live leases of all connections.
func (g *Gateway) heldLeases() int {
	g.mu.Lock()
	cs := make([]*conn, 0, len(g.conns))
	for c := range g.conns {
		cs = append(cs, c)
	}
	g.mu.Unlock()
	n := 0
	for _, c := range cs {
		n += c.liveLeases()
	}
	return n
}
