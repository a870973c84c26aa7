package broker

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

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
// offset and epoch; a retry of it is answered as a duplicate.
func TestBrokerProduceChecksEachBatchOnce(t *testing.T) {
	t.Parallel()
	pb := setupProduceBench(t)
	req := batchesRequest(idempotentBatch(t, 3, 0)).Msg
	vs, err := produceBatches(req, 1<<20, time.Now())
	require.NoError(t, err)
	require.Len(t, vs, 1)
	b := vs[0].Batch()
	copy(b[12:16], []byte{0, 0, 0, 0}) // the CRC field

	res, err := pb.p.Produce(pb.ctx, vs, sluicev1.Acks_ACKS_ALL, 10*time.Second, nil)
	require.NoError(t, err, "nothing after produceBatches checks the CRC again")
	require.EqualValues(t, 0, res.Base)
	data, err := pb.p.Log().Read(0, 1<<20)
	require.NoError(t, err)
	got, rest, err := record.ReadBatch(data)
	require.NoError(t, err, "the leader stamps a fresh CRC with the offset and epoch")
	require.Empty(t, rest)
	require.EqualValues(t, 1, got.LeaderEpoch())
	retry, err := pb.svc.Produce(pb.ctx, batchesRequest(idempotentBatch(t, 3, 0)))
	require.NoError(t, err)
	require.True(t, retry.Msg.GetDuplicate(), "the producer state took the batch from its header")
	require.EqualValues(t, 0, retry.Msg.GetBaseOffset())
	require.EqualValues(t, 3, pb.p.Log().LEO())
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
		require.EqualValues(t, 0, pb.p.Log().LEO(), "%s: nothing written", tt.name)
	}
	_, err = pb.svc.Produce(pb.ctx, batchesRequest(good))
	require.NoError(t, err)
	require.EqualValues(t, 3, pb.p.Log().LEO())

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

// TestBrokerProduceRefusesTransactionalAndControlBatches: a client's batch
// with the transactional attribute, or a control batch (a transaction
// marker), is refused with InvalidArgument and nothing is written, alone
// or after a good batch in the same request.
func TestBrokerProduceRefusesTransactionalAndControlBatches(t *testing.T) {
	t.Parallel()
	pb := setupProduceBench(t)
	with := func(a record.Attributes) []byte {
		b, err := record.AppendBatch(nil, record.BatchHeader{Attributes: a, FirstTimestamp: time.Now().UnixMilli(), ProducerID: 7, ProducerEpoch: 0, BaseSequence: 0}, benchRecords(2, 100))
		require.NoError(t, err)
		return b
	}
	for _, tt := range []struct {
		name, msg string
		data      []byte
	}{
		{"transactional", "batch 1 has the transactional attribute", with(record.AttrTransactional)},
		{"control", "batch 1 is a control batch", with(record.AttrControl)},
		{"transactional control", "control batch", with(record.AttrTransactional | record.AttrControl)},
		{"after a good batch", "batch 2 has the transactional attribute", append(plainBatch(t, 2), with(record.AttrTransactional)...)},
	} {
		_, err := pb.svc.Produce(pb.ctx, batchesRequest(tt.data))
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%s: %v", tt.name, err)
		require.ErrorContains(t, err, tt.msg, tt.name)
		require.EqualValues(t, 0, pb.p.Log().LEO(), "%s: nothing written", tt.name)
	}
	_, err := pb.svc.Produce(pb.ctx, batchesRequest(idempotentBatch(t, 3, 0)))
	require.NoError(t, err)
	require.EqualValues(t, 3, pb.p.Log().LEO())
}
