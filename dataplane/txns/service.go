package txns

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/dataplane/runtime"
	"github.com/sluicemq/sluice/dataplane/txn"
	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/tenants/system"
)

// Config is the service's configuration, from the broker's.
type Config struct {
	// BrokerID is this broker's id.
	BrokerID int32
	// MaxTransactionTimeout caps the transaction timeout InitProducer may
	// ask (--max-transaction-timeout); the default timeout is 60 s, or
	// this when shorter.
	MaxTransactionTimeout time.Duration
	// TransactionalIDExpiration: an id with no transaction open and no
	// call for this long is forgotten (--transactional-id-expiration).
	TransactionalIDExpiration time.Duration
}

// Deps are what the service reaches the rest of the broker through.
type Deps struct {
	// Logger: nil discards.
	Logger *slog.Logger
	// Registerer takes the coordinators' metrics (nil: not registered).
	Registerer prometheus.Registerer
	// View is the broker's current cluster view.
	View func() *cluster.View
	// Replica is this broker's replica of a partition (nil: none here).
	Replica func(topicID string, partition int32) *partition.Replica
	// Hosted returns the transaction coordinators the runtime hosts whose
	// leadership this broker still holds (loaded or not).
	Hosted func() []*txn.Coordinator
	// Host returns the loaded coordinator of partition pm of the
	// transaction-state topic t: the one the runtime hosts for pm's leader
	// epoch, else a new one from mk (given the partition's access and its
	// leader epoch). It answers pm's NotLeaderError when this broker does
	// not lead pm, and Unavailable while it is taking it over.
	Host func(ctx context.Context, t *cluster.Topic, pm cluster.Partition, mk func(p runtime.Partition, leaderEpoch int32) *txn.Coordinator) (*txn.Coordinator, error)
	// AllocateProducerID gives a new producer id (the broker's one
	// admission point of producer ids: txn.Config.AllocateProducerID).
	AllocateProducerID func(context.Context) (int64, error)
	// Admission admits new transactional ids (txn.Config.Admit); nil
	// admits all.
	Admission Admission
	// Limits are a tenant's limits as the last quota exchange carried
	// them (zero where none did; asking for an exchange then), for the
	// transactions' bounds (bounds). Nil: the largest plan's.
	Limits func(tenantID string) limit.Values
	// Peers reach the other brokers.
	Peers Peers
	// GroupMarker writes a group's marker (m.Group set) at the group's
	// coordinator on this broker: its NotLeader when this broker does not
	// coordinate the group.
	GroupMarker func(ctx context.Context, m txn.Marker) error
}

// Admission is the quota admission the service asks (the names of
// admission.Enforcer's methods).
type Admission interface {
	// AdmitTransactionalID admits the creation of a transactional id
	// (txn.Config.Admit): an error refuses it, as is; release, when not
	// nil, is called once the creation is done or failed.
	AdmitTransactionalID(ctx context.Context, tenantID, transactionalID string) (release func(), err error)
}

// Peers are the calls to other brokers the service makes.
type Peers interface {
	// AddToTransaction asks the transaction coordinator on broker to add
	// req's partitions (by topic name) and groups to the producer's
	// transaction (that broker answers it itself, never forwarding),
	// presenting the client's credential authorization. Its error is the
	// coordinator's answer as a domain error (a NotLeader answer a
	// *partition.NotLeaderError); an error that is none means broker was
	// not asked.
	AddToTransaction(ctx context.Context, broker int32, authorization string, req AddRequest) error
	// WriteMarkers writes markers at broker (its Service.WriteMarkers)
	// and returns each one's error (nil: written); err when the call
	// failed, none written.
	WriteMarkers(ctx context.Context, broker int32, markers []txn.Marker) (errs []error, err error)
}

// Service is the transaction service of one broker.
type Service struct {
	cfg     Config
	deps    Deps
	logger  *slog.Logger
	metrics *txn.Metrics
}

// New returns the service and registers its metrics.
func New(cfg Config, deps Deps) *Service {
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{cfg: cfg, deps: deps, logger: deps.Logger}
	s.metrics = newMetrics(deps.Registerer, s)
	return s
}

// newMetrics registers the transaction coordinators' metrics, shared by
// every coordinator of this broker.
func newMetrics(reg prometheus.Registerer, s *Service) *txn.Metrics {
	m := &txn.Metrics{
		Commits: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "txn_commits_total",
			Help: "Transactions committed by the transaction coordinators on this broker (CompleteCommit written).",
		}),
		Aborts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "txn_aborts_total",
			Help: "Transactions aborted by the transaction coordinators on this broker (CompleteAbort written): by their producer, by a new incarnation's InitProducerId, or by their timeout.",
		}),
		TimedOut: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "txn_timed_out_total",
			Help: "Transactions the coordinators on this broker aborted because they outlived their timeout.",
		}),
	}
	end := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "sluice", Subsystem: "broker", Name: "txn_end_duration_seconds",
		Help:    "Time to end a transaction at its coordinator, from its PrepareCommit/PrepareAbort write to its CompleteCommit/CompleteAbort write, the markers to every partition and group included.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	})
	write := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "sluice", Subsystem: "broker", Name: "txn_state_write_duration_seconds",
		Help:    "Time to write one transaction-state record to the replicated __transaction_state partition, acks=all.",
		Buckets: prometheus.ExponentialBuckets(0.0002, 2, 16),
	})
	m.EndLatency, m.WriteLatency = end, write
	if reg != nil {
		reg.MustRegister(m.Commits, m.Aborts, m.TimedOut, end, write, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "txn_open",
			Help: "Transactions open (Ongoing) or ending (PrepareCommit, PrepareAbort) at the transaction coordinators on this broker.",
		}, func() float64 {
			n := 0
			for _, c := range s.Current() {
				n += c.Open()
			}
			return float64(n)
		}))
	}
	return m
}

// coordinatorFor returns the loaded coordinator of the transactional id's
// partition, or the error to answer: ErrNoTopic, or NotLeader naming the
// coordinator (which a client, or forwarding, follows).
func (s *Service) coordinatorFor(ctx context.Context, tenantID, transactionalID string) (*txn.Coordinator, cluster.Partition, error) {
	t, ok := s.deps.View().Topic(system.TenantID, system.TransactionStateTopic)
	if !ok || len(t.Partitions) == 0 {
		return nil, cluster.Partition{}, ErrNoTopic
	}
	pm := t.Partitions[txn.PartitionOf(tenantID, transactionalID, len(t.Partitions))]
	c, err := s.CoordinatorAt(ctx, t, pm)
	return c, pm, err
}

// CoordinatorAt returns the loaded coordinator of one transaction-state
// partition (t, pm: the view's), or NotLeader when this broker does not
// lead it. A coordinator is made for each leader epoch and loads the
// partition's log when first asked for (the broker's hosting loop asks
// for every partition it leads, so that a takeover finishes the ends a
// previous coordinator left and arms the timeouts without waiting for a
// client).
func (s *Service) CoordinatorAt(ctx context.Context, t *cluster.Topic, pm cluster.Partition) (*txn.Coordinator, error) {
	return s.deps.Host(ctx, t, pm, func(p runtime.Partition, epoch int32) *txn.Coordinator {
		var admit func(ctx context.Context, tenantID, transactionalID string) (func(), error)
		if s.deps.Admission != nil {
			admit = s.deps.Admission.AdmitTransactionalID
		}
		return txn.New(p, txn.Config{
			Partition: pm.Partition, LeaderEpoch: epoch,
			AllocateProducerID: s.deps.AllocateProducerID,
			Admit:              admit,
			Bounds:             s.bounds,
			Markers:            &markerWriter{s: s, current: func() bool { return p.Leads(epoch) }},
			DefaultTimeout:     min(time.Minute, s.cfg.MaxTransactionTimeout),
			MaxTimeout:         s.cfg.MaxTransactionTimeout,
			IdleTimeout:        s.cfg.TransactionalIDExpiration,
			Logger:             s.logger, Metrics: s.metrics,
		})
	})
}

// local returns the loaded coordinators of every transaction-state
// partition this broker leads; ErrNoTopic before the topic exists.
func (s *Service) local(ctx context.Context) ([]*txn.Coordinator, error) {
	return cluster.Led(s.deps.View(), s.cfg.BrokerID, system.TransactionStateTopic, ErrNoTopic, func(t *cluster.Topic, pm cluster.Partition) (*txn.Coordinator, error) {
		return s.CoordinatorAt(ctx, t, pm)
	})
}

// Current returns the transaction coordinators the runtime hosts whose
// leadership this broker still holds (loaded or not).
func (s *Service) Current() []*txn.Coordinator {
	if s.deps.Hosted == nil {
		return nil
	}
	return s.deps.Hosted()
}

// IDsByTenant counts the transactional ids of the coordinators this
// broker hosts (Current), per tenant: what the quota exchange reports.
func (s *Service) IDsByTenant() map[string]int {
	out := map[string]int{}
	for _, c := range s.Current() {
		for id, n := range c.IDsByTenant() {
			out[id] += n
		}
	}
	return out
}
