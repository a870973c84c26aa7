package broker

import (
	"context"
	"slices"
	"time"

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
