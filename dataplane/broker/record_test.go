package broker

import (
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/compress"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants"
)

func TestBrokerProduceBatchesFromRecords(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_700_000_000_000)
	req := &sluicev1.ProduceRequest{Payload: &sluicev1.ProduceRequest_Records{Records: &sluicev1.RecordList{Records: []*sluicev1.Record{
		{Key: []byte("k1"), Value: []byte("v1"), Headers: []*sluicev1.Header{{Key: "h", Value: []byte("x")}}},
		{Value: []byte("v2"), TimestampMs: 1_600_000_000_000},
	}}}}
	bs, err := produceBatches(req, 1<<20, now)
	require.NoError(t, err)
	require.Len(t, bs, 1)
	recs, err := decodeRecords(bs[0].Batch(), 0)
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.Equal(t, "k1", string(recs[0].GetKey()))
	require.Equal(t, "v1", string(recs[0].GetValue()))
	require.Equal(t, now.UnixMilli(), recs[0].GetTimestampMs(), "a zero timestamp takes the broker's time")
	require.Equal(t, "h", recs[0].GetHeaders()[0].GetKey())
	require.Nil(t, recs[1].GetKey())
	require.Equal(t, int64(1_600_000_000_000), recs[1].GetTimestampMs())
	require.Equal(t, int64(1), recs[1].GetOffset())
	// Decoding from inside the batch skips earlier records.
	recs, err = decodeRecords(bs[0].Batch(), 1)
	require.NoError(t, err)
	require.Len(t, recs, 1)
}

func TestBrokerProduceBatchesValidation(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tt := range []struct {
		name string
		req  *sluicev1.ProduceRequest
		max  int32
		msg  string
	}{
		{"no payload", &sluicev1.ProduceRequest{}, 1 << 20, "payload"},
		{"empty records", &sluicev1.ProduceRequest{Payload: &sluicev1.ProduceRequest_Records{Records: &sluicev1.RecordList{}}}, 1 << 20, "records: must not be empty"},
		{"too big", &sluicev1.ProduceRequest{Payload: &sluicev1.ProduceRequest_Records{Records: &sluicev1.RecordList{Records: []*sluicev1.Record{{Value: make([]byte, 2000)}}}}}, 1000, "max.message.bytes"},
		{"garbage batch", &sluicev1.ProduceRequest{Payload: &sluicev1.ProduceRequest_Batches{Batches: &sluicev1.RecordBatches{Data: []byte("garbage")}}}, 1 << 20, "batches"},
		{"empty batches", &sluicev1.ProduceRequest{Payload: &sluicev1.ProduceRequest_Batches{Batches: &sluicev1.RecordBatches{}}}, 1 << 20, "batches: must not be empty"},
	} {
		_, err := produceBatches(tt.req, tt.max, now)
		require.Error(t, err, tt.name)
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(toConnect(err)), tt.name)
		require.Contains(t, err.Error(), tt.msg, tt.name)
	}

	// Raw batches pass through, split into whole batches.
	b1, err := record.AppendBatch(nil, record.BatchHeader{}, []record.Record{{Value: []byte("a")}})
	require.NoError(t, err)
	b2, err := record.AppendBatch(nil, record.BatchHeader{}, []record.Record{{Value: []byte("b")}, {OffsetDelta: 1, Value: []byte("c")}})
	require.NoError(t, err)
	bs, err := produceBatches(&sluicev1.ProduceRequest{Payload: &sluicev1.ProduceRequest_Batches{Batches: &sluicev1.RecordBatches{Data: append(append([]byte{}, b1...), b2...)}}}, 1<<20, now)
	require.NoError(t, err)
	require.Len(t, bs, 2)
	require.Equal(t, record.Batch(b1), bs[0].Batch())
	require.Equal(t, record.Batch(b2), bs[1].Batch())
}

// TestBrokerStartingBrokerAnswersUnavailable: a broker that has not
// received its first assignments yet does not know any topic, and says so
// with Unavailable (retry) rather than NotFound (the topic does not exist),
// which clients treat as final; with a view, an unknown topic is NotFound.
func TestBrokerStartingBrokerAnswersUnavailable(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	s := &recordService{b: b}
	ctx := tenants.WithPrincipal(t.Context(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t1"})
	_, _, _, err := s.resolve(ctx, "orders", 0)
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(toConnect(err)), "%v", err)
	require.ErrorContains(t, err, "has not received its assignments yet")
	_, err = s.GetMetadata(ctx, connect.NewRequest(&sluicev1.GetMetadataRequest{Topics: []string{"orders"}}))
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(toConnect(err)), "%v", err)

	b.meta.Store(toClusterMeta(&sluicev1.WatchAssignmentsResponse{MetadataVersion: 3}))
	_, _, _, err = s.resolve(ctx, "orders", 0)
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(toConnect(err)), "%v", err)
	_, err = s.GetMetadata(ctx, connect.NewRequest(&sluicev1.GetMetadataRequest{Topics: []string{"orders"}}))
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(toConnect(err)), "%v", err)
}

// TestBrokerProduceRecordsAllocations: encoding a records payload takes a
// fixed number of allocations, however many records and headers it has
// (the batch is sized up front and never grows), and the bound holds for
// the worst case of every varint.
func TestBrokerProduceRecordsAllocations(t *testing.T) {
	now := time.Now()
	req := func(n int) *sluicev1.ProduceRequest {
		recs := make([]*sluicev1.Record, n)
		for i := range recs {
			recs[i] = &sluicev1.Record{Key: []byte("key"), Value: make([]byte, 100), TimestampMs: int64(1 + i*1_000_000_000_000),
				Headers: []*sluicev1.Header{{Key: "h1", Value: []byte("v")}, {Key: "h2"}}}
		}
		return &sluicev1.ProduceRequest{Payload: &sluicev1.ProduceRequest_Records{Records: &sluicev1.RecordList{Records: recs}}}
	}
	var allocs []float64
	for _, n := range []int{1, 10, 1000} {
		r := req(n)
		allocs = append(allocs, testing.AllocsPerRun(20, func() {
			bs, err := produceBatches(r, 1<<30, now)
			if err != nil || len(bs) != 1 {
				t.Fatal(err)
			}
			if b := bs[0].Batch(); cap(b) < len(b) {
				t.Fatal("impossible")
			}
		}))
		bs, err := produceBatches(r, 1<<30, now)
		require.NoError(t, err)
		recs, err := decodeRecords(bs[0].Batch(), 0)
		require.NoError(t, err)
		require.Len(t, recs, n)
		require.Equal(t, "h2", recs[n-1].GetHeaders()[1].GetKey())
	}
	t.Logf("allocations for 1, 10, 1000 records: %v", allocs)
	require.Equal(t, allocs[0], allocs[2], "allocations per request do not grow with records: %v", allocs)
	require.LessOrEqual(t, allocs[0], 6.0, "%v", allocs)
}

// TestBrokerFetchDecodeRecords: records decoded for a fetch are right
// across uncompressed and compressed batches and headers, do not alias
// the fetched bytes of uncompressed batches (the read's buffer stays the
// caller's), and take allocations that do not grow with the records
// (without headers; header keys are strings, one each).
func TestBrokerFetchDecodeRecords(t *testing.T) { // not parallel: AllocsPerRun
	mk := func(base int64, n int, codec record.Codec) []byte {
		recs := make([]record.Record, n)
		for i := range recs {
			recs[i] = record.Record{OffsetDelta: int32(i), TimestampDelta: int64(i), Key: fmt.Appendf(nil, "k%d", base+int64(i)), Value: fmt.Appendf(nil, "v%d", base+int64(i))}
			if i%2 == 0 {
				recs[i].Headers = []record.RecordHeader{{Key: []byte("h"), Value: []byte("x")}}
			}
		}
		b, err := record.AppendBatch(nil, record.BatchHeader{BaseOffset: base, FirstTimestamp: 1000, LeaderEpoch: 2}, recs)
		require.NoError(t, err)
		if codec != record.CodecNone {
			b, err = compress.CompressBatch(nil, record.Batch(b), codec)
			require.NoError(t, err)
		}
		return b
	}
	data := append(append(mk(0, 3, record.CodecNone), mk(3, 4, record.CodecZstd)...), mk(7, 2, record.CodecNone)...)
	recs, err := decodeRecords(data, 1)
	require.NoError(t, err)
	require.Len(t, recs, 8, "from offset 1")
	for i, r := range recs {
		off := int64(i + 1)
		require.Equal(t, off, r.GetOffset())
		require.Equal(t, fmt.Sprintf("k%d", off), string(r.GetKey()))
		require.Equal(t, fmt.Sprintf("v%d", off), string(r.GetValue()))
		require.EqualValues(t, 2, r.GetLeaderEpoch())
	}
	require.Len(t, recs[1].GetHeaders(), 1, "offset 2 is record 2 of its batch")
	require.Equal(t, "h", recs[1].GetHeaders()[0].GetKey())
	require.Empty(t, recs[3].GetHeaders(), "offset 4 is record 1 of its batch")
	for i := range data {
		data[i] = 0
	}
	require.Equal(t, "k1", string(recs[0].GetKey()), "a copy, not the fetched bytes")
	require.Equal(t, "x", string(recs[1].GetHeaders()[0].GetValue()))
	require.Equal(t, "v8", string(recs[7].GetValue()))

	_, err = decodeRecords(mk(0, 2, record.CodecNone)[:30], 0)
	require.ErrorIs(t, err, record.ErrTruncated)

	plain := func(n int) []byte {
		recs := make([]record.Record, n)
		for i := range recs {
			recs[i] = record.Record{OffsetDelta: int32(i), Key: []byte("key"), Value: make([]byte, 100)}
		}
		b, err := record.AppendBatch(nil, record.BatchHeader{}, recs)
		require.NoError(t, err)
		return b
	}
	var allocs []float64
	for _, n := range []int{10, 1000} {
		d := plain(n)
		allocs = append(allocs, testing.AllocsPerRun(10, func() {
			if _, err := decodeRecords(d, 0); err != nil {
				t.Fatal(err)
			}
		}))
	}
	t.Logf("allocations for 10, 1000 records: %v", allocs)
	require.Equal(t, allocs[0], allocs[1], "allocations do not grow with records: %v", allocs)
}
