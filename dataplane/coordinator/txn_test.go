package coordinator

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	coordinatorv1 "github.com/sluicemq/sluice/gen/sluice/coordinator/v1"
	"github.com/sluicemq/sluice/record"
)

// pendingOf is each producer's pending offset of each (topic id,
// partition).
func pendingOf(c *Coordinator, tenantID, groupID string) map[int64]map[TopicPartition]int64 {
	out := map[int64]map[TopicPartition]int64{}
	for pid, p := range c.PendingOffsets(tenantID, groupID) {
		out[pid] = map[TopicPartition]int64{}
		for k, co := range p {
			out[pid][k] = co.Offset.GetOffset()
		}
	}
	return out
}

// TestTxnOffsetsCommitAndAbort: offsets committed in a transaction are
// pending, not the group's, until the transaction's marker: a commit
// marker makes them committed, an abort drops them. While they are pending
// their partitions are unstable: fetching them (or every offset of the
// group), committing them plainly and deleting the group are refused; the
// group's other partitions are not held. A marker written again changes
// nothing and writes nothing.
func TestTxnOffsetsCommitAndAbort(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	ctx, now, p, c := s.ctx, s.now, s.p, s.c
	require.NoError(t, c.CommitOffsets(ctx, now, "tenant-a", "g", []OffsetCommit{commit("id-1", "orders", 0, 3)}))
	require.NoError(t, c.TxnCommitOffsets(ctx, now, "tenant-a", "g", 7, 0, []OffsetCommit{commit("id-1", "orders", 0, 10), commit("id-1", "orders", 1, 11)}))
	require.Equal(t, map[TopicPartition]int64{{"id-1", 0}: 3}, offsetsOf(c, "tenant-a", "g"), "not committed yet")
	require.Equal(t, map[int64]map[TopicPartition]int64{7: {{"id-1", 0}: 10, {"id-1", 1}: 11}}, pendingOf(c, "tenant-a", "g"))

	_, err := c.StableOffsets("tenant-a", "g", []TopicPartition{{"id-1", 0}})
	require.ErrorIs(t, err, ErrUnstableOffset)
	require.ErrorContains(t, err, `group "g" topic "orders" partition 0 has offsets pending in an open transaction (producer 7); retry once it commits or aborts`)
	_, err = c.StableOffsets("tenant-a", "g", nil)
	require.ErrorIs(t, err, ErrUnstableOffset, "every offset of the group includes the pending ones")
	got, err := c.StableOffsets("tenant-a", "g", []TopicPartition{{"id-2", 0}})
	require.NoError(t, err, "another partition is stable")
	require.Len(t, got, 1)
	_, err = c.StableOffsets("tenant-b", "g", nil)
	require.NoError(t, err, "tenants apart")
	require.ErrorIs(t, c.CommitOffsets(ctx, now, "tenant-a", "g", []OffsetCommit{commit("id-2", "x", 0, 1), commit("id-1", "orders", 1, 5)}), ErrUnstableOffset)
	require.NoError(t, c.CommitOffsets(ctx, now, "tenant-a", "g", []OffsetCommit{commit("id-2", "x", 0, 1)}))
	require.ErrorIs(t, c.DeleteGroup(ctx, "tenant-a", "g"), ErrUnstableOffset)

	require.NoError(t, c.WriteTxnMarker(ctx, "tenant-a", "g", 7, 1, 4, true, false))
	require.Equal(t, map[TopicPartition]int64{{"id-1", 0}: 10, {"id-1", 1}: 11, {"id-2", 0}: 1}, offsetsOf(c, "tenant-a", "g"))
	require.Empty(t, c.PendingOffsets("tenant-a", "g"))
	got, err = c.StableOffsets("tenant-a", "g", nil)
	require.NoError(t, err)
	require.EqualValues(t, 10, got[TopicPartition{"id-1", 0}].Offset.GetOffset())
	leo := p.LEO()
	require.NoError(t, c.WriteTxnMarker(ctx, "tenant-a", "g", 7, 1, 4, true, false), "again")
	require.NoError(t, c.WriteTxnMarker(ctx, "tenant-a", "g", 7, 1, 4, false, false), "again, whatever it says")
	require.Equal(t, leo, p.LEO(), "a marker that changes nothing is not written")

	// The next transaction (epoch 1) aborts.
	require.NoError(t, c.TxnCommitOffsets(ctx, now, "tenant-a", "g", 7, 1, []OffsetCommit{commit("id-1", "orders", 0, 20)}))
	require.NoError(t, c.WriteTxnMarker(ctx, "tenant-a", "g", 7, 2, 4, false, false))
	require.Empty(t, c.PendingOffsets("tenant-a", "g"))
	require.EqualValues(t, 10, offsetsOf(c, "tenant-a", "g")[TopicPartition{"id-1", 0}], "an abort drops them")
	require.NoError(t, c.DeleteGroup(ctx, "tenant-a", "g"), "nothing pending any more")
}

// TestTxnOffsetsFencing: a producer's marker in a group fences its older
// epochs there: a TxnCommitOffsets of the ended transaction (epoch below
// the marker's) is refused and writes nothing, also when nothing was
// pending and after the group is deleted; a late copy of a marker does not
// end the next transaction; a marker from an older transaction
// coordinator is refused. Other producers and groups are not fenced.
func TestTxnOffsetsFencing(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	ctx, now, p, c := s.ctx, s.now, s.p, s.c
	offs := []OffsetCommit{commit("id-1", "orders", 0, 10)}
	// The transaction at epoch 0 ends before its offsets arrive.
	require.NoError(t, c.WriteTxnMarker(ctx, "tenant-a", "g", 7, 1, 4, false, false))
	require.EqualValues(t, 1, p.LEO(), "written though nothing was pending: it fences")
	err := c.TxnCommitOffsets(ctx, now, "tenant-a", "g", 7, 0, offs)
	require.ErrorIs(t, err, ErrProducerFenced)
	require.EqualError(t, err, `producer fenced: producer 7 epoch 0: its transaction in group "g" ended (marker at epoch 1)`)
	require.EqualValues(t, 1, p.LEO(), "nothing written")
	require.Empty(t, c.PendingOffsets("tenant-a", "g"))
	require.NoError(t, c.TxnCommitOffsets(ctx, now, "tenant-a", "other", 7, 0, offs), "another group")
	require.NoError(t, c.TxnCommitOffsets(ctx, now, "tenant-a", "g", 8, 0, offs), "another producer")
	require.NoError(t, c.WriteTxnMarker(ctx, "tenant-a", "g", 8, 1, 4, false, false))

	// The next transaction (epoch 1) commits offsets; a late copy of the
	// epoch-1 marker leaves them pending.
	require.NoError(t, c.TxnCommitOffsets(ctx, now, "tenant-a", "g", 7, 1, offs))
	require.NoError(t, c.WriteTxnMarker(ctx, "tenant-a", "g", 7, 1, 4, true, false))
	require.Equal(t, map[int64]map[TopicPartition]int64{7: {{"id-1", 0}: 10}}, pendingOf(c, "tenant-a", "g"))
	require.Empty(t, offsetsOf(c, "tenant-a", "g"))

	// A takeover of the transaction coordinator (epoch 5) ends it; the
	// replaced one (4) is fenced.
	require.NoError(t, c.WriteTxnMarker(ctx, "tenant-a", "g", 7, 2, 5, true, false))
	require.Equal(t, map[TopicPartition]int64{{"id-1", 0}: 10}, offsetsOf(c, "tenant-a", "g"))
	leo := p.LEO()
	err = c.WriteTxnMarker(ctx, "tenant-a", "g", 7, 3, 4, false, false)
	require.ErrorIs(t, err, ErrCoordinatorFenced)
	require.EqualError(t, err, `transaction coordinator fenced: marker for producer 7 in group "g" from coordinator epoch 4; the last was from 5`)
	require.Equal(t, leo, p.LEO())
	require.NoError(t, c.WriteTxnMarker(ctx, "tenant-a", "g", 8, 2, 4, false, false), "per producer")

	// Fences outlive the group.
	require.NoError(t, c.DeleteGroup(ctx, "tenant-a", "g"))
	require.ErrorIs(t, c.TxnCommitOffsets(ctx, now, "tenant-a", "g", 7, 1, offs), ErrProducerFenced)
	require.NoError(t, c.TxnCommitOffsets(ctx, now, "tenant-a", "g", 7, 2, offs))
}

// TestTxnOffsetsRebuiltOnTakeover: a coordinator that takes over the
// offsets partition between a transaction's offsets and its marker
// rebuilds them pending (the partitions unstable), with the producers'
// fences and the transaction coordinators' epochs; the marker then reaches
// the new coordinator and commits them, and the old one is fenced. A third
// coordinator rebuilds the result.
func TestTxnOffsetsRebuiltOnTakeover(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	ctx, now, p1, c1 := s.ctx, s.now, s.p, s.c
	require.NoError(t, c1.CommitOffsets(ctx, now, "tenant-a", "g", []OffsetCommit{commit("id-1", "orders", 0, 3)}))
	require.NoError(t, c1.TxnCommitOffsets(ctx, now, "tenant-a", "g", 7, 0, []OffsetCommit{commit("id-1", "orders", 0, 10)}))
	require.NoError(t, c1.TxnCommitOffsets(ctx, now, "tenant-a", "g", 7, 0, []OffsetCommit{commit("id-1", "orders", 0, 12), commit("id-1", "orders", 1, 4)}))
	require.NoError(t, c1.TxnCommitOffsets(ctx, now, "tenant-a", "g", 8, 3, []OffsetCommit{commit("id-2", "x", 0, 5)}))
	require.NoError(t, c1.WriteTxnMarker(ctx, "tenant-a", "g", 8, 4, 6, true, false))
	require.NoError(t, c1.TxnCommitOffsets(ctx, now, "tenant-a", "g", 9, 0, []OffsetCommit{commit("id-2", "x", 1, 6)}))
	require.NoError(t, c1.WriteTxnMarker(ctx, "tenant-a", "g", 9, 1, 6, false, false))
	for i := range int64(30) { // across segments
		require.NoError(t, c1.CommitOffsets(ctx, now, "tenant-b", "h", []OffsetCommit{commit("id-3", "y", 0, i)}))
	}
	wantCommitted := map[TopicPartition]int64{{"id-1", 0}: 3, {"id-2", 0}: 5}
	wantPending := map[int64]map[TopicPartition]int64{7: {{"id-1", 0}: 12, {"id-1", 1}: 4}}
	require.Equal(t, wantCommitted, offsetsOf(c1, "tenant-a", "g"))
	require.Equal(t, wantPending, pendingOf(c1, "tenant-a", "g"))

	p2 := openPartition(t, -1)
	p2.replicate(t, p1, 2)
	p1.resign()
	c2 := newCoordinator(t, p2, 2, nil)
	require.Equal(t, wantCommitted, offsetsOf(c2, "tenant-a", "g"))
	require.Equal(t, wantPending, pendingOf(c2, "tenant-a", "g"))
	_, err := c2.StableOffsets("tenant-a", "g", []TopicPartition{{"id-1", 1}})
	require.ErrorIs(t, err, ErrUnstableOffset, "still unstable after the takeover")
	require.ErrorIs(t, c2.TxnCommitOffsets(ctx, now, "tenant-a", "g", 8, 3, []OffsetCommit{commit("id-2", "x", 0, 9)}), ErrProducerFenced, "the fence is rebuilt")
	require.ErrorIs(t, c2.WriteTxnMarker(ctx, "tenant-a", "g", 8, 5, 5, true, false), ErrCoordinatorFenced, "so is the coordinator epoch")

	require.ErrorIs(t, c1.WriteTxnMarker(ctx, "tenant-a", "g", 7, 1, 6, true, false), errNotLeader, "the old coordinator writes nothing")
	require.NoError(t, c2.WriteTxnMarker(ctx, "tenant-a", "g", 7, 1, 6, true, false))
	wantCommitted = map[TopicPartition]int64{{"id-1", 0}: 12, {"id-1", 1}: 4, {"id-2", 0}: 5}
	require.Equal(t, wantCommitted, offsetsOf(c2, "tenant-a", "g"))
	require.Empty(t, c2.PendingOffsets("tenant-a", "g"))

	p3 := openPartition(t, -1)
	p3.replicate(t, p2, 3)
	c3 := newCoordinator(t, p3, 3, nil)
	require.Equal(t, wantCommitted, offsetsOf(c3, "tenant-a", "g"))
	require.Empty(t, c3.PendingOffsets("tenant-a", "g"))
	require.ErrorIs(t, c3.TxnCommitOffsets(ctx, now, "tenant-a", "g", 7, 0, []OffsetCommit{commit("id-1", "orders", 0, 99)}), ErrProducerFenced)
}

// TestTxnOffsetsLateCommitRacingMarker: a TxnCommitOffsets racing with
// its transaction's marker either lands before it (and the commit marker
// commits it) or is refused as fenced; it is never answered as written
// and then lost, nor left pending after its transaction ended (KIP-890's
// defence for offsets: the check and the append are atomic against the
// marker). Rounds of concurrent calls, one transaction (epoch) each; a
// rebuild from the log agrees.
func TestTxnOffsetsLateCommitRacingMarker(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	ctx, now, p, c := s.ctx, s.now, s.p, s.c
	want := int64(-1)
	refused := 0
	for round := range int16(100) {
		var txnErr, markerErr error
		var wg sync.WaitGroup
		wg.Go(func() {
			txnErr = c.TxnCommitOffsets(ctx, now, "tenant-a", "g", 7, round, []OffsetCommit{commit("id-1", "orders", 0, int64(round))})
		})
		wg.Go(func() { markerErr = c.WriteTxnMarker(ctx, "tenant-a", "g", 7, round+1, 1, true, false) })
		wg.Wait()
		require.NoError(t, markerErr)
		if txnErr != nil {
			require.ErrorIs(t, txnErr, ErrProducerFenced)
			refused++
		} else {
			want = int64(round)
		}
		require.Empty(t, c.PendingOffsets("tenant-a", "g"), "round %d: nothing pending after the marker", round)
		if want >= 0 {
			require.Equal(t, want, offsetsOf(c, "tenant-a", "g")[TopicPartition{"id-1", 0}], "round %d: an accepted commit is committed", round)
		}
	}
	t.Logf("%d of 100 late commits refused", refused)
	p2 := openPartition(t, -1)
	p2.replicate(t, p, 2)
	c2 := newCoordinator(t, p2, 2, nil)
	require.Equal(t, offsetsOf(c, "tenant-a", "g"), offsetsOf(c2, "tenant-a", "g"))
	require.Empty(t, c2.PendingOffsets("tenant-a", "g"))
}

// TestTxnOffsetsApplyInLogOrder: a plain commit later in the log than a
// transaction's offset wins over it when the transaction commits (as
// Kafka's), and a marker ends only what its producer wrote before it.
func TestTxnOffsetsApplyInLogOrder(t *testing.T) {
	t.Parallel()
	st := newState()
	gk, tp := GroupKey{"tenant-a", "g"}, TopicPartition{"id-1", 0}
	apply := func(off int64, r groupRecord) { st.apply(off, r.key, r.value) }
	apply(5, txnOffsetRecord("tenant-a", "g", 7, 0, commit("id-1", "orders", 0, 50), time.Now()))
	apply(6, offsetRecord("tenant-a", "g", commit("id-1", "orders", 0, 60), time.Now()))
	apply(7, txnMarkerRecord("tenant-a", "g", 7, 1, 1, true, false, time.Now()))
	require.EqualValues(t, 60, st.groups[gk].offsets[tp].Offset.GetOffset())
	require.Empty(t, st.groups[gk].pending)

	apply(9, txnOffsetRecord("tenant-a", "g", 7, 1, commit("id-1", "orders", 0, 90), time.Now()))
	apply(8, txnMarkerRecord("tenant-a", "g", 7, 2, 1, true, false, time.Now())) // applied after a later record
	require.EqualValues(t, 60, st.groups[gk].offsets[tp].Offset.GetOffset(), "the marker is older in the log")
	require.Contains(t, st.groups[gk].pending, int64(7))
}

// TestTxnOffsetsRecordsOnDisk: what a transactional commit and a marker
// write to the offsets partition: ordinary records (no producer id, not
// transactional), one per partition for the offsets, keyed by tenant,
// group and producer id.
func TestTxnOffsetsRecordsOnDisk(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	ctx, now, p, c := s.ctx, s.now, s.p, s.c
	require.NoError(t, c.TxnCommitOffsets(ctx, now, "tenant-a", "g", 7, 2, []OffsetCommit{commit("id-1", "orders", 1, 5)}))
	require.NoError(t, c.WriteTxnMarker(ctx, "tenant-a", "g", 7, 3, 9, true, false))
	type rec struct {
		key   *coordinatorv1.GroupRecordKey
		value *coordinatorv1.GroupRecordValue
	}
	var got []rec
	data, err := p.Read(0, 1<<20)
	require.NoError(t, err)
	for len(data) > 0 {
		b, rest, err := record.ReadBatch(data)
		require.NoError(t, err)
		data = rest
		h := b.Header()
		require.EqualValues(t, -1, h.ProducerID)
		require.False(t, h.Attributes.Transactional())
		require.False(t, h.Attributes.Control())
		require.NoError(t, eachGroupRecord(b, func(_ int64, k *coordinatorv1.GroupRecordKey, v *coordinatorv1.GroupRecordValue) {
			got = append(got, rec{k, v})
		}))
	}
	require.Len(t, got, 2)
	o := got[0]
	require.Equal(t, "tenant-a", o.key.GetTenantId())
	require.Equal(t, "g", o.key.GetGroup())
	require.EqualValues(t, 7, o.key.GetTxnOffset().GetProducerId())
	require.Equal(t, "id-1", o.key.GetTxnOffset().GetOffset().GetTopicId())
	require.Equal(t, "orders", o.key.GetTxnOffset().GetOffset().GetTopic())
	require.EqualValues(t, 1, o.key.GetTxnOffset().GetOffset().GetPartition())
	require.EqualValues(t, 5, o.value.GetOffset().GetOffset())
	require.EqualValues(t, 2, o.value.GetProducerEpoch())
	require.Equal(t, now.UnixMilli(), o.value.GetCommitTimeMs())
	m := got[1]
	require.EqualValues(t, 7, m.key.GetTxnMarker().GetProducerId())
	require.EqualValues(t, 3, m.value.GetProducerEpoch())
	require.EqualValues(t, 9, m.value.GetCoordinatorEpoch())
	require.True(t, m.value.GetCommit())
}
