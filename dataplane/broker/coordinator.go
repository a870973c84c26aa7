package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/coordinator"
	"github.com/sluicemq/sluice/dataplane/group"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/tenants/system"
)

// Consumer groups are coordinated by the leaders of the internal offsets
// topic's partitions (dataplane/coordinator holds the coordinator: its
// state, its records in the offsets partition and their rebuilding). This
// file is the broker's side: routing a group to the coordinator of its
// offsets partition, one per partition this broker leads and leader epoch,
// and the coordinator's access to that partition (offsetsPartition).

// systemTenantID, offsetsTopic and txnStateTopic name the internal topics
// (tenants/system, their one home).
const (
	systemTenantID = system.TenantID
	offsetsTopic   = system.OffsetsTopic
	txnStateTopic  = system.TransactionStateTopic
)

// errNoOffsetsTopic: the control plane creates the offsets topic once
// enough brokers are live.
var errNoOffsetsTopic = connect.NewError(connect.CodeUnavailable, errors.New("consumer groups are not available yet: the internal offsets topic does not exist (the control plane creates it once --offsets-topic-replication-factor brokers are live)"))

// groupCoordinator is the coordinator of one offsets partition this broker
// leads, with the replica it was made on.
type groupCoordinator struct {
	*coordinator.Coordinator
	p *partition.Replica
}

// coordinatorFor returns the loaded coordinator of the group's offsets
// partition, or the error to answer: errNoOffsetsTopic, or NotLeader
// naming the coordinator (which a client, or forwarding, follows).
func (b *Broker) coordinatorFor(ctx context.Context, tenantID, group string) (*groupCoordinator, partMeta, error) {
	meta := b.metadata()
	t, ok := meta.topic(systemTenantID, offsetsTopic)
	if !ok || len(t.partitions) == 0 {
		return nil, partMeta{}, errNoOffsetsTopic
	}
	pm := t.partitions[coordinator.PartitionOf(tenantID, group, len(t.partitions))]
	c, err := b.coordinatorAt(ctx, t, pm)
	return c, pm, err
}

// coordinatorAt returns the loaded coordinator of one offsets partition,
// or NotLeader when this broker does not lead it.
func (b *Broker) coordinatorAt(ctx context.Context, t *topicMeta, pm partMeta) (*groupCoordinator, error) {
	return hostedAt(ctx, b, b.coords, t, pm, func(p *partition.Replica, epoch int32) *groupCoordinator {
		return &groupCoordinator{p: p, Coordinator: coordinator.New(offsetsPartition{b, p}, coordinator.Config{
			Partition: pm.partition, LeaderEpoch: epoch,
			SessionTimeout: b.cfg.GroupSessionTimeout, HeartbeatInterval: b.cfg.GroupHeartbeatInterval,
			Logger: b.logger, Metrics: b.metrics.coordinator(),
			Admit: b.admitGroup,
		})}
	})
}

// takingOver turns "not the leader, broker N is" into Unavailable when N is
// this broker: the metadata already names it but its replica has not taken
// over yet. Retrying shortly succeeds; following the NotLeader would loop.
func (b *Broker) takingOver(err error) error {
	var nl *partition.NotLeaderError
	if errors.As(err, &nl) && nl.Leader == b.cfg.ID {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("this broker is taking over the partition; retry: %w", err))
	}
	return err
}

// localCoordinators are the loaded coordinators of every offsets partition
// this broker leads.
func (b *Broker) localCoordinators(ctx context.Context) ([]*groupCoordinator, error) {
	return localHosted(ctx, b, offsetsTopic, errNoOffsetsTopic, b.coordinatorAt)
}

// expireGroups expires group members on every coordinator of this broker;
// coordinators of leaderships this broker lost are dropped.
func (b *Broker) expireGroups() {
	now := time.Now()
	for _, c := range currentHosted(b, b.coords) {
		c.Expire(now)
	}
}

// groupTopics is a tenant's topics' partition counts in this view, for the
// group state machine.
func (m *clusterMeta) groupTopics(tenantID string) group.Topics {
	return func(name string) (int32, bool) {
		t, ok := m.topic(tenantID, name)
		if !ok {
			return 0, false
		}
		return int32(len(t.partitions)), true
	}
}

// groupError maps the coordinator's and the group state machine's
// refusals to Connect errors with a GroupError detail; other errors pass
// unchanged.
func groupError(err error) error {
	code := connect.CodeFailedPrecondition
	var reason sluicev1.GroupError_Reason
	switch {
	case err == nil:
		return nil
	case errors.Is(err, group.ErrInvalid):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, group.ErrUnknownMember):
		code, reason = connect.CodeNotFound, sluicev1.GroupError_REASON_UNKNOWN_MEMBER
	case errors.Is(err, group.ErrFencedMemberEpoch):
		reason = sluicev1.GroupError_REASON_FENCED_MEMBER_EPOCH
	case errors.Is(err, group.ErrFencedInstanceID):
		reason = sluicev1.GroupError_REASON_FENCED_INSTANCE_ID
	case errors.Is(err, group.ErrNotOwned):
		reason = sluicev1.GroupError_REASON_NOT_OWNED
	case errors.Is(err, coordinator.ErrGroupActive):
		reason = sluicev1.GroupError_REASON_GROUP_ACTIVE
	default:
		return err
	}
	ce := connect.NewError(code, err)
	if d, derr := connect.NewErrorDetail(&sluicev1.GroupError{Reason: reason}); derr == nil {
		ce.AddDetail(d)
	}
	return ce
}

// offsetsPartition is a coordinator's access to its offsets partition
// replica on this broker (coordinator.Partition), and a transaction
// coordinator's to its transaction-state partition (txn.Partition, the
// same contract).
type offsetsPartition struct {
	b *Broker
	p *partition.Replica
}

func (o offsetsPartition) LogStartOffset() int64 { return o.p.Log().LogStartOffset() }
func (o offsetsPartition) LEO() int64            { return o.p.Log().LEO() }

func (o offsetsPartition) Read(offset int64, maxBytes int) ([]byte, error) {
	return o.p.Log().Read(offset, maxBytes)
}

func (o offsetsPartition) CheckLeader() error {
	_, err := o.p.ReaderHW()
	return err
}

// AppendAcksAll produces batch with acks=all, fenced at epoch (as a
// client's leader epoch).
func (o offsetsPartition) AppendAcksAll(ctx context.Context, epoch int32, batch log.ValidBatch) (int64, error) {
	res, err := o.p.Produce(ctx, []log.ValidBatch{batch}, sluicev1.Acks_ACKS_ALL, 30*time.Second, &epoch)
	if err != nil {
		return 0, o.b.takingOver(err)
	}
	return res.Base, nil
}

func (o offsetsPartition) Leads(epoch int32) bool { return o.p.LeadsAt(epoch) }
