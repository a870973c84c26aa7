package records

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
)

func TestRecordsEncodeRecords(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_700_000_000_000)
	bs, err := produceBatches(RecordPayload(RecordSlice{
		{Key: []byte("k1"), Value: []byte("v1"), Headers: []Header{{Key: "h", Value: []byte("x")}}},
		{Value: []byte("v2"), TimestampMs: 1_600_000_000_000},
	}), 1<<20, now)
	require.NoError(t, err)
	require.Len(t, bs, 1)
	recs := decode(t, bs[0].Batch())
	require.Len(t, recs, 2)
	require.Equal(t, "k1", string(recs[0].key))
	require.Equal(t, "v1", string(recs[0].value))
	require.Equal(t, now.UnixMilli(), recs[0].ts, "a zero timestamp takes the broker's time")
	require.Equal(t, "h", string(recs[0].headers[0].Key))
	require.Nil(t, recs[1].key)
	require.Equal(t, int64(1_600_000_000_000), recs[1].ts)
	require.EqualValues(t, 1, recs[1].offsetDelta)
}

func TestRecordsProduceBatchesValidation(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tt := range []struct {
		name string
		pl   Payload
		max  int32
		msg  string
	}{
		{"no payload", Payload{}, 1 << 20, "payload"},
		{"empty records", RecordPayload(RecordSlice{}), 1 << 20, "records: must not be empty"},
		{"nil records", RecordPayload(nil), 1 << 20, "records: must not be empty"},
		{"too big", RecordPayload(RecordSlice{{Value: make([]byte, 2000)}}), 1000, "max.message.bytes"},
		{"garbage batch", BatchPayload([]byte("garbage")), 1 << 20, "batches"},
		{"empty batches", BatchPayload(nil), 1 << 20, "batches: must not be empty"},
	} {
		_, err := produceBatches(tt.pl, tt.max, now)
		require.Error(t, err, tt.name)
		require.Equal(t, connect.CodeInvalidArgument, codeOf(err), tt.name)
		require.Contains(t, err.Error(), tt.msg, tt.name)
	}
	_, err := produceBatches(RecordPayload(make(RecordSlice, maxRecords+1)), 1<<30, now)
	require.ErrorIs(t, err, derr.RecordListTooLarge)
	require.EqualError(t, err, "records: at most 100000 per request; got 100001")

	// Raw batches pass through, split into whole batches.
	b1, err := record.AppendBatch(nil, record.BatchHeader{}, []record.Record{{Value: []byte("a")}})
	require.NoError(t, err)
	b2, err := record.AppendBatch(nil, record.BatchHeader{}, []record.Record{{Value: []byte("b")}, {OffsetDelta: 1, Value: []byte("c")}})
	require.NoError(t, err)
	bs, err := produceBatches(BatchPayload(append(append([]byte{}, b1...), b2...)), 1<<20, now)
	require.NoError(t, err)
	require.Len(t, bs, 2)
	require.Equal(t, record.Batch(b1), bs[0].Batch())
	require.Equal(t, record.Batch(b2), bs[1].Batch())

	// A producer's batch cannot claim the leader's timestamp type.
	record.Batch(b2).SetLogAppendTime(now.UnixMilli())
	_, err = produceBatches(BatchPayload(append(append([]byte{}, b1...), b2...)), 1<<20, now)
	require.ErrorIs(t, err, derr.InvalidRecord)
	require.EqualError(t, err, "batches: batch 2 is marked LogAppendTime: only a partition's leader sets the timestamp type")
}

// protoList is a RecordList read in place from the API's records, as the
// Connect adapter reads them.
type protoList []*sluicev1.Record

func (l *protoList) Len() int { return len(*l) }
func (l *protoList) Record(i int) (int64, []byte, []byte, int) {
	r := (*l)[i]
	return r.GetTimestampMs(), r.GetKey(), r.GetValue(), len(r.GetHeaders())
}
func (l *protoList) Header(i, j int) (string, []byte) {
	h := (*l)[i].GetHeaders()[j]
	return h.GetKey(), h.GetValue()
}

// TestRecordsEncodeRecordsAllocations: encoding a records payload takes a
// fixed number of allocations, however many records and headers it has
// (the batch is sized up front and never grows), and the bound holds for
// the worst case of every varint.
func TestRecordsEncodeRecordsAllocations(t *testing.T) {
	now := time.Now()
	list := func(n int) *protoList {
		recs := make(protoList, n)
		for i := range recs {
			recs[i] = &sluicev1.Record{Key: []byte("key"), Value: make([]byte, 100), TimestampMs: int64(1 + i*1_000_000_000_000),
				Headers: []*sluicev1.Header{{Key: "h1", Value: []byte("v")}, {Key: "h2"}}}
		}
		return &recs
	}
	var allocs []float64
	for _, n := range []int{1, 10, 1000} {
		pl := RecordPayload(list(n))
		allocs = append(allocs, testing.AllocsPerRun(20, func() {
			bs, err := produceBatches(pl, 1<<30, now)
			if err != nil || len(bs) != 1 {
				t.Fatal(err)
			}
			if b := bs[0].Batch(); cap(b) < len(b) {
				t.Fatal("impossible")
			}
		}))
		bs, err := produceBatches(pl, 1<<30, now)
		require.NoError(t, err)
		recs := decode(t, bs[0].Batch())
		require.Len(t, recs, n)
		require.Equal(t, "h2", string(recs[n-1].headers[1].Key))
	}
	t.Logf("allocations for 1, 10, 1000 records: %v", allocs)
	require.Equal(t, allocs[0], allocs[2], "allocations per request do not grow with records: %v", allocs)
	require.LessOrEqual(t, allocs[0], 6.0, "%v", allocs)
}

// TestRecordsProduceChecksEachBatchOnce: the produce's check
// (produceBatches) is the only CRC check a batch gets on the leader. After
// it, the batch's CRC field is wiped: the idempotence check, the log's
// append and the producer state take the batch all the same (before, the
// log's Append checked the CRC again, and the producer state a third
// time), and the log holds it with the CRC the leader stamps with the
// offset and epoch; a retry of it is answered as a duplicate.
func TestRecordsProduceChecksEachBatchOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	vs, err := produceBatches(BatchPayload(batch(t, 3, 7, 0, 0)), 1<<20, time.Now())
	require.NoError(t, err)
	require.Len(t, vs, 1)
	b := vs[0].Batch()
	copy(b[12:16], []byte{0, 0, 0, 0}) // the CRC field

	res, err := f.p.Produce(f.ctx, vs, sluicev1.Acks_ACKS_ALL, 10*time.Second, nil)
	require.NoError(t, err, "nothing after produceBatches checks the CRC again")
	require.EqualValues(t, 0, res.Base)
	data, err := f.p.Log().Read(0, 1<<20)
	require.NoError(t, err)
	got, rest, err := record.ReadBatch(data)
	require.NoError(t, err, "the leader stamps a fresh CRC with the offset and epoch")
	require.Empty(t, rest)
	require.EqualValues(t, 1, got.LeaderEpoch())
	retry, err := f.svc.Produce(f.ctx, ProduceRequest{Topic: "bench", Payload: BatchPayload(batch(t, 3, 7, 0, 0))}, nil)
	require.NoError(t, err)
	require.True(t, retry.Duplicate, "the producer state took the batch from its header")
	require.EqualValues(t, 0, retry.BaseOffset)
	require.EqualValues(t, 3, f.p.Log().LEO())
}

// TestRecordsProduceOptions: acks default to all and the timeout to 30 s,
// capped at 5 minutes; unknown acks and negative timeouts are refused
// with the API's field names.
func TestRecordsProduceOptions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		acks     Acks
		timeout  time.Duration
		wantAcks Acks
		wantWait time.Duration
		err      string
	}{
		{AcksDefault, 0, AcksAll, 30 * time.Second, ""},
		{AcksNone, time.Second, AcksNone, time.Second, ""},
		{AcksLeader, time.Hour, AcksLeader, 5 * time.Minute, ""},
		{9, 0, 0, 0, "acks: unknown value 9"},
		{-1, 0, 0, 0, "acks: unknown value -1"},
		{AcksAll, -time.Millisecond, 0, 0, "timeout_ms: must not be negative"},
	} {
		acks, wait, err := produceOptions(tt.acks, tt.timeout)
		if tt.err != "" {
			require.EqualError(t, err, tt.err)
			require.Equal(t, connect.CodeInvalidArgument, codeOf(err))
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tt.wantAcks, acks)
		require.Equal(t, tt.wantWait, wait)
	}
	require.Equal(t, "all", AcksAll.String())
	require.Equal(t, "leader", AcksLeader.String())
	require.Equal(t, "none", AcksNone.String())
}

// TestRecordsProduceAdmitsOnLeaderOnly: a produce is checked whole before
// the service looks at the leader (a corrupt batch is refused by a broker
// that does not lead); one for a partition another broker leads is a
// NotLedHereError naming it, charged nothing (the leader admits it when
// it is forwarded there); on the leader it is admitted once and settled
// with its answer, a duplicate as a duplicate. A produce refused by the
// quota writes nothing.
func TestRecordsProduceAdmitsOnLeaderOnly(t *testing.T) {
	t.Parallel()
	f := setup(t)
	good := batch(t, 3, 7, 0, 0)
	res, err := f.svc.Produce(f.ctx, ProduceRequest{Topic: "bench", Payload: BatchPayload(good)}, nil)
	require.NoError(t, err)
	require.Equal(t, ProduceResult{BaseOffset: 0, LogStartOffset: 0, LogAppendTime: -1}, res)
	n := len(good)
	res, err = f.svc.Produce(f.ctx, ProduceRequest{Topic: "bench", Payload: BatchPayload(batch(t, 3, 7, 0, 0))}, nil)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, []string{
		fmt.Sprintf("admit %d", n), fmt.Sprintf("settle 1 batches %d bytes duplicate=false err=false", n),
		fmt.Sprintf("admit %d", n), fmt.Sprintf("settle 1 batches %d bytes duplicate=true err=false", n),
	}, f.quotas.take())

	f.quotas.admitErr = derr.New(derr.ResourceExhausted, "over the quota")
	one := batch(t, 1, -1, 0, 0)
	_, err = f.svc.Produce(f.ctx, ProduceRequest{Topic: "bench", Payload: BatchPayload(one)}, nil)
	require.ErrorIs(t, err, derr.ResourceExhausted)
	require.EqualValues(t, 3, f.p.Log().LEO(), "nothing written")
	require.Equal(t, []string{fmt.Sprintf("admit %d", len(one))}, f.quotas.take())
	f.quotas.admitErr = nil

	// Broker 2 leads: checked, then sent on uncharged.
	f.view.Store(benchView(2, 1<<20))
	_, err = f.svc.Produce(f.ctx, ProduceRequest{Topic: "bench", Payload: BatchPayload(corrupt(good))}, nil)
	require.Equal(t, connect.CodeInvalidArgument, codeOf(err), "%v", err)
	require.ErrorContains(t, err, "crc")
	_, err = f.svc.Produce(f.ctx, ProduceRequest{Topic: "bench", Acks: 9, Payload: BatchPayload(good)}, nil)
	require.EqualError(t, err, "acks: unknown value 9")
	_, err = f.svc.Produce(f.ctx, ProduceRequest{Topic: "bench", Payload: BatchPayload(batch(t, 1, -1, 0, 0))}, nil)
	var nl *partition.NotLeaderError
	require.ErrorAs(t, err, &nl)
	require.Equal(t, partition.NotLeaderError{TopicID: benchTopicID, Partition: 0, Leader: 2, Epoch: 1, Address: "b2:9092"}, *nl)
	require.Equal(t, connect.CodeFailedPrecondition, codeOf(err))
	require.Equal(t, nl.Error(), err.Error())
	leader, ok := LeaderElsewhere(err)
	require.True(t, ok)
	require.EqualValues(t, 2, leader)
	require.Empty(t, f.quotas.take(), "nothing charged for a request another broker leads")
	require.EqualValues(t, 3, f.p.Log().LEO())

	// Named the leader but without a replica (not taken over yet): not
	// forwarded to itself.
	f.view.Store(benchView(1, 1<<20))
	f.svc.d.Replica = func(string, int32) *partition.Replica { return nil }
	_, err = f.svc.Produce(f.ctx, ProduceRequest{Topic: "bench", Payload: BatchPayload(batch(t, 1, -1, 0, 0))}, nil)
	require.ErrorAs(t, err, &nl)
	require.True(t, nl.Self)
	_, ok = LeaderElsewhere(err)
	require.False(t, ok)
}

// TestRecordsLeaderElsewhere: only the service's own NotLedHereError is
// a cue to forward, never a replica's NotLeader (a request it started).
func TestRecordsLeaderElsewhere(t *testing.T) {
	t.Parallel()
	other := &partition.NotLeaderError{Leader: 2, Epoch: 3}
	for _, tt := range []struct {
		err    error
		leader int32
		ok     bool
	}{
		{&NotLedHereError{NotLeader: other}, 2, true},
		{errors.Join(errors.New("x"), &NotLedHereError{NotLeader: other}), 2, true},
		{other, -1, false},
		{&NotLedHereError{NotLeader: &partition.NotLeaderError{Leader: -1}}, -1, false},
		{&NotLedHereError{NotLeader: &partition.NotLeaderError{Leader: 1, Self: true}}, -1, false},
		{nil, -1, false},
	} {
		leader, ok := LeaderElsewhere(tt.err)
		require.Equal(t, tt.ok, ok, "%v", tt.err)
		require.Equal(t, tt.leader, leader, "%v", tt.err)
	}
}

// TestRecordsProduceTransactional: transactional batches are verified
// with their coordinator (once per producer epoch) before they are
// written; a request mixing them with others is refused unwritten.
func TestRecordsProduceTransactional(t *testing.T) {
	t.Parallel()
	f := setup(t)
	txn := batch(t, 2, 7, 0, record.AttrTransactional)
	_, err := f.svc.Produce(f.ctx, ProduceRequest{Topic: "bench", TransactionalID: "tx", Payload: BatchPayload(txn)}, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, f.verified.Load())
	// The transaction is open: its records are above the LSO, so a
	// read_committed max-timestamp lookup finds nothing yet (-1, as
	// Kafka answers a record past what the reader may see).
	for iso, found := range map[IsolationLevel]bool{ReadCommitted: false, ReadUncommitted: true} {
		lo, err := f.svc.ListOffsets(f.ctx, ListOffsetsRequest{Topic: "bench", Spec: MaxTimestamp, Isolation: iso})
		require.NoError(t, err)
		require.Equal(t, found, lo.Offset >= 0, "isolation %d: offset %d", iso, lo.Offset)
	}
	_, err = f.svc.Produce(f.ctx, ProduceRequest{Topic: "bench", TransactionalID: "tx", Payload: BatchPayload(append(batch(t, 1, -1, 0, 0), txn...))}, nil)
	require.EqualError(t, err, "batches: batch 2 is transactional, the batches before it are not: a request is all transactional or not at all")
	require.Equal(t, connect.CodeInvalidArgument, codeOf(err))
	require.EqualValues(t, 2, f.p.Log().LEO())
}
