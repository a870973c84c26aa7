package broker

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/log"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/compress"
	"github.com/sluicemq/sluice/record"
)

// idempotentBatch is one batch of n records from producer 7, epoch 0,
// starting at sequence seq.
func idempotentBatch(t *testing.T, n int, seq int32) []byte {
	t.Helper()
	recs := benchRecords(n, 100)
	b, err := record.AppendBatch(nil, record.BatchHeader{FirstTimestamp: time.Now().UnixMilli(), ProducerID: 7, ProducerEpoch: 0, BaseSequence: seq}, recs)
	require.NoError(t, err)
	return b
}

// corruptValue flips a byte of the last record, so the CRC no longer
// matches.
func corruptValue(b []byte) []byte {
	c := append([]byte{}, b...)
	c[len(c)-2] ^= 0xff
	return c
}

func batchesRequest(data []byte) *connect.Request[sluicev1.ProduceRequest] {
	return connect.NewRequest(&sluicev1.ProduceRequest{Topic: "bench", Acks: sluicev1.Acks_ACKS_ALL,
		Payload: &sluicev1.ProduceRequest_Batches{Batches: &sluicev1.RecordBatches{Data: data}}})
}

// TestBrokerProduceChecksEachBatchOnce: the produce handler's check
// (produceBatches) is the only CRC check a batch gets on the leader. After
// it, the batch's CRC field is wiped: the idempotence check, the log's
// append and the producer state take the batch all the same (before, the
// log's Append checked the CRC again, and the producer state a third
// time), and the log holds it with the CRC the leader stamps with the
// offset and epoch.
func TestBrokerProduceChecksEachBatchOnce(t *testing.T) {
	t.Parallel()
	pb := setupProduceBench(t)
	req := batchesRequest(idempotentBatch(t, 3, 0)).Msg
	vs, err := produceBatches(req, 1<<20, time.Now())
	require.NoError(t, err)
	require.Len(t, vs, 1)
	b := vs[0].Batch()
	copy(b[12:16], []byte{0, 0, 0, 0}) // the CRC field

	res, err := pb.p.produce(pb.ctx, vs, sluicev1.Acks_ACKS_ALL, 10*time.Second, nil)
	require.NoError(t, err, "nothing after produceBatches checks the CRC again")
	require.EqualValues(t, 0, res.base)
	data, err := pb.p.log.Read(0, 1<<20)
	require.NoError(t, err)
	got, rest, err := record.ReadBatch(data)
	require.NoError(t, err, "the leader stamps a fresh CRC with the offset and epoch")
	require.Empty(t, rest)
	require.EqualValues(t, 1, got.LeaderEpoch())
	pb.p.mu.Lock()
	e, ok := pb.p.pstate.Producer(7)
	pb.p.mu.Unlock()
	require.True(t, ok, "the producer state took the batch from its header")
	require.EqualValues(t, 2, e.Batches[len(e.Batches)-1].LastSequence)
}

// TestBrokerProduceRefusesCorruptBatches: corrupt batches are refused
// with InvalidArgument before anything is written — a CRC mismatch, a
// request whose second batch is corrupt (the first is not written
// either), a compressed batch whose records are malformed inside an
// intact CRC — by the leader, and by a broker that does not lead the
// partition before it would forward the request.
func TestBrokerProduceRefusesCorruptBatches(t *testing.T) {
	t.Parallel()
	pb := setupProduceBench(t)
	good := idempotentBatch(t, 3, 0)

	malformed := append([]byte{}, good...)
	malformed[len(malformed)-1] = 0x7f           // the last record's header count: past the end
	record.Batch(malformed).SetProducer(7, 0, 0) // a CRC that matches the damage
	zipped, err := compress.CompressBatch(nil, record.Batch(malformed), record.CodecZstd)
	require.NoError(t, err)
	_, _, err = record.ReadBatch(zipped)
	require.NoError(t, err, "the compressed batch itself is intact")

	for _, tt := range []struct {
		name, msg string
		data      []byte
	}{
		{"crc mismatch", "crc", corruptValue(good)},
		{"second batch corrupt", "batch 2", append(append([]byte{}, good...), corruptValue(idempotentBatch(t, 2, 3))...)},
		{"truncated", "truncated", good[:len(good)-5]},
		{"compressed, malformed records", "codec 4", zipped},
	} {
		_, err := pb.svc.Produce(pb.ctx, batchesRequest(tt.data))
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%s: %v", tt.name, err)
		require.ErrorContains(t, err, tt.msg, tt.name)
		require.EqualValues(t, 0, pb.p.log.LEO(), "%s: nothing written", tt.name)
	}
	_, err = pb.svc.Produce(pb.ctx, batchesRequest(good))
	require.NoError(t, err)
	require.EqualValues(t, 3, pb.p.log.LEO())

	// A broker that follows the partition checks before forwarding: the
	// corrupt batch never reaches the leader (broker 2 is not even
	// reachable here, so a forward would answer Unavailable).
	pm := partMeta{partition: 0, replicas: []int32{1, 2}, leader: 2, leaderEpoch: 2, isr: []int32{1, 2}}
	m := emptyMeta()
	m.loaded = true
	m.addTopic(&topicMeta{tenantID: "t1", id: "topic-bench", name: "bench", config: topicConfig{minISR: 1, maxMessageBytes: 1 << 20}, partitions: []partMeta{pm}})
	pb.svc.b.meta.Store(m)
	_, err = pb.svc.Produce(pb.ctx, batchesRequest(corruptValue(good)))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "crc")
}

// TestBrokerFollowerRefusesCorruptBatches: a follower checks the leader's
// batches once, in the log's AppendFollower, and refuses a fetch answer
// with a corrupt batch whole: nothing appended, producer state unchanged;
// the intact answer is then appended.
func TestBrokerFollowerRefusesCorruptBatches(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestBroker(t), false)
	good := idempotentBatch(t, 2, 0)
	record.Batch(good).SetLeader(10, 3)
	answer := append(batchesOf(t, 10+2, 1, 3), []byte{}...)
	answer = append(append([]byte{}, good...), answer...)

	bad := append(append([]byte{}, good...), corruptValue(batchesOf(t, 12, 1, 3))...)
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

// TestBrokerProducerStateReadsOnlyHeaders: applying appended batches to
// the producer state (leader and follower) reads their headers and does
// not check their CRC a second time: the log has checked them.
func TestBrokerProducerStateReadsOnlyHeaders(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestBroker(t), false)
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
