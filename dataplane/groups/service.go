package groups

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/coordinator"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/group"
	"github.com/sluicemq/sluice/dataplane/runtime"
	"github.com/sluicemq/sluice/tenants/system"
)

// Config configures the group service of one broker.
type Config struct {
	// BrokerID is this broker's id: it coordinates the groups of the
	// offsets partitions it leads.
	BrokerID int32
	// SessionTimeout and HeartbeatInterval are every group's
	// (coordinator.Config).
	SessionTimeout, HeartbeatInterval time.Duration
	// InitialRebalanceDelay is every classic group's
	// (coordinator.Config).
	InitialRebalanceDelay time.Duration
	// LagMetrics turns on the group lag metrics (ComputeLag, LagReport,
	// the sluice_group_lag_* gauges).
	LagMetrics bool
	// Logger: nil discards.
	Logger *slog.Logger
}

// Deps are what the service reaches outside itself; the broker wires
// them. Every func and interface may be called concurrently.
type Deps struct {
	// View is the broker's current metadata.
	View func() *cluster.View
	// Host returns the loaded group coordinator of partition pm of the
	// offsets topic t, hosted by the broker's coordinator runtime on its
	// replica of pm (the one kept for pm's leader epoch, else a new one
	// from mk, loaded): a *derr.NotLeaderError when this broker does not
	// lead pm, an Unavailable error while it is still taking pm over.
	Host func(ctx context.Context, t *cluster.Topic, pm cluster.Partition, mk func(p coordinator.Partition, leaderEpoch int32) *coordinator.Coordinator) (*coordinator.Coordinator, error)
	// Admission decides the creation of groups (max_groups); nil admits
	// every group.
	Admission Admission
	// Leaders reads partitions' offsets and records at their leaders
	// (the record service, here or at another broker).
	Leaders Leaders
	// Peers are the other brokers' group services.
	Peers Peers
	// VerifyTransactionGroup adds the group to the producer's current
	// transaction at its transaction coordinator (Kafka's AddOffsetsToTxn,
	// as a TxnCommitOffsets implies it; with verifyOnly, checks that the
	// client added it: TxnCommitRequest.VerifyOnly), on cred's behalf; its
	// error is the call's answer.
	VerifyTransactionGroup func(ctx context.Context, cred Credentials, tenantID, transactionalID, group string, producerID int64, epoch int16, verifyOnly bool) error
	// Registerer registers the service's metrics (the coordinators' and
	// the lag gauges); nil registers nothing.
	Registerer prometheus.Registerer
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Admission is the quota admission of new groups.
type Admission interface {
	// AdmitGroup decides a call that would create a group (the
	// coordinator's Config.Admit).
	AdmitGroup(ctx context.Context, tenantID, group string) (release func(), err error)
}

// Service is the consumer groups' service of one broker: membership
// (KIP-848 heartbeats), committed offsets (also inside transactions,
// KIP-447), the groups' administration and their lag, over the group
// coordinators of the offsets partitions this broker leads. Its methods
// take plain requests and answer plain results and domain errors
// (dataplane/derr); a call for a group another broker coordinates is
// refused with a *NotCoordinatorError, which a front door routes by.
// Every method may be called concurrently.
type Service struct {
	cfg     Config
	deps    Deps
	logger  *slog.Logger
	metrics *coordinator.Metrics
	lag     *lagCollector // nil when the lag metrics are off
}

// New returns the service and registers its metrics on deps.Registerer.
func New(cfg Config, deps Deps) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	s := &Service{cfg: cfg, deps: deps, logger: cfg.Logger}
	if deps.Registerer != nil {
		s.metrics = newCoordinatorMetrics(deps.Registerer)
	}
	if cfg.LagMetrics {
		s.lag = &lagCollector{s: s}
		if deps.Registerer != nil {
			deps.Registerer.MustRegister(s.lag)
		}
	}
	return s
}

// ErrNoOffsetsTopic refuses every group call before the offsets topic
// exists (CoordinatorNotAvailable): the control plane creates it once
// enough brokers are live.
var ErrNoOffsetsTopic = derr.New(derr.CoordinatorNotAvailable, "consumer groups are not available yet: the internal offsets topic does not exist (the control plane creates it once --offsets-topic-replication-factor brokers are live)")

// NotCoordinatorError refuses a call for a group this broker does not
// coordinate: the leader of the group's offsets partition is another
// broker (or none, or this one before it has taken the partition over).
// Err is the answer (Leader, or Unavailable while this broker takes over);
// it is not a domain error itself, so a protocol answers Err as it
// answers any (the Connect API: NotLeader with the coordinator's
// address), while a front door that routes (Connect's forwarding) or
// answers NOT_COORDINATOR (Kafka's) tells it apart from a NotLeader of a
// data partition a call met on its way.
type NotCoordinatorError struct {
	// Leader is the offsets partition's leader hint.
	Leader *derr.NotLeaderError
	Err    error
}

func (e *NotCoordinatorError) Error() string { return e.Err.Error() }
func (e *NotCoordinatorError) Unwrap() error { return e.Err }

// MaxGroupName bounds group ids (Kafka has none; 255 is plenty).
const MaxGroupName = 255

// ValidGroup checks a group id: InvalidRequest naming what is wrong.
func ValidGroup(group string) error {
	if group == "" {
		return derr.New(derr.InvalidRequest, "group: must not be empty")
	}
	if len(group) > MaxGroupName {
		return derr.New(derr.InvalidRequest, "group: at most %d bytes; got %d", MaxGroupName, len(group))
	}
	for i, r := range group {
		if !unicode.IsPrint(r) || r == unicode.ReplacementChar {
			return derr.New(derr.InvalidRequest, "group: character %q at byte %d is not printable", r, i)
		}
	}
	return nil
}

// offsetsTopic is the offsets topic in view m, with at least one
// partition.
func offsetsTopic(m *cluster.View) (*cluster.Topic, bool) {
	t, ok := m.Topic(system.TenantID, system.OffsetsTopic)
	return t, ok && len(t.Partitions) > 0
}

// CoordinatorFor returns the loaded coordinator of the group's offsets
// partition with that partition, or the error to answer:
// CoordinatorNotAvailable before the offsets topic exists, a
// *derr.NotLeaderError naming the coordinator's broker, Unavailable while
// this broker takes the partition over.
func (s *Service) CoordinatorFor(ctx context.Context, tenantID, groupID string) (*coordinator.Coordinator, cluster.Partition, error) {
	t, ok := offsetsTopic(s.deps.View())
	if !ok {
		return nil, cluster.Partition{}, ErrNoOffsetsTopic
	}
	pm := t.Partitions[coordinator.PartitionOf(tenantID, groupID, len(t.Partitions))]
	c, err := s.CoordinatorAt(ctx, t, pm)
	return c, pm, err
}

// CoordinatorAt returns the loaded coordinator of one offsets partition,
// or a *derr.NotLeaderError when this broker does not lead it.
func (s *Service) CoordinatorAt(ctx context.Context, t *cluster.Topic, pm cluster.Partition) (*coordinator.Coordinator, error) {
	return s.deps.Host(ctx, t, pm, func(p coordinator.Partition, epoch int32) *coordinator.Coordinator {
		cfg := coordinator.Config{
			Partition: pm.Partition, LeaderEpoch: epoch,
			SessionTimeout: s.cfg.SessionTimeout, HeartbeatInterval: s.cfg.HeartbeatInterval,
			InitialRebalanceDelay: s.cfg.InitialRebalanceDelay,
			Logger:                s.logger, Metrics: s.metrics,
		}
		if s.deps.Admission != nil {
			cfg.Admit = s.deps.Admission.AdmitGroup
		}
		return coordinator.New(p, cfg)
	})
}

// call resolves the coordinator of a group call: the group id checked,
// then its coordinator here, or a *NotCoordinatorError.
func (s *Service) call(ctx context.Context, tenantID, groupID string) (*coordinator.Coordinator, error) {
	if err := ValidGroup(groupID); err != nil {
		return nil, err
	}
	c, _, err := s.CoordinatorFor(ctx, tenantID, groupID)
	var nl *derr.NotLeaderError
	if errors.As(err, &nl) {
		return nil, &NotCoordinatorError{Leader: nl, Err: err}
	}
	return c, err
}

// localCoordinators are the loaded coordinators of every offsets partition
// this broker leads.
func (s *Service) localCoordinators(ctx context.Context) ([]*coordinator.Coordinator, error) {
	return cluster.Led(s.deps.View(), s.cfg.BrokerID, system.OffsetsTopic, ErrNoOffsetsTopic, func(t *cluster.Topic, pm cluster.Partition) (*coordinator.Coordinator, error) {
		return s.CoordinatorAt(ctx, t, pm)
	})
}

// topicsOf is a tenant's topics' partition counts in view m, for the
// group state machine.
func topicsOf(m *cluster.View, tenantID string) group.Topics {
	return func(name string) (int32, bool) {
		t, ok := m.Topic(tenantID, name)
		if !ok {
			return 0, false
		}
		return int32(len(t.Partitions)), true
	}
}

// groupError maps the coordinator's and the group state machine's
// refusals to domain errors with their Group reason (the GroupError
// detail of the Connect API); other errors pass unchanged.
func groupError(err error) error {
	var kind derr.Kind
	var reason derr.GroupReason
	switch {
	case err == nil:
		return nil
	case errors.Is(err, group.ErrInvalid):
		return derr.Wrap(derr.InvalidRequest, err)
	case errors.Is(err, group.ErrUnknownMember):
		kind, reason = derr.UnknownMemberID, derr.GroupReasonUnknownMember
	case errors.Is(err, group.ErrFencedMemberEpoch):
		kind, reason = derr.FencedMemberEpoch, derr.GroupReasonFencedMemberEpoch
	case errors.Is(err, group.ErrFencedInstanceID):
		kind, reason = derr.FencedInstanceID, derr.GroupReasonFencedInstanceID
	case errors.Is(err, group.ErrNotOwned):
		// Kafka has no code for it (its members commit what they
		// consumed); the reason tells it apart.
		kind, reason = derr.FailedPrecondition, derr.GroupReasonNotOwned
	case errors.Is(err, coordinator.ErrGroupActive):
		kind, reason = derr.NonEmptyGroup, derr.GroupReasonGroupActive
	case errors.Is(err, runtime.ErrNotCoordinator):
		// The coordinator closed under a waiting call (its partition
		// moved): find the new one.
		return derr.Wrap(derr.NotCoordinator, err)
	default:
		return err
	}
	return &derr.Error{Kind: kind, Err: err, Group: reason}
}

// offsetsError maps the group coordinator's refusals of offset writes and
// fetches: a transaction's pending offsets (UnstableOffsetCommit: retry
// once it ends), a fenced producer (ProducerFenced with its Txn reason), a
// fenced transaction coordinator (TransactionCoordinatorFenced); anything
// else as groupError does.
func offsetsError(err error) error {
	switch {
	case errors.Is(err, coordinator.ErrUnstableOffset):
		return derr.Wrap(derr.UnstableOffsetCommit, err)
	case errors.Is(err, coordinator.ErrProducerFenced):
		return &derr.Error{Kind: derr.ProducerFenced, Err: err, Txn: derr.TxnReasonProducerFenced}
	case errors.Is(err, coordinator.ErrCoordinatorFenced):
		return derr.Wrap(derr.TransactionCoordinatorFenced, err)
	}
	return groupError(err)
}

// groupNotFound answers a call about a group its coordinator does not
// know.
func groupNotFound(groupID string) error {
	return derr.New(derr.GroupIDNotFound, "group %q not found", groupID)
}

// groupActive refuses a call that needs the group without members.
func groupActive(groupID, advice string) error {
	return groupError(fmt.Errorf("group %q %w: %s", groupID, coordinator.ErrGroupActive, advice))
}
