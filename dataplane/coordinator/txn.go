package coordinator

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/sluicemq/sluice/dataplane/runtime"
	coordinatorv1 "github.com/sluicemq/sluice/gen/sluice/coordinator/v1"
)

// Offsets in transactions (KIP-447). A transactional producer's
// TxnCommitOffsets writes its offsets as pending offsets of (group,
// producer id); the marker its transaction coordinator writes at the
// transaction's end (WriteTxnMarker) makes them the group's committed
// offsets (commit) or drops them (abort). Both are ordinary records of the
// offsets partition (txn_offset, txn_marker), not transactional batches:
// the offsets partition has no open transactions, and the coordinator
// applies its own records.

// The coordinator's refusals of transactional requests and of requests
// that meet a transaction's pending offsets. Each is returned wrapped, with
// the group, the producer and the epochs involved.
var (
	// ErrProducerFenced: a TxnCommitOffsets with an epoch older than the
	// producer's last marker in this group: its transaction already ended
	// (an end bumps the epoch), so the commit belongs to none.
	ErrProducerFenced = errors.New("producer fenced")
	// ErrCoordinatorFenced: a marker from a transaction coordinator older
	// (its leader epoch) than the one whose marker for the producer was
	// applied last: it was replaced.
	ErrCoordinatorFenced = errors.New("transaction coordinator fenced")
	// ErrUnstableOffset: an open transaction holds pending offsets for the
	// partition (Kafka's UNSTABLE_OFFSET_COMMIT): its committed offset is
	// about to change, so it is neither answered nor overwritten until the
	// transaction ends. Retry shortly.
	ErrUnstableOffset = errors.New("has offsets pending in an open transaction")
)

// producerKey is one producer id's transactions in one group.
type producerKey struct {
	GroupKey
	ProducerID int64
}

// fence is the last transaction marker applied for a producerKey.
type fence struct {
	// markerEpoch is the last marker's producer epoch (the ended
	// transaction's + 1): a TxnCommitOffsets below it is fenced.
	markerEpoch int16
	// coordinatorEpoch is the highest leader epoch of the transaction
	// coordinators whose markers were applied: an older one is fenced.
	coordinatorEpoch int32
}

// pendingOffset is an offset a transaction committed, waiting for its
// marker.
type pendingOffset struct {
	Committed
	epoch int16 // the producer epoch of the transaction that committed it
}

// TxnCommitOffsets writes offsets committed inside producerID's
// transaction at epoch as pending offsets: the group's committed offsets
// only when the transaction's commit marker comes (WriteTxnMarker). A
// later commit of the same partition by the same producer replaces its
// pending offset. A commit with an epoch older than the producer's last
// marker here is refused with ErrProducerFenced: its transaction ended,
// even if its verification passed before the end. The check and the write
// are atomic against the producer's markers (the group's key serialises
// them).
func (s *Shard) TxnCommitOffsets(gk GroupKey, producerID int64, epoch int16, offsets []OffsetCommit, now time.Time) (runtime.Result[struct{}], error) {
	var none runtime.Result[struct{}]
	if producerID < 0 || epoch < 0 {
		return none, fmt.Errorf("transactional offsets of group %q: producer id %d epoch %d: must not be negative", gk.Group, producerID, epoch)
	}
	pk := producerKey{gk, producerID}
	if f, ok := s.st.fences[pk]; ok && epoch < f.markerEpoch {
		return none, fmt.Errorf("%w: producer %d epoch %d: its transaction in group %q ended (marker at epoch %d)", ErrProducerFenced, producerID, epoch, gk.Group, f.markerEpoch)
	}
	recs := make([]groupRecord, len(offsets))
	for i, oc := range offsets {
		recs[i] = txnOffsetRecord(gk.Tenant, gk.Group, producerID, epoch, oc, now)
	}
	return write(recs...)
}

// WriteTxnMarker ends producerID's transaction in the group's offsets
// (KIP-447): a commit makes its pending offsets the group's committed
// offsets, an abort drops them. epoch is the marker's producer epoch, the
// ended transaction's + 1 (dataplane/txn bumps the epoch at every end): the
// marker applies to the producer's pending offsets of older epochs only, so
// a late copy of an earlier marker never ends a later transaction. With
// keptEpoch (an end that kept the epoch: a Kafka client before KIP-890
// part 2) epoch is the ended transaction's own, and the marker applies to
// the pending offsets of that epoch written before it in the log: a late
// copy of it may end the producer's next transaction's offsets, as in
// Kafka before part 2 (the transaction coordinator starts no next
// transaction before its markers are all written, so only a copy delayed
// past that can).
// coordinatorEpoch is the writing transaction coordinator's leader epoch;
// a marker older than the last applied for the producer is refused with
// ErrCoordinatorFenced. The marker is written also when nothing is pending
// (it fences the producer's older epochs here); one that would change
// nothing succeeds without a write.
func (s *Shard) WriteTxnMarker(gk GroupKey, producerID int64, epoch int16, coordinatorEpoch int32, commit, keptEpoch bool, now time.Time) (runtime.Result[struct{}], error) {
	var none runtime.Result[struct{}]
	if producerID < 0 || epoch < 0 {
		return none, fmt.Errorf("transaction marker for group %q: producer id %d epoch %d: must not be negative", gk.Group, producerID, epoch)
	}
	pk := producerKey{gk, producerID}
	f, known := s.st.fences[pk]
	ends := false
	if gs := s.st.groups[gk]; gs != nil {
		for _, po := range gs.pending[producerID] {
			ends = ends || endedBy(po.epoch, epoch, keptEpoch)
		}
	}
	if known && coordinatorEpoch < f.coordinatorEpoch {
		return none, fmt.Errorf("%w: marker for producer %d in group %q from coordinator epoch %d; the last was from %d", ErrCoordinatorFenced, producerID, gk.Group, coordinatorEpoch, f.coordinatorEpoch)
	}
	if known && !ends && epoch <= f.markerEpoch && coordinatorEpoch == f.coordinatorEpoch {
		return none, nil // written already (or older than what was)
	}
	return write(txnMarkerRecord(gk.Tenant, gk.Group, producerID, epoch, coordinatorEpoch, commit, keptEpoch, now))
}

// endedBy reports whether a marker at markerEpoch ends a pending offset
// committed at epoch: one of an older epoch (the marker carries the ended
// transaction's epoch + 1), or of its own epoch when the end kept the
// epoch (kept: a Kafka client before KIP-890 part 2, whose next
// transaction goes on at the same epoch; its pending offsets come after
// the marker in the log, which applyTxnMarker checks too).
func endedBy(epoch, markerEpoch int16, kept bool) bool {
	return epoch < markerEpoch || kept && epoch == markerEpoch
}

// txnOffsetRecord commits one partition's offset in a transaction.
func txnOffsetRecord(tenantID, groupID string, producerID int64, epoch int16, oc OffsetCommit, now time.Time) groupRecord {
	return groupRecord{
		key: &coordinatorv1.GroupRecordKey{TenantId: tenantID, Group: groupID, Kind: &coordinatorv1.GroupRecordKey_TxnOffset{TxnOffset: &coordinatorv1.TxnOffsetKey{
			ProducerId: producerID,
			Offset:     &coordinatorv1.OffsetKey{TopicId: oc.TopicID, Topic: oc.Offset.GetTopic(), Partition: oc.Offset.GetPartition()},
		}}},
		value: &coordinatorv1.GroupRecordValue{Offset: recordOffset(oc.Offset), CommitTimeMs: now.UnixMilli(), ProducerEpoch: int32(epoch)},
	}
}

// txnMarkerRecord ends a producer's transaction in a group.
func txnMarkerRecord(tenantID, groupID string, producerID int64, epoch int16, coordinatorEpoch int32, commit, keptEpoch bool, now time.Time) groupRecord {
	return groupRecord{
		key: &coordinatorv1.GroupRecordKey{TenantId: tenantID, Group: groupID, Kind: &coordinatorv1.GroupRecordKey_TxnMarker{TxnMarker: &coordinatorv1.TxnMarkerKey{ProducerId: producerID}}},
		value: &coordinatorv1.GroupRecordValue{
			ProducerEpoch: int32(epoch), CoordinatorEpoch: coordinatorEpoch, Commit: commit, CommitTimeMs: now.UnixMilli(), KeptEpoch: keptEpoch,
		},
	}
}

// epochOf reads a record's producer epoch; out of an int16's range (a
// corrupt record) it is -1, which nothing accepts.
func epochOf(v *coordinatorv1.GroupRecordValue) int16 {
	e := v.GetProducerEpoch()
	if e < 0 || e > math.MaxInt16 {
		return -1
	}
	return int16(e)
}

// applyTxnOffset applies a pending offset, unless its producer's epoch
// is fenced by a marker already applied.
func (st *state) applyTxnOffset(gk GroupKey, logOffset int64, k *coordinatorv1.TxnOffsetKey, v *coordinatorv1.GroupRecordValue) {
	pk := producerKey{gk, k.GetProducerId()}
	epoch := epochOf(v)
	if f, ok := st.fences[pk]; epoch < 0 || ok && epoch < f.markerEpoch {
		return
	}
	g := st.group(gk)
	if g.pending == nil {
		g.pending = map[int64]map[TopicPartition]pendingOffset{}
	}
	p := g.pending[pk.ProducerID]
	if p == nil {
		p = map[TopicPartition]pendingOffset{}
		g.pending[pk.ProducerID] = p
	}
	tk := TopicPartition{k.GetOffset().GetTopicId(), k.GetOffset().GetPartition()}
	if cur, ok := p[tk]; ok && cur.logOffset > logOffset {
		return
	}
	p[tk] = pendingOffset{epoch: epoch, Committed: Committed{
		Topic: k.GetOffset().GetTopic(), Offset: partitionOffset(v.GetOffset()), logOffset: logOffset,
		CommitTime: time.UnixMilli(v.GetCommitTimeMs()),
	}}
}

// applyTxnMarker applies a marker: the producer's pending offsets written
// before it (in the log) at older epochs become committed (unless a later
// plain commit of the partition is already there) or are dropped, and the
// producer's fence rises. A marker from an older coordinator epoch than
// the fence's changes nothing.
func (st *state) applyTxnMarker(gk GroupKey, logOffset, producerID int64, v *coordinatorv1.GroupRecordValue) {
	pk := producerKey{gk, producerID}
	epoch := epochOf(v)
	f, ok := st.fences[pk]
	if epoch < 0 || ok && v.GetCoordinatorEpoch() < f.coordinatorEpoch {
		return
	}
	if !ok || epoch > f.markerEpoch {
		f.markerEpoch = epoch
	}
	f.coordinatorEpoch = max(f.coordinatorEpoch, v.GetCoordinatorEpoch())
	st.fences[pk] = f
	g := st.groups[gk]
	if g == nil {
		return
	}
	p := g.pending[producerID]
	for tk, po := range p {
		if !endedBy(po.epoch, epoch, v.GetKeptEpoch()) || po.logOffset > logOffset {
			continue // a later transaction's
		}
		delete(p, tk)
		if !v.GetCommit() {
			continue
		}
		if cur, ok := g.offsets[tk]; ok && cur.logOffset > po.logOffset || g.offsetDeletedAfter(tk, po.logOffset) {
			continue // a plain commit or a deletion later in the log wins
		}
		g.offsets[tk] = po.Committed
	}
	if len(p) == 0 {
		delete(g.pending, producerID)
	}
}

// unstable returns ErrUnstableOffset, wrapped, when a transaction holds a
// pending offset of the group for one of tps (any partition when tps is
// nil), naming the first (by producer id, topic id and partition).
func (s *Shard) unstable(gk GroupKey, tps []TopicPartition) error {
	gs := s.st.groups[gk]
	if gs == nil {
		return nil
	}
	for _, pid := range slices.Sorted(maps.Keys(gs.pending)) {
		p := gs.pending[pid]
		for _, tk := range slices.SortedFunc(maps.Keys(p), compareTopicPartitions) {
			if po := p[tk]; tps == nil || slices.Contains(tps, tk) {
				return fmt.Errorf("group %q topic %q partition %d %w (producer %d); retry once it commits or aborts", gk.Group, po.Topic, tk.Partition, ErrUnstableOffset, pid)
			}
		}
	}
	return nil
}

// compareTopicPartitions orders partitions by topic id, then number.
func compareTopicPartitions(a, b TopicPartition) int {
	return cmp.Or(cmp.Compare(a.TopicID, b.TopicID), cmp.Compare(a.Partition, b.Partition))
}

// StableOffsets returns a copy of the group's committed offsets, as
// Offsets does, unless a transaction holds pending offsets for one of tps
// (for any of the group's partitions when tps is nil): then
// ErrUnstableOffset, wrapped, so that a consumer taking a partition over
// does not resume from the offset before a transaction about to commit.
func (s *Shard) StableOffsets(gk GroupKey, tps []TopicPartition) (map[TopicPartition]Committed, error) {
	if err := s.unstable(gk, tps); err != nil {
		return nil, err
	}
	if g := s.st.groups[gk]; g != nil {
		return maps.Clone(g.offsets), nil
	}
	return nil, nil
}

// PendingOffsets returns a copy of the group's pending transactional
// offsets: per producer id, its offsets not committed yet.
func (s *Shard) PendingOffsets(gk GroupKey) map[int64]map[TopicPartition]Committed {
	g := s.st.groups[gk]
	if g == nil || len(g.pending) == 0 {
		return nil
	}
	out := make(map[int64]map[TopicPartition]Committed, len(g.pending))
	for pid, p := range g.pending {
		m := make(map[TopicPartition]Committed, len(p))
		for tk, po := range p {
			m[tk] = po.Committed
		}
		out[pid] = m
	}
	return out
}
