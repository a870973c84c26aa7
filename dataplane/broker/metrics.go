package broker

import (
	"github.com/prometheus/client_golang/prometheus"
)

// brokerMetrics are the broker's Prometheus metrics. Tenant labels are
// bounded: one value per tenant with partitions on this broker.
type brokerMetrics struct {
	producedBytes *prometheus.CounterVec
	fetchedBytes  *prometheus.CounterVec
	forwarded     prometheus.Counter
	isrShrinks    prometheus.Counter
	isrExpands    prometheus.Counter
}

func newBrokerMetrics(reg prometheus.Registerer, b *Broker) *brokerMetrics {
	m := &brokerMetrics{
		producedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "produced_bytes_total",
			Help: "Batch bytes appended by produce requests, by tenant.",
		}, []string{"tenant"}),
		fetchedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "fetched_bytes_total",
			Help: "Batch bytes returned to consumers, by tenant.",
		}, []string{"tenant"}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "forwarded_requests_total",
			Help: "Client requests forwarded to the partition leader.",
		}),
		isrShrinks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "isr_shrinks_total",
			Help: "ISR shrinks this broker's partitions had confirmed as leader.",
		}),
		isrExpands: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "isr_expands_total",
			Help: "ISR expansions this broker's partitions had confirmed as leader.",
		}),
	}
	reg.MustRegister(m.producedBytes, m.fetchedBytes, m.forwarded, m.isrShrinks, m.isrExpands)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sluice", Subsystem: "broker", Name: "leader_partitions",
		Help: "Partitions this broker leads.",
	}, func() float64 { return float64(b.countRole(roleLeader, false)) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sluice", Subsystem: "broker", Name: "under_replicated_partitions",
		Help: "Partitions this broker leads whose ISR is smaller than their replica set.",
	}, func() float64 { return float64(b.countRole(roleLeader, true)) }))
	return m
}

func (m *brokerMetrics) produced(tenant string, batches [][]byte) {
	n := 0
	for _, b := range batches {
		n += len(b)
	}
	m.producedBytes.WithLabelValues(tenant).Add(float64(n))
}

func (m *brokerMetrics) fetched(tenant string, n int) {
	if n > 0 {
		m.fetchedBytes.WithLabelValues(tenant).Add(float64(n))
	}
}

// countRole counts partitions in role; with underReplicated, only those
// whose ISR is smaller than the replica set.
func (b *Broker) countRole(r role, underReplicated bool) int {
	b.mu.Lock()
	parts := make([]*partition, 0, len(b.parts))
	for _, p := range b.parts {
		parts = append(parts, p)
	}
	b.mu.Unlock()
	n := 0
	for _, p := range parts {
		p.mu.Lock()
		if p.role == r && (!underReplicated || len(p.meta.isr) < len(p.meta.replicas)) {
			n++
		}
		p.mu.Unlock()
	}
	return n
}
