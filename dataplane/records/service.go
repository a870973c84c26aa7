package records

import (
	"context"
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/meter"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/tenants"
)

// Quotas is the quota admission the record path asks (the broker's
// enforcer). Each method acts on the caller's tenant (from ctx) and does
// nothing for callers no quota binds; the errors are the refusals to
// answer (ResourceExhausted with the retry delay), passed through as they
// are.
type Quotas interface {
	// AdmitProduce decides a produce of cost batch bytes before anything
	// is appended, and charges it.
	AdmitProduce(ctx context.Context, cost int) error
	// RefundProduce gives back what AdmitProduce charged for a produce of
	// batches when its answer (duplicate, err) shows the log wrote none of
	// them: one batch, a duplicate or a producer-state refusal.
	RefundProduce(ctx context.Context, batches, cost int, duplicate bool, err error)
	// RefundUnwritten gives back cost bytes charged for a produce refused
	// before it reached the log.
	RefundUnwritten(ctx context.Context, cost int)
	// CheckFetch decides a fetch of at most maxBytes before it reads;
	// ChargeFetch charges the admitted fetch the bytes it answered.
	CheckFetch(ctx context.Context, maxBytes int) error
	ChargeFetch(ctx context.Context, n int)
	// CheckProducerID decides a request that will create a producer id;
	// ChargeProducerID charges the id created.
	CheckProducerID(ctx context.Context) error
	ChargeProducerID(ctx context.Context)
}

// Verifier asks the transaction coordinator of the tenant's
// transactional id to put the partition in the producer's current
// transaction (KIP-890's verification; with VerifyOnly, to check that it
// is in it) before the partition's leader appends the producer's first
// transactional batch of this epoch. h carries the producing client's
// credential, for a coordinator on another broker. It returns nil once
// the coordinator has the partition in the transaction, or the error to
// answer the produce with.
type Verifier func(ctx context.Context, h http.Header, v Verification) error

// Verification is what a Verifier is asked.
type Verification struct {
	TenantID, TransactionalID, TopicID string
	Partition                          int32
	ProducerID                         int64
	Epoch                              int16
	// VerifyOnly: check, do not add (ProduceManyRequest.VerifyOnly).
	VerifyOnly bool
}

// Deps are what the service needs of its broker.
type Deps struct {
	// BrokerID is this broker's id: the partitions whose leader it is are
	// served here.
	BrokerID int32
	// View is the broker's current cluster view; each request resolves
	// against the one it loads at its start.
	View func() *cluster.View
	// Replica is this broker's replica of a partition, nil when it has
	// none.
	Replica func(topicID string, partition int32) *partition.Replica
	// Quotas admits and charges the callers' tenants.
	Quotas Quotas
	// Usage counts the tenants' egress (fetched bytes) for metering.
	Usage *meter.Counters
	// UntilSuspended returns a context that ends as soon as the tenant is
	// suspended, with a cause that is a tenants.ErrPermissionDenied, so
	// that a long-poll fetch ends then rather than when its wait does;
	// stop releases it.
	UntilSuspended func(ctx context.Context, tenantID string) (_ context.Context, stop func())
	// VerifyTransaction verifies a transactional produce's partition with
	// the transaction coordinator.
	VerifyTransaction Verifier
	// AllocateProducerIDs reserves a block of count producer ids from
	// first for this broker (the control plane's AllocateProducerIds).
	AllocateProducerIDs func(ctx context.Context) (first int64, count int32, err error)
	// Registerer, when set, gets the record path's metrics.
	Registerer prometheus.Registerer
}

// Service is the record path. It is safe for concurrent use.
type Service struct {
	d       Deps
	metrics *metrics
	pids    producerIDs
}

// New returns the record service over d, registering its metrics on
// d.Registerer.
func New(d Deps) *Service {
	return &Service{d: d, metrics: newMetrics(d.Registerer)}
}

// NotLedHereError is the answer to a request for a partition this broker
// does not lead (or leads in the view but has not taken over yet), given
// once the request is resolved and checked and before anything of it is
// done: NotLeader names the leader the view knows. An adapter may send
// the request on to that leader once (it was not admitted here); a
// NotLeader a replica answers while it serves a request (it stepped down
// meanwhile) is never one. Its text and domain error are NotLeader's.
type NotLedHereError struct {
	NotLeader *partition.NotLeaderError
}

func (e *NotLedHereError) Error() string { return e.NotLeader.Error() }
func (e *NotLedHereError) Unwrap() error { return e.NotLeader }

// LeaderElsewhere returns the leader a NotLedHereError in err's chain
// names, when it is another broker than this one (a request an adapter
// may forward to it).
func LeaderElsewhere(err error) (leader int32, ok bool) {
	var e *NotLedHereError
	if !errors.As(err, &e) || e.NotLeader.Leader < 0 || e.NotLeader.Self {
		return -1, false
	}
	return e.NotLeader.Leader, true
}

// errNoPrincipal is a call without a tenant principal: the adapter's
// authentication did not run (a bug, answered as internal).
var errNoPrincipal = errors.New("no tenant principal in context")

// resolve finds the caller's topic partition in the cluster view.
func (s *Service) resolve(ctx context.Context, topic string, partition int32) (*cluster.Topic, cluster.Partition, tenants.Principal, error) {
	p, ok := tenants.PrincipalFrom(ctx)
	if !ok || p.TenantID == "" {
		return nil, cluster.Partition{}, p, errNoPrincipal
	}
	t, pm, err := s.d.View().Resolve(p.TenantID, topic, partition)
	return t, pm, p, err
}

// local returns the replica of pm if this broker leads it; otherwise the
// NotLedHereError.
func (s *Service) local(pm cluster.Partition, t *cluster.Topic) (*partition.Replica, error) {
	if pm.Leader == s.d.BrokerID {
		if p := s.d.Replica(t.ID, pm.Partition); p != nil {
			return p, nil
		}
	}
	nl, _ := s.d.View().NotLeader(s.d.BrokerID, pm).(*partition.NotLeaderError)
	return nil, &NotLedHereError{NotLeader: nl}
}
