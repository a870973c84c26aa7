package broker

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/cluster"
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
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(toConnect(err)), "%s: %v", tt.name, err)
		require.ErrorContains(t, err, tt.msg, tt.name)
		require.EqualValues(t, 0, pb.p.Log().LEO(), "%s: nothing written", tt.name)
	}
	_, err = pb.svc.Produce(pb.ctx, batchesRequest(good))
	require.NoError(t, err)
	require.EqualValues(t, 3, pb.p.Log().LEO())

	// A broker that follows the partition checks before forwarding: the
	// corrupt batch never reaches the leader (broker 2 is not even
	// reachable here, so a forward would answer Unavailable).
	pm := cluster.Partition{Partition: 0, Replicas: []int32{1, 2}, Leader: 2, LeaderEpoch: 2, ISR: []int32{1, 2}}
	m := cluster.EmptyView()
	m.Loaded = true
	m.AddTopic(&cluster.Topic{TenantID: "t1", ID: "topic-bench", Name: "bench", Config: cluster.TopicConfig{MinISR: 1, MaxMessageBytes: 1 << 20}, Partitions: []cluster.Partition{pm}})
	pb.b.meta.Store(m)
	_, err = pb.svc.Produce(pb.ctx, batchesRequest(corruptValue(good)))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(toConnect(err)), "%v", err)
	require.ErrorContains(t, err, "crc")
}

// TestBrokerProduceRefusesTransactionalAndControlBatches: a client's
// control batch (a transaction marker) is always refused with
// InvalidArgument, and so is a transactional batch in a request without a
// transactional id, mixed with non-transactional ones, or of several
// producers; nothing of the request is written, alone or after a good
// batch in the same request.
func TestBrokerProduceRefusesTransactionalAndControlBatches(t *testing.T) {
	t.Parallel()
	pb := setupProduceBench(t)
	with := func(a record.Attributes, pid int64, epoch int16) []byte {
		b, err := record.AppendBatch(nil, record.BatchHeader{Attributes: a, FirstTimestamp: time.Now().UnixMilli(), ProducerID: pid, ProducerEpoch: epoch, BaseSequence: 0}, benchRecords(2, 100))
		require.NoError(t, err)
		return b
	}
	txn := with(record.AttrTransactional, 7, 0)
	for _, tt := range []struct {
		name, txnID, msg string
		data             []byte
	}{
		{"transactional without id", "", "batch 1 has the transactional attribute: transactional_id must be set", txn},
		{"control", "", "batch 1 is a control batch", with(record.AttrControl, 7, 0)},
		{"control with id", "tx", "batch 1 is a control batch", with(record.AttrControl, 7, 0)},
		{"transactional control", "tx", "control batch", with(record.AttrTransactional|record.AttrControl, 7, 0)},
		{"after a good batch", "", "batch 2 has the transactional attribute: transactional_id must be set", append(plainBatch(t, 2), txn...)},
		{"after a plain batch", "tx", "batch 2 is transactional, the batches before it are not", append(plainBatch(t, 2), txn...)},
		{"before a plain batch", "tx", "batch 2 is not transactional", append(append([]byte{}, txn...), plainBatch(t, 2)...)},
		{"two producers", "tx", "batch 2 is of producer 8 epoch 0", append(append([]byte{}, txn...), with(record.AttrTransactional, 8, 0)...)},
		{"two epochs", "tx", "batch 2 is of producer 7 epoch 1", append(append([]byte{}, txn...), with(record.AttrTransactional, 7, 1)...)},
		{"no producer", "tx", "without a producer id", with(record.AttrTransactional, -1, -1)},
	} {
		req := batchesRequest(tt.data)
		req.Msg.TransactionalId = tt.txnID
		_, err := pb.svc.Produce(pb.ctx, req)
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(toConnect(err)), "%s: %v", tt.name, err)
		require.ErrorContains(t, err, tt.msg, tt.name)
		require.EqualValues(t, 0, pb.p.Log().LEO(), "%s: nothing written", tt.name)
		many := connect.NewRequest(&sluicev1.ProduceManyRequest{TransactionalId: tt.txnID, Partitions: []*sluicev1.ProducePartition{
			{Topic: "bench", Partition: 0, Batches: &sluicev1.RecordBatches{Data: tt.data}}}})
		res, err := pb.svc.ProduceMany(pb.ctx, many)
		require.NoError(t, err)
		require.Equal(t, int32(connect.CodeInvalidArgument), res.Msg.GetResults()[0].GetError().GetCode(), tt.name)
		require.Contains(t, res.Msg.GetResults()[0].GetError().GetMessage(), tt.msg, tt.name)
		require.EqualValues(t, 0, pb.p.Log().LEO(), "%s: nothing written", tt.name)
	}
	_, err := pb.svc.Produce(pb.ctx, batchesRequest(idempotentBatch(t, 3, 0)))
	require.NoError(t, err)
	require.EqualValues(t, 3, pb.p.Log().LEO())
}
