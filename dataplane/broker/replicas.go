package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/dataplane/partition/hwcheckpoint"
)

// The broker's side of its partition replicas (dataplane/partition): which
// ones it hosts (applyMetadata and applyDelta, from the control plane's
// assignment snapshots and deltas),
// opening them, deleting the data of deleted topics, the ReplicaService
// that routes a follower's fetch to its replica, and the loops over every
// replica (HW checkpoints and producer-state snapshots, retention).

// applyMetadata installs a new cluster view from a snapshot and brings every
// local replica to the role it now has: leader, follower, or none (closed).
func (b *Broker) applyMetadata(m *cluster.View) {
	b.meta.Store(m)
	b.mu.Lock()
	ctx := b.runCtx
	b.mu.Unlock()
	if ctx == nil || ctx.Err() != nil {
		return
	}
	want := map[cluster.PartKey]bool{}
	var us []replicaUpdate
	for _, t := range m.ByID {
		for _, pm := range t.Partitions {
			if !pm.HasReplica(b.cfg.ID) {
				continue
			}
			want[cluster.PartKey{TopicID: t.ID, Partition: pm.Partition}] = true
			us = append(us, replicaUpdate{t, pm})
		}
	}
	b.updateReplicas(ctx, us)
	if !b.assigned.Swap(true) {
		b.healthChanged()
	}
	b.mu.Lock()
	var drop []*partition.Replica
	for k, p := range b.parts {
		if !want[k] {
			drop = append(drop, p)
			b.closeLocked(m, k, p)
		}
	}
	for k := range b.hwKept {
		if _, exists := m.ByID[k.TopicID]; !exists {
			delete(b.hwKept, k) // a deleted topic's: its data goes
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
func (b *Broker) applyDelta(m *cluster.View, changed []cluster.PartKey) {
	b.meta.Store(m)
	b.mu.Lock()
	ctx := b.runCtx
	b.mu.Unlock()
	if ctx == nil || ctx.Err() != nil {
		return
	}
	var drop []*partition.Replica
	var us []replicaUpdate
	for _, k := range changed {
		if t, ok := m.ByID[k.TopicID]; ok && int(k.Partition) < len(t.Partitions) && t.Partitions[k.Partition].HasReplica(b.cfg.ID) {
			us = append(us, replicaUpdate{t, t.Partitions[k.Partition]})
			continue
		}
		b.mu.Lock()
		if p, ok := b.parts[k]; ok {
			drop = append(drop, p)
			b.closeLocked(m, k, p)
		} else if _, exists := m.ByID[k.TopicID]; !exists {
			delete(b.hwKept, k)
		}
		b.mu.Unlock()
	}
	b.updateReplicas(ctx, us)
	b.dropReplicas(ctx, m, drop)
}

// replicaUpdate is a partition of which a new view gives this broker a
// replica.
type replicaUpdate struct {
	t  *cluster.Topic
	pm cluster.Partition
}

// openParallel is how many replicas updateReplicas opens at once. Opening
// creates or recovers a replica's files and fsyncs them; one at a time,
// 3,000 new partitions took a broker about 9 s to open (issue 15), and
// concurrent fsyncs of different files share the file system's commits.
const openParallel = 8

// updateReplicas opens the local replicas of us that are not open yet,
// openParallel at a time, then applies each one's assignment and its
// topic's config, in the order of us. Only the assignment stream's
// goroutine calls it, so no two calls open the same replica at once.
func (b *Broker) updateReplicas(ctx context.Context, us []replicaUpdate) {
	// One open per partition, even if us lists one twice.
	first := make(map[cluster.PartKey]int, len(us))
	for i, u := range us {
		if _, ok := first[cluster.PartKey{TopicID: u.t.ID, Partition: u.pm.Partition}]; !ok {
			first[cluster.PartKey{TopicID: u.t.ID, Partition: u.pm.Partition}] = i
		}
	}
	ps := make([]*partition.Replica, len(us))
	errs := make([]error, len(us))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(openParallel, len(first)) {
		wg.Go(func() {
			for i := range next {
				ps[i], errs[i] = b.openPartition(us[i].t, us[i].pm)
			}
		})
	}
	for _, i := range first {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, u := range us {
		i := first[cluster.PartKey{TopicID: u.t.ID, Partition: u.pm.Partition}]
		if errs[i] != nil {
			b.logger.Error("open partition", "topic", u.t.ID, "partition", u.pm.Partition, "err", errs[i])
			continue
		}
		ps[i].Update(ctx, u.pm.Assignment(), u.t.Config.Replica())
	}
}

// closeLocked takes replica p of partition k out of the open ones, to be
// dropped (dropReplicas). When view m still has its topic, its data stays,
// so its HW stays in the checkpoint (hwKept).
func (b *Broker) closeLocked(m *cluster.View, k cluster.PartKey, p *partition.Replica) {
	delete(b.parts, k)
	if _, exists := m.ByID[k.TopicID]; exists {
		b.hwKept[k] = p.HighWatermark()
	}
}

// dropReplicas stops and closes replicas this broker no longer hosts in m
// (already taken out of b.parts), deleting the data of those whose topic
// m no longer has.
func (b *Broker) dropReplicas(ctx context.Context, m *cluster.View, drop []*partition.Replica) {
	for _, p := range drop {
		p.Stop()
		if err := p.Log().Close(); err != nil {
			b.logger.Warn("close partition log", "topic", p.TopicID(), "partition", p.Partition(), "err", err)
		}
		if _, exists := m.ByID[p.TopicID()]; exists {
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
func (b *Broker) deleteStrayPartitions(ctx context.Context, m *cluster.View) {
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
			if _, exists := m.ByID[topicID]; exists {
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
func (b *Broker) openPartition(t *cluster.Topic, pm cluster.Partition) (*partition.Replica, error) {
	k := cluster.PartKey{TopicID: t.ID, Partition: pm.Partition}
	b.mu.Lock()
	p, ok := b.parts[k]
	hw, hwKnown := b.hwKept[k]
	b.mu.Unlock()
	if ok {
		return p, nil
	}
	// Outside b.mu: opening does disk I/O, and the broker's lock serves
	// every request's partition lookup.
	p, err := partition.Open(b.host, partition.Spec{
		TenantID: t.TenantID, TopicID: t.ID, Partition: pm.Partition,
		Dir: b.partitionDir(t.TenantID, t.ID, pm.Partition),
		HW:  hw, HWKnown: hwKnown,
		Config: t.Config.Replica(),
		Tiered: b.tier != nil && t.TenantID != systemTenantID,
	})
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.parts[k] = p
	delete(b.hwKept, k) // the replica has it now
	return p, nil
}

// hwCheckpointLoop writes the HW checkpoint (checkpointHWs), and
// snapshots the producer state of every partition whose log rolled since
// its last snapshot (SnapshotProducers), every interval until ctx ends;
// closePartitions writes a last checkpoint and snapshot.
func (b *Broker) hwCheckpointLoop(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() {
		if err := b.checkpointHWs(); err != nil && ctx.Err() == nil {
			b.logger.Warn("checkpoint high watermarks", "err", err)
		}
		for _, p := range b.partitions() {
			if err := p.SnapshotProducers(time.Now(), false); err != nil && ctx.Err() == nil {
				b.logger.Warn("snapshot producer state", "topic", p.TopicID(), "partition", p.Partition(), "err", err)
			}
		}
	})
}

// checkpointHWs writes the broker's HW checkpoint (hwcheckpoint.Write:
// one file in the data dir) with the HW of every open replica and the
// kept ones (hwKept), when it differs from what the file holds. Then the
// replicas the durable file holds drop their legacy per-partition file.
func (b *Broker) checkpointHWs() error {
	b.hwMu.Lock()
	defer b.hwMu.Unlock()
	b.mu.Lock()
	parts := slices.Collect(maps.Values(b.parts))
	hws := maps.Clone(b.hwKept)
	b.mu.Unlock()
	for _, p := range parts {
		// Outside b.mu: a replica's lock may be held for a while (a
		// truncation). A replica closed meanwhile is in hwKept too, with
		// the same or a lower HW: either is one it reached.
		hws[cluster.PartKey{TopicID: p.TopicID(), Partition: p.Partition()}] = p.HighWatermark()
	}
	if !maps.Equal(hws, b.hwWritten) {
		file := make(map[hwcheckpoint.Key]int64, len(hws))
		for k, hw := range hws {
			file[hwcheckpoint.Key{TopicID: k.TopicID, Partition: k.Partition}] = hw
		}
		if err := hwcheckpoint.Write(filepath.Join(b.cfg.DataDir, hwcheckpoint.Name), file); err != nil {
			return err
		}
		b.hwWritten = hws
	}
	var errs []error
	for _, p := range parts {
		if _, ok := b.hwWritten[cluster.PartKey{TopicID: p.TopicID(), Partition: p.Partition()}]; ok {
			if err := p.HWCheckpointed(); err != nil {
				errs = append(errs, fmt.Errorf("partition %s/%d: %w", p.TopicID(), p.Partition(), err))
			}
		}
	}
	return errors.Join(errs...)
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
