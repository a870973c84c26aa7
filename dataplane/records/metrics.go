package records

import "github.com/prometheus/client_golang/prometheus"

// metrics are the record path's Prometheus metrics (in the broker's
// namespace, as before they moved here). Tenant labels are bounded: one
// value per tenant with partitions on this broker.
type metrics struct {
	produceLatency *prometheus.HistogramVec
	fetchLatency   prometheus.Histogram
	producedBytes  *prometheus.CounterVec
	fetchedBytes   *prometheus.CounterVec
	producerIDs    prometheus.Counter
}

// newMetrics makes the metrics and registers them on reg, unless nil.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		produceLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "produce_duration_seconds",
			Help:    "Produce handling time on the leader (append, and for acks=all the wait for the ISR), by acks.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 16),
		}, []string{"acks"}),
		fetchLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "fetch_duration_seconds",
			Help:    "Consumer fetch handling time on the leader, long-poll waits included.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 18),
		}),
		producedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "produced_bytes_total",
			Help: "Batch bytes appended by produce requests, by tenant.",
		}, []string{"tenant"}),
		fetchedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "fetched_bytes_total",
			Help: "Batch bytes returned to consumers, by tenant.",
		}, []string{"tenant"}),
		producerIDs: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "producer_ids_issued_total",
			Help: "Producer ids handed out by InitProducerId on this broker.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.produceLatency, m.fetchLatency, m.producedBytes, m.fetchedBytes, m.producerIDs)
	}
	return m
}

func (m *metrics) produced(tenant string, n int) {
	m.producedBytes.WithLabelValues(tenant).Add(float64(n))
}

func (m *metrics) fetched(tenant string, n int) {
	if n > 0 {
		m.fetchedBytes.WithLabelValues(tenant).Add(float64(n))
	}
}
