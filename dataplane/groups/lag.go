package groups

import (
	"context"
	"sync"
	"time"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/record"
)

// Leaders reads partitions' offsets and records at their leaders (this
// broker, or the broker that leads the partition), on a caller's behalf:
// the record service's ListOffsets and Fetch. A refusal is an error whose
// text is the leader's message.
type Leaders interface {
	// ListOffsets answers the partition's bounds and, with SpecTimestamp,
	// the first offset at or after timestampMs (Offset -1: none).
	ListOffsets(ctx context.Context, cred Credentials, t *cluster.Topic, pm cluster.Partition, spec OffsetSpec, timestampMs int64) (Offsets, error)
	// Fetch reads raw batches from offset (at least the batch holding it
	// when maxBytes is small), read_committed or read_uncommitted.
	Fetch(ctx context.Context, cred Credentials, t *cluster.Topic, pm cluster.Partition, offset int64, maxBytes int32, readCommitted bool) (Fetched, error)
}

// Offsets are a partition's bounds as its leader answers them.
type Offsets struct {
	// Offset is the offset asked for (ListOffsets' spec).
	Offset                          int64
	LogStartOffset, HighWatermark   int64
	LastStableOffset, PartitionSize int64
}

// Fetched is what a fetch read: whole batches, and where the next fetch
// starts (past the batches a read_committed read skipped).
type Fetched struct {
	Batches    []byte
	NextOffset int64
}

// listOffsets asks a partition's leader for an offset, with cred: the
// partition's NotLeader while it has no leader, Unavailable when the
// leader does not answer.
func (s *Service) listOffsets(ctx context.Context, cred Credentials, t *cluster.Topic, pm cluster.Partition, spec OffsetSpec, ts int64) (Offsets, error) {
	if pm.Leader < 0 {
		return Offsets{}, s.deps.View().NotLeader(s.cfg.BrokerID, pm)
	}
	o, err := s.deps.Leaders.ListOffsets(ctx, cred, t, pm, spec, ts)
	if err != nil {
		return Offsets{}, derr.New(derr.Unavailable, "offsets of topic %q partition %d: %w", t.Name, pm.Partition, err)
	}
	return o, nil
}

// topicLag is one partition's lag row to fill in (Topic, Partition and
// CommittedOffset set; -1 when the group has none) with its topic.
type topicLag struct {
	topic *cluster.Topic
	lag   *PartitionLag
}

// fillLags asks each partition's leader for its log start, high watermark
// and last stable offset and, when the group lags, for the oldest record
// it has left to read (concurrently, at most 16 at a time). A partition
// whose leader does not answer keeps -1 values. DescribeGroup and the
// group lag metrics both compute lag here.
//
// Lag is what a read_committed consumer at the committed offset can still
// read (the broker does not know a group's isolation level; on a topic
// without transactions the LSO is the high watermark, so this is HW -
// committed): it ends at the last stable offset, so an open transaction's
// records count only once it commits, and it starts at the first record
// such a consumer would be given (batchTimeAt), so transaction markers and
// aborted transactions right after the committed offset are not counted:
// a group caught up to a commit marker has lag 0. Markers and aborted
// records after that first record are still counted (an upper bound: only
// a read of the whole range would tell them apart). A read_uncommitted
// group inside an open transaction, past the LSO, has lag 0.
func (s *Service) fillLags(ctx context.Context, cred Credentials, lags []topicLag, now time.Time) {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, tl := range lags {
		t, pl := tl.topic, tl.lag
		if pl.Partition < 0 || int(pl.Partition) >= len(t.Partitions) {
			pl.HighWatermark, pl.LogStartOffset, pl.Lag = -1, -1, -1
			continue
		}
		pm := t.Partitions[pl.Partition]
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			off, err := s.listOffsets(ctx, cred, t, pm, SpecLatest, 0)
			if err != nil {
				pl.HighWatermark, pl.LogStartOffset, pl.Lag = -1, -1, -1
				return
			}
			pl.HighWatermark, pl.LogStartOffset, pl.PartitionBytes = off.HighWatermark, off.LogStartOffset, off.PartitionSize
			lso := min(max(off.LastStableOffset, pl.LogStartOffset), pl.HighWatermark)
			from := pl.CommittedOffset
			if from < 0 || from < pl.LogStartOffset {
				from = pl.LogStartOffset
			}
			pl.Lag = max(lso-from, 0)
			if pl.Lag == 0 {
				return
			}
			ts, at, err := s.batchTimeAt(ctx, cred, t, pm, from, lso)
			if err != nil {
				return // the lag from the committed offset, its age unknown
			}
			pl.Lag = max(lso-at, 0)
			if pl.Lag > 0 && ts > 0 {
				pl.LagSeconds = max(now.Sub(time.UnixMilli(ts)).Seconds(), 0)
			}
		})
	}
	wg.Wait()
}

// lagScanFetches bounds the fetches batchTimeAt makes past batches a
// read_committed consumer would not be given; lagScanBytes is each one's
// max_bytes after the first (markers are about 70 bytes: one fetch passes
// hundreds).
const (
	lagScanFetches = 8
	lagScanBytes   = 64 << 10
)

// batchTimeAt finds the oldest record a read_committed consumer at offset
// would be given below lso: it returns the first timestamp of its batch
// (the append time of the oldest unconsumed record, to within a batch; with
// LogAppendTime the batch's append time) and
// its offset (offset itself when the batch holds it). The fetches skip
// transaction markers and aborted batches (their next offset passes
// them): when they reach lso, it returns ts 0 and at = lso (nothing left
// to read). After lagScanFetches fetches without a record it returns ts 0
// and where it got to. When the leader refuses the read_committed fetch
// (a tiered segment without an aborted-transaction index), it reads the
// batch at that offset read_uncommitted: an aborted batch's age then
// counts, which errs toward an early retention alert, not a missed one.
func (s *Service) batchTimeAt(ctx context.Context, cred Credentials, t *cluster.Topic, pm cluster.Partition, offset, lso int64) (ts, at int64, err error) {
	fetch := func(offset int64, maxBytes int32, readCommitted bool) (Fetched, error) {
		return s.deps.Leaders.Fetch(ctx, cred, t, pm, offset, maxBytes, readCommitted)
	}
	first := func(res Fetched) (ts, at int64, ok bool, err error) {
		if len(res.Batches) == 0 {
			return 0, 0, false, nil
		}
		batch, _, err := record.ReadBatch(res.Batches)
		if err != nil {
			return 0, offset, false, err
		}
		h := batch.Header()
		return h.Timestamp(0), max(offset, h.BaseOffset), true, nil
	}
	maxBytes := int32(1) // at least the batch at offset: the usual answer
	for range lagScanFetches {
		res, err := fetch(offset, maxBytes, true)
		if err != nil && ctx.Err() == nil {
			if res, err2 := fetch(offset, 1, false); err2 == nil {
				if ts, at, ok, err := first(res); ok || err != nil {
					return ts, at, err
				}
			}
		}
		if err != nil {
			return 0, offset, err
		}
		if ts, at, ok, err := first(res); ok || err != nil {
			return ts, at, err
		}
		next := res.NextOffset
		if next <= offset {
			return 0, offset, nil // nothing read: at the end, or the leader moved
		}
		if offset = next; offset >= lso {
			return 0, lso, nil
		}
		maxBytes = lagScanBytes
	}
	return 0, offset, nil
}
