package partition

import (
	"context"
	"errors"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/producerstate"
	"github.com/sluicemq/sluice/tiered"
)

// Tiered storage of a replica: its leader copies closed segments below the
// HW to the object store (CopyToTier, which the broker calls every
// --tier-copy-interval), every replica's local retention deletes only what
// is copied (followers learn how far from the leader's fetch responses),
// and fetches below the local log start read the object store.

// tierAllowsDelete is the tiered part of a log's CanDelete: a segment may
// go only once it is copied. Not even total retention deletes a segment
// that is not copied: the copies must stay consecutive, so it goes to the
// object store first and total retention deletes it there. While the
// object store is down, disks fill (sluice_tier_pending_bytes).
func (p *Replica) tierAllowsDelete(si log.SegmentInfo) bool {
	return !p.tiered || si.NextOffset-1 <= p.remoteThrough.Load()
}

// TierLead is a leadership of a tiered replica as CopyToTier needs it,
// read at one moment.
type TierLead struct {
	tp tiered.Partition
	// below bounds what is copied: the LSO (so the HW).
	below int64
	cfg   TopicConfig
}

// TierLeader describes the partition for tiered storage while this
// replica leads it; false when it does not lead or is not tiered.
func (p *Replica) TierLeader() (TierLead, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.tiered || p.role != RoleLeader || p.lead == nil {
		return TierLead{}, false
	}
	// Below the LSO: every transaction with a batch in a copied segment
	// has ended, so the segment's aborted-transaction index is final.
	return TierLead{tiered.Partition{TenantID: p.tenantID, TopicID: p.topicID, Partition: p.id, LeaderEpoch: p.meta.LeaderEpoch}, p.lsoLocked(), p.cfg}, true
}

// CopyToTier copies the closed segments below the LSO (so below the HW)
// of leadership l to the object store, each with its aborted-transaction
// index (tierSource.TxnIndex), records how far the copies reach (local
// retention deletes only what is copied), and applies the total retention
// to the object store's segments. Failures are logged and retried next
// time.
func (p *Replica) CopyToTier(ctx context.Context, l TierLead) {
	tier, tp, cfg := p.h.Tier, l.tp, l.cfg
	if _, err := tier.Copy(ctx, tp, tierSource{p.log, p}, l.below); err != nil && ctx.Err() == nil {
		p.h.Logger.Warn("tiered storage: copy", "topic", p.topicID, "partition", p.id, "err", err)
	}
	through := tier.CopiedThrough(p.topicID, p.id)
	p.remoteThrough.Store(through)
	var local int64 // bytes on disk not copied: they count toward retention.bytes too
	for _, si := range p.log.ClosedSegments() {
		if si.NextOffset-1 > through {
			local += si.Size
		}
	}
	if n, err := tier.ApplyRetention(ctx, tp, retentionTime(cfg), max(cfg.RetentionBytes, 0), local); err != nil && ctx.Err() == nil {
		p.h.Logger.Warn("tiered storage: remote retention", "topic", p.topicID, "partition", p.id, "err", err)
	} else if n > 0 {
		p.h.Logger.Info("remote retention deleted segments", "topic", p.topicID, "partition", p.id, "segments", n)
	}
}

// tierRef names the partition for tiered-storage reads.
func (p *Replica) tierRef() tiered.Partition {
	p.mu.Lock()
	defer p.mu.Unlock()
	return tiered.Partition{TenantID: p.tenantID, TopicID: p.topicID, Partition: p.id, LeaderEpoch: p.meta.LeaderEpoch}
}

// StartOffset is the first offset of the partition's history, the object
// store's part included.
func (p *Replica) StartOffset(ctx context.Context) int64 {
	if !p.tiered {
		return p.log.LogStartOffset()
	}
	return p.remoteStart(ctx, p.tierRef())
}

// OffsetForTimestamp finds the first offset whose batch reaches ts, in the
// object store when the local log starts at or after it; false when no
// batch does.
func (p *Replica) OffsetForTimestamp(ctx context.Context, ts int64) (int64, bool, error) {
	off, ok, err := p.log.OffsetForTimestamp(ts)
	if err != nil || !p.tiered || (ok && off > p.log.LogStartOffset()) {
		return off, ok, err
	}
	tp := p.tierRef()
	if p.remoteStart(ctx, tp) >= p.log.LogStartOffset() {
		return off, ok, nil
	}
	roff, rok, rerr := p.h.Tier.OffsetForTimestamp(ctx, tp, ts)
	if rerr != nil {
		return 0, false, derr.New(derr.StorageUnavailable, "look up timestamp %d in the object store: %w", ts, rerr)
	}
	if rok {
		return roff, true, nil
	}
	return off, ok, nil
}

// MaxTimestamp is the largest record timestamp the partition holds, the
// object store's segments included, and false when it holds no record.
// OffsetForTimestamp of it finds the batch that holds it.
func (p *Replica) MaxTimestamp(ctx context.Context) (int64, bool, error) {
	ts, ok, err := p.log.MaxTimestamp()
	if err != nil || !p.tiered {
		return ts, ok, err
	}
	segs, err := p.h.Tier.Segments(ctx, p.tierRef(), false)
	if err != nil {
		return 0, false, derr.New(derr.StorageUnavailable, "list the object store's segments: %w", err)
	}
	for _, s := range segs {
		if s.GetSizeBytes() > 0 && (!ok || s.GetMaxTimestampMs() > ts) {
			ts, ok = s.GetMaxTimestampMs(), true
		}
	}
	return ts, ok, nil
}

// SizeBytes is what the partition holds: its local log, and the object
// store's segments below the local log start.
func (p *Replica) SizeBytes(ctx context.Context) int64 {
	n := p.log.Size()
	if !p.tiered {
		return n
	}
	start := p.log.LogStartOffset()
	if segs, err := p.h.Tier.Segments(ctx, p.tierRef(), false); err == nil {
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
func (p *Replica) remoteStart(ctx context.Context, tp tiered.Partition) int64 {
	start := p.log.LogStartOffset()
	if !p.tiered {
		return start
	}
	if off, ok, err := p.h.Tier.StartOffset(ctx, tp); err == nil && ok && off < start {
		return off
	}
	return start
}

// readRemote serves a fetch below the local log start from the object
// store: whole checked batches from the one holding offset, which the
// caller cuts at its bound (keepBatches).
func (p *Replica) readRemote(ctx context.Context, tp tiered.Partition, offset int64, maxBytes int) ([]byte, error) {
	data, err := p.h.Tier.Read(ctx, tp, offset, maxBytes)
	switch {
	case errors.Is(err, tiered.ErrNotRemote):
		return nil, offsetOutOfRange(&log.OffsetOutOfRangeError{Offset: offset, LogStart: p.remoteStart(ctx, tp), LEO: p.log.LEO()})
	case errors.Is(err, tiered.ErrCorrupt):
		return nil, derr.New(derr.CorruptData, "offset %d is in a remote segment that fails its checks; it is not served: %w", offset, err)
	case err != nil && ctx.Err() == nil:
		return nil, derr.New(derr.StorageUnavailable, "read offset %d from the object store: %w", offset, err)
	case err != nil:
		return nil, err
	}
	return data, nil
}

// tierSource is a partition's log as the source tiered storage copies
// closed segments from, with their aborted-transaction indexes from the
// replica's producer state.
type tierSource struct {
	l *log.Log
	p *Replica
}

// TxnIndex is the aborted-transaction index of offsets [base, end]
// (producerstate.EncodeAbortedIndex): the aborted transactions
// overlapping them. A segment is copied only below the LSO, so every
// transaction with a batch there has ended, and the replica has the
// segment, so its producer state applied every batch of it.
func (s tierSource) TxnIndex(base, end int64) ([]byte, error) {
	s.p.mu.Lock()
	txns := s.p.pstate.AbortedTransactions(base, end+1)
	s.p.mu.Unlock()
	return producerstate.EncodeAbortedIndex(txns), nil
}

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
