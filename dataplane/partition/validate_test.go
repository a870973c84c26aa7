package partition

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/log"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
)

// idempotentBatch is one batch of n records from producer 7, epoch 0,
// starting at sequence seq.
func idempotentBatch(t *testing.T, n int, seq int32) []byte {
	t.Helper()
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{OffsetDelta: int32(i), Value: []byte("value")}
	}
	b, err := record.AppendBatch(nil, record.BatchHeader{FirstTimestamp: time.Now().UnixMilli(), ProducerID: 7, ProducerEpoch: 0, BaseSequence: seq}, recs)
	require.NoError(t, err)
	return b
}

// corrupt flips a byte of the last record, so the CRC no longer matches.
func corrupt(b []byte) []byte {
	c := append([]byte{}, b...)
	c[len(c)-2] ^= 0xff
	return c
}

// TestPartitionFollowerRefusesCorruptBatches: a follower checks the leader's
// batches once, in the log's AppendFollower, and refuses a fetch answer
// with a corrupt batch whole: nothing appended, producer state unchanged;
// the intact answer is then appended.
func TestPartitionFollowerRefusesCorruptBatches(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestHost(t), false)
	good := idempotentBatch(t, 2, 0)
	record.Batch(good).SetLeader(10, 3)
	answer := append(batchesOf(t, 10+2, 1, 3), []byte{}...)
	answer = append(append([]byte{}, good...), answer...)

	bad := append(append([]byte{}, good...), corrupt(batchesOf(t, 12, 1, 3))...)
	err := applyNext(p, &sluicev1.FetchReplicaResponse{Batches: bad, HighWatermark: 13})
	require.ErrorIs(t, err, log.ErrInvalidBatch)
	require.ErrorIs(t, err, record.ErrCorrupt)
	require.EqualValues(t, 10, p.log.LEO(), "nothing appended, not even the intact first batch")
	p.mu.Lock()
	_, ok := p.pstate.Producer(7)
	p.mu.Unlock()
	require.False(t, ok)

	require.NoError(t, applyNext(p, &sluicev1.FetchReplicaResponse{Batches: answer, HighWatermark: 13}))
	require.EqualValues(t, 13, p.log.LEO())
	p.mu.Lock()
	e, ok := p.pstate.Producer(7)
	p.mu.Unlock()
	require.True(t, ok)
	require.EqualValues(t, 1, e.Batches[len(e.Batches)-1].LastSequence)
}

// TestPartitionProducerStateReadsOnlyHeaders: applying appended batches to
// the producer state (leader and follower) reads their headers and does
// not check their CRC a second time: the log has checked them.
func TestPartitionProducerStateReadsOnlyHeaders(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestHost(t), false)
	b := idempotentBatch(t, 4, 0)
	record.Batch(b).SetLeader(10, 3)
	copy(b[12:16], []byte{0, 0, 0, 0}) // the CRC field: a check would refuse the batch
	p.mu.Lock()
	p.applyAppendedLocked(append(b, batchesOf(t, 14, 1, 3)...))
	e, ok := p.pstate.Producer(7)
	off := p.pstate.Offset()
	p.mu.Unlock()
	require.True(t, ok)
	require.EqualValues(t, 3, e.Batches[len(e.Batches)-1].LastSequence)
	require.EqualValues(t, 15, off, "both batches applied")
}
