package broker

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/dataplane/partition"
)

// brokerMetrics are the broker's Prometheus metrics (the record path's
// produce and fetch metrics are dataplane/records'). Tenant labels are
// bounded: one value per tenant with partitions on this broker.
type brokerMetrics struct {
	// forwarded counts the client requests forwarded to a leader, by
	// every service.
	forwarded  prometheus.Counter
	isrShrinks prometheus.Counter
	isrExpands prometheus.Counter
	// duplicates counts idempotent batches answered as already written;
	// sequenceErrors refusals by reason (out_of_order, fenced, ...).
	duplicates     prometheus.Counter
	sequenceErrors *prometheus.CounterVec
	// fetchSessionRequests counts the FetchReplicas requests this broker
	// served as leader, by kind (full, incremental, refused).
	fetchSessionRequests *prometheus.CounterVec
}

func newBrokerMetrics(reg prometheus.Registerer, b *Broker) *brokerMetrics {
	m := &brokerMetrics{
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
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "produce_duplicates_total",
			Help: "Idempotent batches that were retries of batches already written, answered with the original offsets and not written again.",
		}),
		sequenceErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "producer_sequence_errors_total",
			Help: "Idempotent batches refused, by reason: out_of_order_sequence (a gap), producer_fenced (an old epoch), duplicate_sequence (written too long ago to locate), invalid_sequence.",
		}, []string{"reason"}),
		fetchSessionRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "replica_fetch_session_requests_total",
			Help: "Replica-fetch session requests (FetchReplicas) served as leader, by kind: full (a new session), incremental, refused (an unknown session or a wrong session epoch: the follower starts a new session).",
		}, []string{"kind"}),
	}
	reg.MustRegister(m.forwarded, m.isrShrinks, m.isrExpands,
		m.duplicates, m.sequenceErrors, m.fetchSessionRequests)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sluice", Subsystem: "broker", Name: "replica_fetch_sessions",
		Help: "Replica-fetch sessions of follower brokers that this broker serves as leader (one per follower broker).",
	}, func() float64 { return float64(b.sessions.Stats().Sessions) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sluice", Subsystem: "broker", Name: "replica_fetch_session_partitions",
		Help: "Partitions carried by the replica-fetch sessions this broker serves as leader.",
	}, func() float64 { return float64(b.sessions.Stats().Partitions) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sluice", Subsystem: "broker", Name: "replica_fetchers",
		Help: "Leader brokers this broker's follower replicas fetch from: one fetcher, one fetch session, one goroutine each.",
	}, func() float64 { return float64(b.host.Fetchers()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sluice", Subsystem: "broker", Name: "open_segment_files",
		Help: "Partition log segment files open now (at most --max-open-segment-files but for those in use and, with --flush=os, those awaiting their fsync).",
	}, func() float64 { return float64(b.files.OpenFiles()) }))
	reg.MustRegister(partitionCollector{b})
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sluice", Subsystem: "broker", Name: "leader_partitions",
		Help: "Partitions this broker leads.",
	}, func() float64 { return float64(b.countRole(partition.RoleLeader, false)) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sluice", Subsystem: "broker", Name: "under_replicated_partitions",
		Help: "Partitions this broker leads whose ISR is smaller than their replica set.",
	}, func() float64 { return float64(b.countRole(partition.RoleLeader, true)) }))
	return m
}

// countRole counts partitions in role; with underReplicated, only those
// whose ISR is smaller than the replica set (the ISR the controller
// confirmed, as the leader state machine holds it).
func (b *Broker) countRole(r partition.Role, underReplicated bool) int {
	parts := b.partitions()
	n := 0
	for _, p := range parts {
		if s := p.Status(); s.Role == r && (!underReplicated || s.UnderReplicated()) {
			n++
		}
	}
	return n
}

// partitionCollector reports each local replica's offsets and ISR size.
// Cardinality is bounded by the partitions placed on this broker.
type partitionCollector struct{ b *Broker }

var (
	descHW  = prometheus.NewDesc("sluice_broker_partition_high_watermark", "High watermark of a local replica (leaders and followers).", []string{"topic_id", "partition", "role"}, nil)
	descLEO = prometheus.NewDesc("sluice_broker_partition_log_end_offset", "Log end offset of a local replica.", []string{"topic_id", "partition", "role"}, nil)
	descLSO = prometheus.NewDesc("sluice_broker_partition_last_stable_offset", "Last stable offset of a local replica: read_committed readers see below it; the high watermark minus it is the LSO lag (open transactions).", []string{"topic_id", "partition", "role"}, nil)
	descISR = prometheus.NewDesc("sluice_broker_partition_isr_size", "ISR size of partitions this broker leads.", []string{"topic_id", "partition"}, nil)
)

func (c partitionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descHW
	ch <- descLEO
	ch <- descLSO
	ch <- descISR
}

func (c partitionCollector) Collect(ch chan<- prometheus.Metric) {
	parts := c.b.partitions()
	for _, p := range parts {
		s := p.Status()
		name, part := s.Role.String(), strconv.Itoa(int(p.Partition()))
		ch <- prometheus.MustNewConstMetric(descHW, prometheus.GaugeValue, float64(s.HW), p.TopicID(), part, name)
		ch <- prometheus.MustNewConstMetric(descLEO, prometheus.GaugeValue, float64(p.Log().LEO()), p.TopicID(), part, name)
		ch <- prometheus.MustNewConstMetric(descLSO, prometheus.GaugeValue, float64(s.LSO), p.TopicID(), part, name)
		if s.Role == partition.RoleLeader && s.ISR > 0 {
			ch <- prometheus.MustNewConstMetric(descISR, prometheus.GaugeValue, float64(s.ISR), p.TopicID(), part)
		}
	}
}
