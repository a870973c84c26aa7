package broker

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/cluster"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/clock"
)

// watchLoop follows the control plane's assignment stream for one broker
// epoch, installing its snapshot and applying its deltas (followAssignments),
// and reconnects on errors until ctx ends or the epoch is fenced (the lease
// loop then registers again). A delta that does not apply on the view held
// ends the stream: the next one starts with a snapshot.
func (b *Broker) watchLoop(ctx context.Context, epoch int64) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		stream, err := b.cp.WatchAssignments(ctx, connect.NewRequest(&sluicev1.WatchAssignmentsRequest{BrokerId: b.cfg.ID, BrokerEpoch: epoch, AcceptDeltas: true}))
		if err == nil {
			err = b.followAssignments(stream, func() { backoff = 100 * time.Millisecond })
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
		clock.Sleep(ctx, backoff)
		backoff = min(2*backoff, 2*time.Second)
	}
}

// assignmentStream is the client side of WatchAssignments.
type assignmentStream interface {
	Receive() bool
	Msg() *sluicev1.WatchAssignmentsResponse
	Err() error
}

// errDeltaGap: a delta's base is not the version of the view held.
var errDeltaGap = errors.New("assignment delta does not apply on the view held; reconnecting for a snapshot")

// followAssignments applies the messages of one assignment stream until it
// ends (its error) or a delta does not apply (errDeltaGap): a delta applies
// only after this stream's snapshot, on the view of its base version.
// received is called on every message.
func (b *Broker) followAssignments(stream assignmentStream, received func()) error {
	snapshot := false
	for stream.Receive() {
		received()
		m := stream.Msg()
		if !m.GetDelta() {
			b.applyMetadata(toClusterMeta(m))
			snapshot = true
			continue
		}
		cur := b.meta.Load()
		if !snapshot || cur.Version != m.GetBaseVersion() {
			b.logger.Warn("assignment stream: delta gap", "held_version", cur.Version, "base_version", m.GetBaseVersion(), "first_message", !snapshot)
			return errDeltaGap
		}
		next, changed := cur.WithDelta(m)
		b.applyDelta(next, changed)
	}
	return stream.Err()
}

// toClusterMeta is the view of a snapshot.
func toClusterMeta(m *sluicev1.WatchAssignmentsResponse) *cluster.View {
	meta := cluster.EmptyView()
	meta.Version, meta.Loaded = m.GetMetadataVersion(), true
	meta.Brokers = cluster.NodesOf(m.GetBrokers())
	for _, pa := range m.GetPartitions() {
		t, ok := meta.ByID[pa.GetTopicId()]
		if !ok {
			t = cluster.NewTopic(pa)
			meta.AddTopic(t)
		}
		t.SetPartition(pa)
	}
	return meta
}

// applyMetadata installs a new cluster view from a snapshot and brings
// every local replica to the role it now has (replicas.Manager.Apply);
// the first one makes the broker ready (notReady).
func (b *Broker) applyMetadata(m *cluster.View) {
	b.meta.Store(m)
	ctx := b.runContext()
	if ctx == nil || ctx.Err() != nil {
		return
	}
	b.replicas.Apply(ctx, m)
	if !b.assigned.Swap(true) {
		b.healthChanged()
	}
}

// applyDelta installs m, the view a delta made of the one before, and
// brings the local replicas of the partitions it changed to their new
// role (replicas.Manager.ApplyDelta).
func (b *Broker) applyDelta(m *cluster.View, changed []cluster.PartKey) {
	b.meta.Store(m)
	ctx := b.runContext()
	if ctx == nil || ctx.Err() != nil {
		return
	}
	b.replicas.ApplyDelta(ctx, m, changed)
}
