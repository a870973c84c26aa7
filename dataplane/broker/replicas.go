package broker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"

	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// The broker's side of its partition replicas (dataplane/partition): which
// ones it hosts (applyMetadata and applyDelta, from the control plane's
// assignment snapshots and deltas),
// opening them, deleting the data of deleted topics, the ReplicaService
// that routes a follower's fetch to its replica, and the loops over every
// replica (HW checkpoints and producer-state snapshots, retention).

// applyMetadata installs a new cluster view from a snapshot and brings every
// local replica to the role it now has: leader, follower, or none (closed).
func (b *Broker) applyMetadata(m *clusterMeta) {
	b.meta.Store(m)
	b.mu.Lock()
	ctx := b.runCtx
	b.mu.Unlock()
	if ctx == nil || ctx.Err() != nil {
		return
	}
	want := map[partKey]bool{}
	for _, t := range m.byID {
		for _, pm := range t.partitions {
			if !pm.hasReplica(b.cfg.ID) {
				continue
			}
			want[partKey{t.id, pm.partition}] = true
			b.updateReplica(ctx, t, pm)
		}
	}
	if !b.assigned.Swap(true) {
		b.healthChanged()
	}
	b.mu.Lock()
	var drop []*partition.Replica
	for k, p := range b.parts {
		if !want[k] {
			drop = append(drop, p)
			delete(b.parts, k)
		}
	}
	sweep := !b.swept
	b.swept = true
	b.mu.Unlock()
	if sweep {
		b.deleteStrayPartitions(ctx, m)
	}
	b.dropReplicas(ctx, m, drop)
}

// applyDelta installs m, the view a delta made of the one before, and
// brings the local replicas of the partitions it changed — and only
// those — to their new role: the cost follows the delta, not the
// partitions hosted. A delta comes after a snapshot of the same stream
// (applyMetadata), so the first view and its sweep of strays are done.
func (b *Broker) applyDelta(m *clusterMeta, changed []partKey) {
	b.meta.Store(m)
	b.mu.Lock()
	ctx := b.runCtx
	b.mu.Unlock()
	if ctx == nil || ctx.Err() != nil {
		return
	}
	var drop []*partition.Replica
	for _, k := range changed {
		if t, ok := m.byID[k.topicID]; ok && int(k.partition) < len(t.partitions) && t.partitions[k.partition].hasReplica(b.cfg.ID) {
			b.updateReplica(ctx, t, t.partitions[k.partition])
			continue
		}
		b.mu.Lock()
		if p, ok := b.parts[k]; ok {
			drop = append(drop, p)
			delete(b.parts, k)
		}
		b.mu.Unlock()
	}
	b.dropReplicas(ctx, m, drop)
}

// updateReplica opens the local replica of partition pm of topic t if
// need be and applies its assignment and the topic's config.
func (b *Broker) updateReplica(ctx context.Context, t *topicMeta, pm partMeta) {
	p, err := b.openPartition(t, pm)
	if err != nil {
		b.logger.Error("open partition", "topic", t.id, "partition", pm.partition, "err", err)
		return
	}
	p.Update(ctx, pm.assignment(), t.config.replica())
}

// dropReplicas stops and closes replicas this broker no longer hosts in m
// (already taken out of b.parts), deleting the data of those whose topic
// m no longer has.
func (b *Broker) dropReplicas(ctx context.Context, m *clusterMeta, drop []*partition.Replica) {
	for _, p := range drop {
		p.Stop()
		if err := p.Log().Close(); err != nil {
			b.logger.Warn("close partition log", "topic", p.TopicID(), "partition", p.Partition(), "err", err)
		}
		if _, exists := m.byID[p.TopicID()]; exists {
			// The replica moved to other brokers: keep the data until
			// reassignment (later work) says it may go.
			continue
		}
		// The topic was deleted (topic ids are never reused): its data goes.
		if err := os.RemoveAll(p.Dir()); err != nil {
			b.logger.Warn("delete partition data", "topic", p.TopicID(), "partition", p.Partition(), "err", err)
			continue
		}
		b.logger.Info("deleted partition data of a deleted topic", "topic", p.TopicID(), "partition", p.Partition())
		if p.Tiered() {
			go b.deleteRemotePartition(ctx, p.TenantID(), p.TopicID(), p.Partition())
		}
	}
}

// deleteStrayPartitions deletes the data of partitions whose topic was
// deleted while this broker was down (or before it first heard its
// assignments): a running broker deletes a deleted topic's data when the
// topic leaves its assignments, but one that was not running never sees
// that happen. m is the first full view this process applied; a partition
// directory whose topic id it does not name belongs to a deleted topic
// (topic ids are never reused). The directories are listed now, before any
// later view can open a partition, and removed in the background.
func (b *Broker) deleteStrayPartitions(ctx context.Context, m *clusterMeta) {
	type stray struct {
		dir, tenantID, topicID string
		partition              int32
	}
	var strays []stray
	tenants, err := os.ReadDir(b.cfg.DataDir)
	if err != nil {
		b.logger.Warn("list the data dir for partitions of deleted topics", "dir", b.cfg.DataDir, "err", err)
		return
	}
	for _, td := range tenants {
		if !td.IsDir() || !isUUID(td.Name()) {
			continue // .lock, .tier-cache, checkpoints
		}
		parts, err := os.ReadDir(filepath.Join(b.cfg.DataDir, td.Name()))
		if err != nil {
			b.logger.Warn("list the data dir for partitions of deleted topics", "dir", td.Name(), "err", err)
			continue
		}
		for _, pd := range parts {
			topicID, partition, ok := parsePartitionDir(pd.Name())
			if !pd.IsDir() || !ok {
				continue
			}
			if _, exists := m.byID[topicID]; exists {
				continue
			}
			strays = append(strays, stray{filepath.Join(b.cfg.DataDir, td.Name(), pd.Name()), td.Name(), topicID, partition})
		}
	}
	if len(strays) == 0 {
		return
	}
	go func() {
		for _, s := range strays {
			if err := os.RemoveAll(s.dir); err != nil {
				b.logger.Warn("delete partition data of a deleted topic", "topic", s.topicID, "partition", s.partition, "err", err)
				continue
			}
			b.logger.Info("deleted partition data of a topic deleted while the broker was down", "topic", s.topicID, "partition", s.partition)
			if b.tier != nil && s.tenantID != systemTenantID {
				b.deleteRemotePartition(ctx, s.tenantID, s.topicID, s.partition)
			}
		}
	}()
}

// parsePartitionDir splits a partition directory name, "<topic id>-<n>".
func parsePartitionDir(name string) (topicID string, partition int32, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 || !isUUID(name[:i]) {
		return "", 0, false
	}
	n, err := strconv.ParseInt(name[i+1:], 10, 32)
	if err != nil || n < 0 {
		return "", 0, false
	}
	return name[:i], int32(n), true
}

// isUUID reports whether s is a UUID in its canonical text form.
func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return len(s) == 36 && err == nil
}

// openPartition returns the local replica of partition pm of topic t,
// opening it on first use.
func (b *Broker) openPartition(t *topicMeta, pm partMeta) (*partition.Replica, error) {
	k := partKey{t.id, pm.partition}
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.parts[k]; ok {
		return p, nil
	}
	p, err := partition.Open(b.host, partition.Spec{
		TenantID: t.tenantID, TopicID: t.id, Partition: pm.partition,
		Dir:    b.partitionDir(t.tenantID, t.id, pm.partition),
		Config: t.config.replica(),
		Tiered: b.tier != nil && t.tenantID != systemTenantID,
	})
	if err != nil {
		return nil, err
	}
	b.parts[k] = p
	return p, nil
}

// replicaService serves followers' fetches on the leader: a follower
// broker's fetch session (FetchReplicas), and the per-partition fetch of
// followers that predate sessions (FetchReplica).
type replicaService struct{ b *Broker }

func (s *replicaService) FetchReplicas(ctx context.Context, req *connect.Request[sluicev1.FetchReplicasRequest]) (*connect.Response[sluicev1.FetchReplicasResponse], error) {
	res, err := s.b.sessions.Fetch(ctx, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

func (s *replicaService) FetchReplica(ctx context.Context, req *connect.Request[sluicev1.FetchReplicaRequest]) (*connect.Response[sluicev1.FetchReplicaResponse], error) {
	m := req.Msg
	p := s.b.partition(m.GetTopicId(), m.GetPartition())
	if p == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("partition %s/%d is not on broker %d", m.GetTopicId(), m.GetPartition(), s.b.cfg.ID))
	}
	res, err := p.FetchReplica(ctx, m)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

// hwCheckpointLoop checkpoints every partition's HW, and snapshots its
// producer state when due, every interval until ctx ends;
// closePartitions writes a last one.
func (b *Broker) hwCheckpointLoop(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() {
		for _, p := range b.partitions() {
			if err := p.CheckpointHW(); err != nil && ctx.Err() == nil {
				b.logger.Warn("checkpoint high watermark", "topic", p.TopicID(), "partition", p.Partition(), "err", err)
			}
			if err := p.SnapshotProducers(time.Now(), false); err != nil && ctx.Err() == nil {
				b.logger.Warn("snapshot producer state", "topic", p.TopicID(), "partition", p.Partition(), "err", err)
			}
		}
	})
}

// retentionLoop applies retention to every partition every interval.
func (b *Broker) retentionLoop(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() {
		for _, p := range b.partitions() {
			n, err := p.ApplyRetention()
			switch {
			case err != nil && ctx.Err() == nil:
				b.logger.Warn("apply retention", "topic", p.TopicID(), "partition", p.Partition(), "err", err)
				if ferr := p.Log().Failed(); ferr != nil {
					b.failStop(p.TopicID(), p.Partition(), ferr)
					return
				}
			case n > 0:
				b.logger.Info("retention deleted segments", "topic", p.TopicID(), "partition", p.Partition(), "segments", n, "log_start_offset", p.Log().LogStartOffset())
			}
		}
	})
}

// every calls fn every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
