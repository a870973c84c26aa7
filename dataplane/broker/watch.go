package broker

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/sluicemq/sluice/dataplane/replica"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// watchLoop follows the control plane's assignment stream for one broker
// epoch, installing every snapshot, and reconnects on errors until ctx
// ends or the epoch is fenced (the lease loop then registers again).
func (b *Broker) watchLoop(ctx context.Context, epoch int64) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		stream, err := b.cp.WatchAssignments(ctx, connect.NewRequest(&sluicev1.WatchAssignmentsRequest{BrokerId: b.cfg.ID, BrokerEpoch: epoch}))
		if err == nil {
			for stream.Receive() {
				backoff = 100 * time.Millisecond
				b.applyMetadata(toClusterMeta(stream.Msg()))
			}
			err = stream.Err()
			_ = stream.Close()
		}
		if ctx.Err() != nil {
			return
		}
		if connect.CodeOf(err) == connect.CodeFailedPrecondition {
			b.logger.Warn("assignment stream: broker epoch fenced", "broker_epoch", epoch, "err", err)
			return
		}
		if err != nil {
			b.logger.Warn("assignment stream", "err", err)
		}
		sleep(ctx, backoff)
		backoff = min(2*backoff, 2*time.Second)
	}
}

func toClusterMeta(m *sluicev1.WatchAssignmentsResponse) *clusterMeta {
	meta := emptyMeta()
	meta.version, meta.loaded = m.GetMetadataVersion(), true
	for _, br := range m.GetBrokers() {
		meta.brokers[br.GetBrokerId()] = brokerMeta{id: br.GetBrokerId(), address: br.GetAddress(), rack: br.GetRack()}
	}
	for _, pa := range m.GetPartitions() {
		t, ok := meta.byID[pa.GetTopicId()]
		if !ok {
			c := pa.GetConfig()
			t = &topicMeta{
				tenantID: pa.GetTenantId(), id: pa.GetTopicId(), name: pa.GetTopicName(),
				config: topicConfig{
					minISR: c.GetMinInsyncReplicas(), maxMessageBytes: c.GetMaxMessageBytes(),
					retentionMs: c.GetRetentionMs(), retentionBytes: c.GetRetentionBytes(),
					localRetentionMs: c.GetLocalRetentionMs(), localRetentionBytes: c.GetLocalRetentionBytes(),
					unclean: c.GetUncleanLeaderElectionEnable(),
				},
			}
			meta.addTopic(t)
		}
		pm := toPartMeta(pa)
		for int(pm.partition) >= len(t.partitions) {
			t.partitions = append(t.partitions, partMeta{partition: int32(len(t.partitions)), leader: -1})
		}
		t.partitions[pm.partition] = pm
	}
	return meta
}

func toPartMeta(pa *sluicev1.PartitionAssignment) partMeta {
	return partMeta{
		partition: pa.GetPartition(), replicas: slices.Clone(pa.GetReplicas()), leader: pa.GetLeader(),
		leaderEpoch: pa.GetLeaderEpoch(), isr: slices.Clone(pa.GetIsr()), partitionEpoch: pa.GetPartitionEpoch(),
	}
}

// isrLoop asks the controller to shrink or expand the ISR of partitions this
// broker leads, every half second.
func (b *Broker) isrLoop(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		parts := b.partitions()
		for _, p := range parts {
			p.maybeAlterISR(ctx)
		}
	}
}

// maybeAlterISR sends the leader's pending ISR proposal, or a new one, to
// the controller, and applies the answer. A proposal whose outcome is
// unknown (network error) stays pending and is resent next round: until the
// answer is known the leader keeps counting added replicas for the HW.
func (p *partition) maybeAlterISR(ctx context.Context) {
	p.mu.Lock()
	if p.role != roleLeader || p.lead == nil {
		p.mu.Unlock()
		return
	}
	prop, ok := p.lead.Pending()
	if !ok {
		prop, ok = p.lead.Tick(time.Now())
	}
	if !ok {
		p.mu.Unlock()
		return
	}
	lead := p.lead
	req := &sluicev1.AlterPartitionRequest{
		BrokerId: p.b.cfg.ID, BrokerEpoch: p.b.brokerEpoch.Load(), TopicId: p.topicID, Partition: p.id,
		LeaderEpoch: prop.LeaderEpoch, PartitionEpoch: prop.PartitionEpoch, NewIsr: prop.ISR,
	}
	for _, be := range prop.BrokerEpochs {
		req.AddedBrokerEpochs = append(req.AddedBrokerEpochs, &sluicev1.BrokerEpoch{BrokerId: be.Broker, BrokerEpoch: be.Epoch})
	}
	p.mu.Unlock()

	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	res, err := p.b.cp.AlterPartition(callCtx, connect.NewRequest(req))
	cancel()
	var current *sluicev1.PartitionAssignment
	if err == nil {
		current = res.Msg.GetPartition()
	} else if ctx.Err() == nil {
		p.b.logger.Warn("alter ISR", "topic", p.topicID, "partition", p.id, "proposal", prop.String(), "err", err)
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		// A refusal about the partition carries its current state.
		for _, d := range ce.Details() {
			if v, derr := d.Value(); derr == nil {
				if pa, ok := v.(*sluicev1.PartitionAssignment); ok {
					current = pa
				}
			}
		}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lead != lead || p.role != roleLeader {
		return // leadership changed meanwhile; the assignment stream rules
	}
	// The controller checks the partition epoch before anything else, so
	// only "stale partition epoch" can hide an applied proposal; every
	// other refusal means it was not applied.
	switch {
	case err == nil:
	case connect.CodeOf(err) == connect.CodeFailedPrecondition && strings.Contains(err.Error(), "stale partition epoch"):
		lead.ProposalRejected(prop.ID, replica.ErrStalePartitionEpoch)
	case connect.CodeOf(err) == connect.CodeFailedPrecondition || connect.CodeOf(err) == connect.CodeInvalidArgument:
		lead.ProposalRejected(prop.ID, err) // definitive: propose afresh later
	default:
		return // unknown outcome: resend Pending next round
	}
	if current == nil {
		return
	}
	pm := toPartMeta(current)
	if pm.leaderEpoch > lead.LeaderEpoch() {
		// Deposed: stop acknowledging now rather than when the assignment
		// stream catches up.
		_ = lead.Resign(pm.leaderEpoch)
		p.settleAcksLocked()
		p.notifyLocked()
		return
	}
	if pm.leader != p.b.cfg.ID || pm.leaderEpoch != lead.LeaderEpoch() || pm.partitionEpoch <= lead.PartitionEpoch() {
		return
	}
	cerr := lead.ISRChanged(pm.partitionEpoch, pm.isr)
	p.settleAcksLocked()
	if cerr != nil && !errors.Is(cerr, replica.ErrStalePartitionEpoch) {
		p.b.logger.Warn("apply ISR", "topic", p.topicID, "partition", p.id, "isr", pm.isr, "err", cerr)
		return
	}
	if err == nil {
		if prop.Kind == replica.Expand {
			p.b.metrics.isrExpands.Inc()
		} else {
			p.b.metrics.isrShrinks.Inc()
		}
		p.b.logger.Info("ISR changed", "topic", p.topicID, "partition", p.id, "change", prop.String(), "partition_epoch", pm.partitionEpoch, "hw", lead.HW())
	}
	p.notifyLocked()
}
