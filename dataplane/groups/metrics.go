package groups

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/dataplane/coordinator"
)

// newCoordinatorMetrics registers what the group coordinators of a broker
// count, on reg.
func newCoordinatorMetrics(reg prometheus.Registerer) *coordinator.Metrics {
	m := &coordinator.Metrics{
		Rebalances: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "group_rebalances_total",
			Help: "Consumer-group rebalances (a new target assignment) in groups this broker coordinates.",
		}),
		Revoked: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "group_revoked_partitions_total",
			Help: "Partitions consumer-group members were asked to give up, in groups this broker coordinates.",
		}),
	}
	latency := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "sluice", Subsystem: "broker", Name: "group_commit_duration_seconds",
		Help:    "Time to write an offset commit (or group change) to the replicated offsets partition, acks=all.",
		Buckets: prometheus.ExponentialBuckets(0.0002, 2, 16),
	})
	m.WriteLatency = latency
	reg.MustRegister(m.Rebalances, m.Revoked, latency)
	return m
}
