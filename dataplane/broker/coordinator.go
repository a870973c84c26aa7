package broker

import (
	"context"
	"errors"
	"time"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/coordinator"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/dataplane/runtime"
	"github.com/sluicemq/sluice/dataplane/txn"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/tenants/system"
)

// The group and transaction coordinators are shards of one runtime
// (dataplane/runtime): one per partition of the internal topics that this
// broker leads and leader epoch, hosted by hostAt and kept by b.rt, whose
// timers and marker retries run in the runtime's goroutines. This file is
// the broker's side of that, for both kinds of coordinator: the one
// hosting loop (hostLoop), hosting a coordinator on this broker's replica
// (hostAt, which the group service reaches through groups.Deps.Host), and
// a coordinator's access to its partition (offsetsPartition). The groups'
// service is dataplane/groups (wired in groups.go), the transactions' in
// txn*.go.

// systemTenantID, offsetsTopic and txnStateTopic name the internal topics
// (tenants/system, their one home).
const (
	systemTenantID = system.TenantID
	offsetsTopic   = system.OffsetsTopic
	txnStateTopic  = system.TransactionStateTopic
)

// groupCoordinator and txnCoordinator are the coordinators the broker
// hosts.
type (
	groupCoordinator = coordinator.Coordinator
	txnCoordinator   = txn.Coordinator
)

// hostCheckInterval is how often hostLoop takes over the partitions of the
// internal topics this broker has come to lead and drops the coordinators
// of those it lost.
const hostCheckInterval = time.Second

// hostLoop hosts, every hostCheckInterval until ctx ends, a loaded
// coordinator on every partition of the internal topics this broker leads
// (so that a takeover resumes the ends a previous transaction coordinator
// left unfinished, and arms the timeouts, without waiting for a client),
// and drops (closes) those whose leadership moved.
func (b *Broker) hostLoop(ctx context.Context) {
	every(ctx, hostCheckInterval, func() {
		for _, topic := range []string{offsetsTopic, txnStateTopic} {
			t, ok := b.metadata().Topic(systemTenantID, topic)
			if !ok {
				continue
			}
			for _, pm := range t.Partitions {
				if pm.Leader != b.cfg.ID {
					continue
				}
				lctx, cancel := context.WithTimeout(ctx, hostLoadTimeout)
				var err error
				if topic == offsetsTopic {
					_, err = b.coordinatorAt(lctx, t, pm)
				} else {
					_, err = b.txns.CoordinatorAt(lctx, t, pm)
				}
				cancel()
				if err != nil {
					b.logger.Debug("coordinator not ready", "topic", topic, "partition", pm.Partition, "err", err) // the next tick
				}
			}
		}
		b.rt.Current()
	})
}

// hostLoadTimeout bounds one coordinator's load in hostLoop.
const hostLoadTimeout = 30 * time.Second

// hostAt returns the loaded coordinator of partition pm of internal topic
// t: the one hosted for pm's leader epoch on this broker's replica, else a
// new one from mk. It answers NotLeader when this broker does not lead the
// partition, and Unavailable while it is still taking it over.
func hostAt[C runtime.Hostable](ctx context.Context, b *Broker, t *cluster.Topic, pm cluster.Partition, mk func(p offsetsPartition, leaderEpoch int32) C) (C, error) {
	var none C
	if pm.Leader != b.cfg.ID {
		return none, b.notLeader(pm)
	}
	p := b.partition(t.ID, pm.Partition)
	if p == nil {
		return none, b.notLeader(pm)
	}
	op := offsetsPartition{b, p}
	c, err := runtime.Host(ctx, b.rt, runtime.PartitionKey{Topic: t.Name, Partition: pm.Partition}, pm.LeaderEpoch, runtime.Partition(op),
		func() C { return mk(op, pm.LeaderEpoch) })
	if err != nil {
		return none, b.takingOver(err)
	}
	return c, nil
}

// hostedOf returns the coordinators of type C the runtime keeps whose
// leadership this broker still holds.
func hostedOf[C runtime.Hostable](b *Broker) []C {
	var out []C
	for _, h := range b.rt.Shards() {
		if c, ok := h.(C); ok && h.Current() {
			out = append(out, c)
		}
	}
	return out
}

// coordinatorFor returns the loaded coordinator of the group's offsets
// partition (groups.Service.CoordinatorFor).
func (b *Broker) coordinatorFor(ctx context.Context, tenantID, group string) (*groupCoordinator, cluster.Partition, error) {
	return b.groups.CoordinatorFor(ctx, tenantID, group)
}

// coordinatorAt returns the loaded coordinator of one offsets partition,
// or NotLeader when this broker does not lead it
// (groups.Service.CoordinatorAt).
func (b *Broker) coordinatorAt(ctx context.Context, t *cluster.Topic, pm cluster.Partition) (*groupCoordinator, error) {
	return b.groups.CoordinatorAt(ctx, t, pm)
}

// hostGroupCoordinator is groups.Deps.Host: hostAt for group
// coordinators.
func (b *Broker) hostGroupCoordinator(ctx context.Context, t *cluster.Topic, pm cluster.Partition, mk func(p coordinator.Partition, leaderEpoch int32) *groupCoordinator) (*groupCoordinator, error) {
	return hostAt(ctx, b, t, pm, func(p offsetsPartition, epoch int32) *groupCoordinator { return mk(p, epoch) })
}

// takingOver turns "not the leader, broker N is" into Unavailable when N is
// this broker: the metadata already names it but its replica has not taken
// over yet. Retrying shortly succeeds; following the NotLeader would loop.
func (b *Broker) takingOver(err error) error {
	var nl *partition.NotLeaderError
	if errors.As(err, &nl) && nl.Leader == b.cfg.ID {
		return derr.New(derr.Unavailable, "this broker is taking over the partition; retry: %w", err)
	}
	return err
}

// offsetsPartition is a coordinator's access to its internal-topic
// partition's replica on this broker (runtime.Partition): a group
// coordinator's offsets partition, a transaction coordinator's
// transaction-state partition.
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
