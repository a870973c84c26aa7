package broker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/tiered"
	"github.com/sluicemq/sluice/tiered/objstore"
)

// Tiered storage on a broker: leaders copy closed segments below the HW to
// the object store every --tier-copy-interval, every replica's local
// retention deletes only what is copied (followers learn how far from the
// leader's fetch responses), and fetches below the local log start read
// the object store. The internal offsets topic stays local.

// newTier starts tiered storage when the broker has an object store.
func (b *Broker) newTier() error {
	if b.tierStore == nil {
		return nil
	}
	dir := b.cfg.TierCacheDir
	if dir == "" {
		dir = filepath.Join(b.cfg.DataDir, ".tier-cache")
	}
	t, err := tiered.New(tiered.Config{
		Store: objstore.Instrument(b.tierStore, b.registry, "tier"), Meta: b.cp, BrokerID: b.cfg.ID, BrokerEpoch: b.brokerEpoch.Load,
		CacheDir: dir, CacheBytes: b.cfg.TierCacheBytes,
		MaxConcurrentReads: b.cfg.TierMaxConcurrentReads, ReadBytesPerSecond: b.cfg.TierReadBytesPerSecond,
		Metrics: tiered.NewMetrics(b.registry), Logger: b.logger,
	})
	if err != nil {
		return err
	}
	b.tier = t
	return nil
}

// deleteRemotePartition deletes a deleted topic's partition from the
// object store (every replica does it; deleting is idempotent), retrying
// while ctx lasts.
func (b *Broker) deleteRemotePartition(ctx context.Context, tenantID, topicID string, partition int32) {
	for attempt := 1; ; attempt++ {
		n, err := b.tier.DeletePartition(ctx, tenantID, topicID, partition)
		if err == nil {
			if n > 0 {
				b.logger.Info("deleted remote data of a deleted topic", "topic", topicID, "partition", partition, "objects", n)
			}
			return
		}
		b.logger.Warn("delete remote data of a deleted topic", "topic", topicID, "partition", partition, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(time.Duration(attempt)*10*time.Second, 5*time.Minute)):
		}
	}
}

// tierAllowsDelete is the tiered part of a log's CanDelete: a segment may
// go only once it is copied. Not even total retention deletes a segment
// that is not copied: the copies must stay consecutive, so it goes to the
// object store first and total retention deletes it there. While the
// object store is down, disks fill (sluice_tier_pending_bytes).
func (p *partition) tierAllowsDelete(si log.SegmentInfo) bool {
	return !p.tiered || si.NextOffset-1 <= p.remoteThrough.Load()
}

// tierLeader describes the partition for tiered storage while this replica
// leads it.
func (p *partition) tierLeader() (tiered.Partition, int64, topicConfig, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.role != roleLeader || p.lead == nil {
		return tiered.Partition{}, 0, topicConfig{}, false
	}
	return tiered.Partition{TenantID: p.tenantID, TopicID: p.topicID, Partition: p.id, LeaderEpoch: p.meta.leaderEpoch}, p.lead.HW(), p.cfg, true
}

// tierLoop copies and applies total retention to the led partitions, a few
// at a time.
func (b *Broker) tierLoop(ctx context.Context) {
	every(ctx, b.cfg.TierCopyInterval, func() {
		sem := make(chan struct{}, 4)
		var wg sync.WaitGroup
		for _, p := range b.partitions() {
			if !p.tiered {
				continue
			}
			tp, hw, cfg, ok := p.tierLeader()
			if !ok {
				b.tier.Forget(p.topicID, p.id) // reloaded (and cleaned up) when it leads again
				continue
			}
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				b.tierPartition(ctx, p, tp, hw, cfg)
			})
		}
		wg.Wait()
	})
}

func (b *Broker) tierPartition(ctx context.Context, p *partition, tp tiered.Partition, hw int64, cfg topicConfig) {
	if _, err := b.tier.Copy(ctx, tp, tierSource{p.log}, hw); err != nil && ctx.Err() == nil {
		b.logger.Warn("tiered storage: copy", "topic", p.topicID, "partition", p.id, "err", err)
	}
	through := b.tier.CopiedThrough(p.topicID, p.id)
	p.remoteThrough.Store(through)
	var local int64 // bytes on disk not copied: they count toward retention.bytes too
	for _, si := range p.log.ClosedSegments() {
		if si.NextOffset-1 > through {
			local += si.Size
		}
	}
	if n, err := b.tier.ApplyRetention(ctx, tp, retentionTime(cfg), max(cfg.retentionBytes, 0), local); err != nil && ctx.Err() == nil {
		b.logger.Warn("tiered storage: remote retention", "topic", p.topicID, "partition", p.id, "err", err)
	} else if n > 0 {
		b.logger.Info("remote retention deleted segments", "topic", p.topicID, "partition", p.id, "segments", n)
	}
}

// tierRef names the partition for tiered-storage reads.
func (p *partition) tierRef() tiered.Partition {
	p.mu.Lock()
	defer p.mu.Unlock()
	return tiered.Partition{TenantID: p.tenantID, TopicID: p.topicID, Partition: p.id, LeaderEpoch: p.meta.leaderEpoch}
}

// startOffset is the first offset of the partition's history, the object
// store's part included.
func (p *partition) startOffset(ctx context.Context) int64 {
	if !p.tiered {
		return p.log.LogStartOffset()
	}
	return p.remoteStart(ctx, p.tierRef())
}

// offsetForTimestamp finds the first offset whose batch reaches ts, in the
// object store when the local log starts at or after it.
func (p *partition) offsetForTimestamp(ctx context.Context, ts int64) (int64, bool, error) {
	off, ok, err := p.log.OffsetForTimestamp(ts)
	if err != nil || !p.tiered || (ok && off > p.log.LogStartOffset()) {
		return off, ok, err
	}
	tp := p.tierRef()
	if p.remoteStart(ctx, tp) >= p.log.LogStartOffset() {
		return off, ok, nil
	}
	roff, rok, rerr := p.b.tier.OffsetForTimestamp(ctx, tp, ts)
	if rerr != nil {
		return 0, false, connect.NewError(connect.CodeUnavailable, fmt.Errorf("look up timestamp %d in the object store: %w", ts, rerr))
	}
	if rok {
		return roff, true, nil
	}
	return off, ok, nil
}

// sizeBytes is what the partition holds: its local log, and the object
// store's segments below the local log start.
func (p *partition) sizeBytes(ctx context.Context) int64 {
	n := p.log.Size()
	if !p.tiered {
		return n
	}
	start := p.log.LogStartOffset()
	if segs, err := p.b.tier.Segments(ctx, p.tierRef(), false); err == nil {
		for _, s := range segs {
			if s.GetEndOffset() < start {
				n += s.GetSizeBytes()
			}
		}
	}
	return n
}

// remoteStart returns the first offset of the partition's history, the
// object store's part included.
func (p *partition) remoteStart(ctx context.Context, tp tiered.Partition) int64 {
	start := p.log.LogStartOffset()
	if !p.tiered {
		return start
	}
	if off, ok, err := p.b.tier.StartOffset(ctx, tp); err == nil && ok && off < start {
		return off
	}
	return start
}

// readRemote serves a fetch below the local log start from the object
// store.
func (p *partition) readRemote(ctx context.Context, tp tiered.Partition, offset int64, maxBytes int, hw int64) ([]byte, error) {
	data, err := p.b.tier.Read(ctx, tp, offset, maxBytes)
	switch {
	case errors.Is(err, tiered.ErrNotRemote):
		return nil, toConnect(&log.OffsetOutOfRangeError{Offset: offset, LogStart: p.remoteStart(ctx, tp), LEO: p.log.LEO()})
	case errors.Is(err, tiered.ErrCorrupt):
		return nil, connect.NewError(connect.CodeDataLoss, fmt.Errorf("offset %d is in a remote segment that fails its checks; it is not served: %w", offset, err))
	case err != nil && ctx.Err() == nil:
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("read offset %d from the object store: %w", offset, err))
	case err != nil:
		return nil, err
	}
	return belowHW(data, hw), nil
}

// tierSource is a partition's log as the source tiered storage copies
// closed segments from.
type tierSource struct{ l *log.Log }

func (s tierSource) ClosedSegments() []tiered.Segment {
	segs := s.l.ClosedSegments()
	out := make([]tiered.Segment, len(segs))
	for i, si := range segs {
		out[i] = tiered.Segment{BaseOffset: si.BaseOffset, NextOffset: si.NextOffset, Size: si.Size, MaxTimestamp: si.MaxTimestamp}
	}
	return out
}

// OpenSegment opens the segment's batches file; its index files are not
// needed (tiered storage builds its own index as it scans).
func (s tierSource) OpenSegment(base int64) (tiered.SegmentReader, error) {
	files, err := s.l.OpenSegment(base)
	if err != nil {
		return nil, err
	}
	return segmentLog{files}, nil
}

// segmentLog reads a segment's batches file and closes all its files.
type segmentLog struct{ *log.SegmentFiles }

func (f segmentLog) ReadAt(p []byte, off int64) (int, error) { return f.Log.ReadAt(p, off) }
